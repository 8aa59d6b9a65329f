package half

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The conversion goldens are ggml's own outputs, stored with the quantization
// goldens (never regenerated; see that folder's PROVENANCE.md).
var goldenDir = filepath.Join("..", "..", "pipeline", "quantize", "kquant", "testdata", "ggml-golden", "convert")

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatalf("read golden %s: %v", name, err)
	}
	return b
}

func goldenInputs(t *testing.T) []float32 {
	b := readGolden(t, "inputs.f32")
	if len(b) != 5058*4 {
		t.Fatalf("inputs.f32: %d bytes, want %d", len(b), 5058*4)
	}
	in := make([]float32, len(b)/4)
	if n := DecodeF32LE(in, b); n != len(in) {
		t.Fatalf("DecodeF32LE decoded %d, want %d", n, len(in))
	}
	return in
}

func TestF32ToF16Golden(t *testing.T) {
	in := goldenInputs(t)
	want := readGolden(t, "fp32_to_fp16.f16")
	got := make([]byte, 2*len(in))
	if n := EncodeF16LE(got, in); n != len(in) {
		t.Fatalf("EncodeF16LE encoded %d, want %d", n, len(in))
	}
	row := make([]uint16, len(in))
	F32ToF16Row(row, in)
	bad := 0
	for i, v := range in {
		w := binary.LittleEndian.Uint16(want[2*i:])
		g := binary.LittleEndian.Uint16(got[2*i:])
		if g != w || row[i] != w || F32ToF16(v) != w {
			if bad++; bad <= 10 {
				t.Errorf("f32 %#08x -> f16: got %#04x (row %#04x), want %#04x", math.Float32bits(v), g, row[i], w)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d f32->f16 conversions differ", bad, len(in))
	}
}

func TestF32ToBF16Golden(t *testing.T) {
	in := goldenInputs(t)
	for _, name := range []string{"fp32_to_bf16.bf16", "fp32_to_bf16_ref.bf16"} {
		want := readGolden(t, name)
		got := make([]byte, 2*len(in))
		EncodeBF16LE(got, in)
		row := make([]uint16, len(in))
		F32ToBF16Row(row, in)
		bad := 0
		for i, v := range in {
			w := binary.LittleEndian.Uint16(want[2*i:])
			g := binary.LittleEndian.Uint16(got[2*i:])
			if g != w || row[i] != w || F32ToBF16(v) != w {
				if bad++; bad <= 10 {
					t.Errorf("%s: f32 %#08x -> bf16: got %#04x, want %#04x", name, math.Float32bits(v), g, w)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d conversions differ", name, bad, len(in))
		}
	}
}

func TestF16ToF32Golden(t *testing.T) {
	src := readGolden(t, "fp16_all.f16")
	want := readGolden(t, "fp16_to_fp32_all.f32")
	if len(src) != 1<<17 || len(want) != 1<<18 {
		t.Fatalf("golden sizes %d, %d", len(src), len(want))
	}
	got := make([]float32, 1<<16)
	if n := DecodeF16LE(got, src); n != 1<<16 {
		t.Fatalf("DecodeF16LE decoded %d", n)
	}
	u := make([]uint16, 1<<16)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(src[2*i:])
	}
	row := make([]float32, 1<<16)
	F16ToF32Row(row, u)
	for i := range got {
		w := binary.LittleEndian.Uint32(want[4*i:])
		if math.Float32bits(got[i]) != w || math.Float32bits(row[i]) != w || math.Float32bits(F16ToF32(u[i])) != w ||
			f16ToF32Bits(u[i]) != w {
			t.Fatalf("f16 %#04x -> f32: got %#08x, want %#08x", u[i], math.Float32bits(got[i]), w)
		}
	}
}

// TestF16RoundTrip: every non-NaN f16 survives f16 -> f32 -> f16, and the
// midpoint between neighbours rounds to the even one.
func TestF16RoundTrip(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if f != f {
			if got := F32ToF16(f); got != uint16(h)&0x8000|0x7E00 {
				t.Fatalf("NaN %#04x -> %#04x", h, got)
			}
			continue
		}
		if got := F32ToF16(f); got != uint16(h) {
			t.Fatalf("round trip %#04x -> %v -> %#04x", h, f, got)
		}
		if h&0x7FFF < 0x7BFF { // finite with a finite successor of the same sign
			next := F16ToF32(uint16(h + 1))
			mid := float32((float64(f) + float64(next)) / 2)
			want := uint16(h)
			if h&1 == 1 {
				want = uint16(h + 1)
			}
			if got := F32ToF16(mid); got != want {
				t.Fatalf("midpoint of %#04x,%#04x = %v -> %#04x, want %#04x", h, h+1, mid, got, want)
			}
		}
	}
}

func TestBF16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BF16ToF32(uint16(h))
		if f != f {
			if got := F32ToBF16(f); got != uint16(h)|0x40 {
				t.Fatalf("bf16 NaN %#04x -> %#04x", h, got)
			}
			continue
		}
		if got := F32ToBF16(f); got != uint16(h) {
			t.Fatalf("bf16 round trip %#04x -> %#04x", h, got)
		}
	}
}

