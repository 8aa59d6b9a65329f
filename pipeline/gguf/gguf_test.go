package gguf

import (
	"bytes"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/golden"
)

// sample builds a plan with every value type, a nested array and three tensors of different types.
func sample(t testing.TB) (*Writer, map[string][]byte) {
	w := NewWriter()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.SetKV("general.architecture", String("qwen3")))
	must(w.SetKV("u8", Uint8(7)))
	must(w.SetKV("i8", Int8(-7)))
	must(w.SetKV("u16", Uint16(65000)))
	must(w.SetKV("i16", Int16(-32000)))
	must(w.SetKV("u32", Uint32(1<<31)))
	must(w.SetKV("i32", Int32(-1<<30)))
	must(w.SetKV("f32", Float32(1.5e-6)))
	must(w.SetKV("b", Bool(true)))
	must(w.SetKV("u64", Uint64(1<<60)))
	must(w.SetKV("i64", Int64(-1<<60)))
	must(w.SetKV("f64", Float64(math.Pi)))
	must(w.SetKV("tokens", Strings([]string{"a", "b c", "", "한국어", "😀"})))
	must(w.SetKV("types", Int32s([]int32{1, 2, 3})))
	must(w.SetKV("bools", Bools([]bool{true, false})))
	must(w.SetKV("nested", Arrays([]Array{{ValueInt32, []int32{1, 2}}, {ValueInt32, []int32{}}})))
	bodies := map[string][]byte{
		"token_embd.weight":      bytes.Repeat([]byte{1, 2}, 8*4),
		"blk.0.attn_norm.weight": bytes.Repeat([]byte{3}, 8*4),
		"blk.0.ffn_down.weight":  bytes.Repeat([]byte{5}, 2*144),
	}
	must(w.AddTensor("token_embd.weight", TypeF16, []uint64{8, 4}))
	must(w.AddTensor("blk.0.attn_norm.weight", TypeF32, []uint64{8}))
	must(w.AddTensor("blk.0.ffn_down.weight", TypeQ4_K, []uint64{256, 2}))
	return w, bodies
}

func writeSample(t testing.TB) []byte {
	w, bodies := sample(t)
	var buf bytes.Buffer
	if err := w.WriteHeader(&buf); err != nil {
		t.Fatal(err)
	}
	for _, ti := range w.Tensors() {
		if err := w.WriteTensor(ti.Name, bodies[ti.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	w, bodies := sample(t)
	data := writeSample(t)
	_, total := w.Layout()
	if int64(len(data)) != total {
		t.Fatalf("file is %d bytes, layout said %d", len(data), total)
	}
	f, err := Open(bytes.NewReader(data), int64(len(data)), "sample.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.KVs, w.KVs()) {
		t.Errorf("KVs differ:\n got %v\nwant %v", f.KVs, w.KVs())
	}
	if f.DataOffset%32 != 0 {
		t.Errorf("data offset %d not aligned", f.DataOffset)
	}
	for _, ti := range w.Tensors() {
		got, ok := f.Tensor(ti.Name)
		if !ok || !reflect.DeepEqual(got, ti) {
			t.Errorf("tensor %s: got %+v want %+v", ti.Name, got, ti)
		}
		r, _ := f.TensorReader(ti.Name)
		b := make([]byte, r.Size())
		r.ReadAt(b, 0)
		if !bytes.Equal(b, bodies[ti.Name]) {
			t.Errorf("tensor %s body differs", ti.Name)
		}
	}
	// Deterministic: writing again gives the same bytes.
	if again := writeSample(t); !bytes.Equal(again, data) {
		t.Error("second write differs")
	}
	if f.Architecture() != "qwen3" {
		t.Errorf("architecture %q", f.Architecture())
	}
	if v, ok := f.Uint("u32"); !ok || v != 1<<31 {
		t.Errorf("u32 = %d %v", v, ok)
	}
}

func TestDumpGolden(t *testing.T) {
	data := writeSample(t)
	f, err := Open(bytes.NewReader(data), int64(len(data)), "sample.gguf")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := Dump(&got, f, true); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "sample.dump"), got.Bytes())
}

func TestMalformed(t *testing.T) {
	good := writeSample(t)
	f, _ := Open(bytes.NewReader(good), int64(len(good)), "x")
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not a GGUF file"},
		{"magic", append([]byte("GGUX"), good[4:]...), "magic"},
		{"version", patch(good, 4, []byte{9, 0, 0, 0}), "version 9"},
		{"truncated header", good[:300], "unexpected end of file"},
		{"truncated data", good[:len(good)-40], "beyond the end of the file"},
		{"huge kv count", patch(good, 16, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f}), "metadata count"},
		{"huge tensor count", patch(good, 8, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0}), "tensor count"},
		{"huge string", patch(good, 24, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}), "string length"},
	}
	_ = f
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(bytes.NewReader(c.data), int64(len(c.data)), "bad.gguf")
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.gguf") {
				t.Errorf("error %q, want it to contain %q and the file name", err, c.want)
			}
			var fe *FormatError
			var ue *UnsupportedError
			if !errors.As(err, &fe) && !errors.As(err, &ue) {
				t.Errorf("error %T is neither FormatError nor UnsupportedError", err)
			}
		})
	}
}

