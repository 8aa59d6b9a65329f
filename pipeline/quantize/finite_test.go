package quantize

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// poisonGGUF writes a copy of in with element idx of tensor name set to v.
func poisonGGUF(t *testing.T, in, out, name string, idx int64, v float32) {
	t.Helper()
	f, err := gguf.OpenFile(in)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor(name)
	off := f.DataOffset + int64(ti.Offset)
	f.Close()
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	switch ti.Type {
	case gguf.TypeF32:
		binary.LittleEndian.PutUint32(data[off+4*idx:], math.Float32bits(v))
	case gguf.TypeF16:
		binary.LittleEndian.PutUint16(data[off+2*idx:], half.F32ToF16(v))
	default:
		t.Fatalf("type %s", ti.Type)
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRefusesNonFiniteWeights: NaN or infinite inputs are refused (as llama-quantize does) whether the tensor is
// quantized (F16 → Q4_K) or copied unchanged (an F16 tensor kept F16 by a --tensor-type rule), and nothing is
// written. NaN norms are already refused when the input is opened (package modelcheck reads them).
func TestRefusesNonFiniteWeights(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in-F16.gguf")
	writeF16Model(t, in, 1, 256, 256, 300)
	keep, err := plan.ParseTensorTypeRule("ffn_down=f16")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tensor string
		idx    int64
		v      float32
		ov     plan.Overrides
	}{
		{"blk.0.ffn_up.weight", 300, float32(math.NaN()), plan.Overrides{}},
		{"blk.0.ffn_down.weight", 5, float32(math.Inf(-1)), plan.Overrides{}},
		{"blk.0.ffn_down.weight", 60000, float32(math.NaN()), plan.Overrides{TensorTypes: []plan.TensorTypeRule{keep}}},
	} {
		bad := filepath.Join(dir, "bad.gguf")
		poisonGGUF(t, in, bad, c.tensor, c.idx, c.v)
		src, err := OpenGGUF(bad)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out", "q.gguf")
		os.MkdirAll(filepath.Dir(out), 0o755)
		_, err = Run(context.Background(), Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: out, Threads: 2, Overrides: c.ov}, nil)
		src.Close()
		var de *DataError
		if !errors.As(err, &de) || de.Tensor != c.tensor || de.Index != c.idx || !strings.Contains(err.Error(), c.tensor) {
			t.Fatalf("%s[%d] = %v: err %v, want a DataError at that element", c.tensor, c.idx, c.v, err)
		}
		if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 0 {
			t.Fatalf("left %v", ents)
		}
	}
	for _, norm := range []string{"output_norm.weight", "blk.0.attn_norm.weight"} {
		bad := filepath.Join(dir, "bad.gguf")
		poisonGGUF(t, in, bad, norm, 7, float32(math.Inf(1)))
		if _, err := OpenGGUF(bad); err == nil || !strings.Contains(err.Error(), norm) || !pipeline.IsInputError(err) {
			t.Fatalf("%s +Inf: OpenGGUF: %v", norm, err)
		}
	}
}

// TestCheckFinite finds the first non-finite value (NaN of any payload, ±Inf) at every position of rows of
// every length up to 100 (the AVX2 check takes 32 values at a time, the rest go through the plain loop), and
// passes rows of finite extremes (largest, subnormal, signed zeros).
func TestCheckFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7F800001), math.Float32frombits(0xFFFFFFFF)}
	good := []float32{math.MaxFloat32, -math.MaxFloat32, 1e-45, -1e-45, 0, float32(math.Copysign(0, -1)), 1.17549435e-38, 3}
	for n := 0; n <= 100; n++ {
		rows := make([]float32, n)
		for i := range rows {
			rows[i] = good[i%len(good)]
		}
		if err := checkFinite("t", 5, rows); err != nil {
			t.Fatalf("n=%d finite rows: %v", n, err)
		}
		for pos := 0; pos < n; pos++ {
			for _, b := range bad {
				r := append([]float32(nil), rows...)
				r[pos] = b
				if pos+1 < n {
					r[n-1] = bad[0] // a later one must not be reported
				}
				var de *DataError
				if err := checkFinite("t", 5, r); !errors.As(err, &de) || de.Index != int64(5+pos) || de.Tensor != "t" {
					t.Fatalf("n=%d, %v at %d: err = %v", n, b, pos, err)
				}
			}
		}
	}
}

// TestCheckFiniteRandomBits compares checkFinite with a value-by-value test on rows of random bit patterns
// (every exponent, so NaNs and infinities among finite extremes) and of finite values with one rare
// non-finite value, at odd offsets and lengths.
func TestCheckFiniteRandomBits(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 5))
	for it := 0; it < 3000; it++ {
		off, n := r.IntN(8), r.IntN(300)
		buf := make([]float32, off+n)
		rows := buf[off:]
		for i := range rows {
			if it%2 == 0 {
				rows[i] = math.Float32frombits(r.Uint32()&^0x7F800000 | uint32(r.IntN(255))<<23)
			} else {
				rows[i] = math.Float32frombits(r.Uint32())
			}
		}
		if it%2 == 0 && n > 0 && r.IntN(2) == 0 {
			rows[r.IntN(n)] = math.Float32frombits(0x7F800000 | r.Uint32()&0x807FFFFF)
		}
		want := int64(-1)
		for i, v := range rows {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				want = int64(i)
				break
			}
		}
		err := checkFinite("t", 0, rows)
		var de *DataError
		switch {
		case want < 0 && err != nil:
			t.Fatalf("iteration %d: finite row of %d values: %v", it, n, err)
		case want >= 0 && (!errors.As(err, &de) || de.Index != want):
			t.Fatalf("iteration %d: first non-finite value at %d of %d: err = %v", it, want, n, err)
		}
	}
}
