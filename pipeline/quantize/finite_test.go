package quantize

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
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
// quantized (blk.0.ffn_up, F16 → Q4_K) or copied unchanged (an F32 norm), and nothing is written.
func TestRefusesNonFiniteWeights(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in-F16.gguf")
	writeF16Model(t, in, 1, 256, 256, 300)
	for _, c := range []struct {
		tensor string
		idx    int64
		v      float32
	}{
		{"blk.0.ffn_up.weight", 300, float32(math.NaN())},
		{"blk.0.ffn_down.weight", 5, float32(math.Inf(-1))},
		{"output_norm.weight", 7, float32(math.Inf(1))},
		{"blk.0.attn_norm.weight", 255, float32(math.NaN())},
	} {
		bad := filepath.Join(dir, "bad.gguf")
		poisonGGUF(t, in, bad, c.tensor, c.idx, c.v)
		src, err := OpenGGUF(bad)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out", "q.gguf")
		os.MkdirAll(filepath.Dir(out), 0o755)
		_, err = Run(context.Background(), Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: out, Threads: 2}, nil)
		src.Close()
		var de *DataError
		if !errors.As(err, &de) || de.Tensor != c.tensor || de.Index != c.idx || !strings.Contains(err.Error(), c.tensor) {
			t.Fatalf("%s[%d] = %v: err %v, want a DataError at that element", c.tensor, c.idx, c.v, err)
		}
		if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 0 {
			t.Fatalf("left %v", ents)
		}
	}
}