func TestBadOffset(t *testing.T) {
	w := NewWriter()
	w.AddTensor("a", TypeF32, []uint64{8})
	w.AddTensor("b", TypeF32, []uint64{8})
	var buf bytes.Buffer
	w.WriteHeader(&buf)
	w.WriteTensor("a", make([]byte, 32))
	w.WriteTensor("b", make([]byte, 32))
	w.Finish()
	data := buf.Bytes()
	// The second tensor's offset is the last 8 bytes of the header before padding; find and corrupt it.
	off := bytes.LastIndex(data[:w.headerSize], []byte{32, 0, 0, 0, 0, 0, 0, 0})
	bad := patch(data, off, []byte{64, 0, 0, 0, 0, 0, 0, 0})
	_, err := Open(bytes.NewReader(bad), int64(len(bad)), "off.gguf")
	if err == nil || !strings.Contains(err.Error(), `tensor "b" has data offset 64, expected 32`) {
		t.Fatalf("got %v", err)
	}
}

func TestWriterChecks(t *testing.T) {
	w := NewWriter()
	if err := w.AddTensor(strings.Repeat("x", 64), TypeF32, []uint64{1}); err == nil {
		t.Error("long name accepted")
	}
	if err := w.AddTensor("q", TypeQ4_K, []uint64{100, 2}); err == nil {
		t.Error("row not a multiple of the block size accepted")
	}
	if err := w.SetKV("general.alignment", Uint32(48)); err == nil {
		t.Error("non power of two alignment accepted")
	}
	if err := w.SetKV("k", Value{ValueUint32, "x"}); err == nil {
		t.Error("mistyped value accepted")
	}
	w.AddTensor("a", TypeF32, []uint64{4})
	w.AddTensor("b", TypeF32, []uint64{4})
	var buf bytes.Buffer
	w.WriteHeader(&buf)
	if err := w.WriteTensor("b", make([]byte, 16)); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Errorf("out of order write: %v", err)
	}
}

func TestAlignment(t *testing.T) {
	w := NewWriter()
	if err := w.SetKV("general.alignment", Uint32(64)); err != nil {
		t.Fatal(err)
	}
	w.AddTensor("a", TypeF32, []uint64{3})
	w.AddTensor("b", TypeF32, []uint64{3})
	var buf bytes.Buffer
	w.WriteHeader(&buf)
	w.WriteTensor("a", make([]byte, 12))
	w.WriteTensor("b", make([]byte, 12))
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	f, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "a.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment != 64 || f.DataOffset%64 != 0 || f.Tensors[1].Offset != 64 {
		t.Errorf("alignment %d data %d offset %d", f.Alignment, f.DataOffset, f.Tensors[1].Offset)
	}
}

func TestParseTypes(t *testing.T) {
	for _, ft := range FileTypes() {
		got, err := ParseFileType(strings.ToLower(ft.String()))
		if err != nil || got != ft {
			t.Errorf("ParseFileType(%q) = %v, %v", ft, got, err)
		}
	}
	if _, err := ParseFileType("q4_k_x"); err == nil || !strings.Contains(err.Error(), "Q4_K_M") {
		t.Errorf("unknown type error should list valid names: %v", err)
	}
	if ty, _ := ParseType("q6_k"); ty != TypeQ6_K {
		t.Errorf("ParseType q6_k = %v", ty)
	}
	if n, err := TypeQ4_K.RowBytes(512); err != nil || n != 288 {
		t.Errorf("Q4_K row bytes %d %v", n, err)
	}
}

func patch(b []byte, off int, p []byte) []byte {
	c := append([]byte(nil), b...)
	copy(c[off:], p)
	return c
}