func TestShortSlices(t *testing.T) {
	dst := make([]float32, 4)
	if n := DecodeF16LE(dst, []byte{0x00, 0x3C, 0x00}); n != 1 || dst[0] != 1 {
		t.Fatalf("DecodeF16LE odd bytes: n=%d v=%v", n, dst[0])
	}
	if n := DecodeBF16LE(dst[:1], []byte{0x80, 0x3F, 0x00, 0x40}); n != 1 || dst[0] != 1 {
		t.Fatalf("DecodeBF16LE short dst: n=%d v=%v", n, dst[0])
	}
	b := make([]byte, 7)
	if n := EncodeF32LE(b, []float32{1, 2}); n != 1 {
		t.Fatalf("EncodeF32LE short dst: n=%d", n)
	}
	if n := EncodeBF16LE(b, []float32{1, 2, 3, 4}); n != 3 || binary.LittleEndian.Uint16(b[4:]) != 0x4040 {
		t.Fatalf("EncodeBF16LE: n=%d", n)
	}
}

func FuzzF32ToF16(f *testing.F) {
	for _, v := range []uint32{0, 0x80000000, 0x7F800000, 0x7FC00001, 0x477FF000, 0x477FEFFF, 0x33000000, 0x33000001, 0x387FE000} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		v := math.Float32frombits(bits)
		h := F32ToF16(v)
		back := F16ToF32(h)
		if v != v {
			if h&0x7FFF != 0x7E00 {
				t.Fatalf("NaN -> %#04x", h)
			}
			return
		}
		// The result must be one of the two f16 neighbours of v (or Inf on overflow),
		// and no other f16 may be strictly closer.
		d := math.Abs(float64(back) - float64(v))
		for _, nb := range []uint16{h - 1, h + 1} {
			if nb&0x7C00 == 0x7C00 && nb&0x3FF != 0 {
				continue
			}
			if nf := F16ToF32(nb); !math.IsInf(float64(back), 0) && math.Abs(float64(nf)-float64(v)) < d {
				t.Fatalf("%v -> %#04x (%v), but %#04x (%v) is closer", v, h, back, nb, nf)
			}
		}
	})
}

func BenchmarkDecodeF16LE(b *testing.B) {
	src := make([]byte, 2<<16)
	for i := 0; i < 1<<16; i++ {
		binary.LittleEndian.PutUint16(src[2*i:], uint16(i*7919))
	}
	dst := make([]float32, 1<<16)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		DecodeF16LE(dst, src)
	}
}

func BenchmarkEncodeF16LE(b *testing.B) {
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = float32(i-30000) * 0.37
	}
	dst := make([]byte, 2*len(src))
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		EncodeF16LE(dst, src)
	}
}
