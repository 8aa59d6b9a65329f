package half

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestRowsMatchScalar runs the row and byte-slice conversions (vector paths
// where the CPU has them) at every length up to 80 and odd offsets against
// the scalar conversions, on random bit patterns (NaNs of every payload,
// subnormals, Infs included).
func TestRowsMatchScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 1))
	for n := 0; n <= 80; n++ {
		for off := 0; off < 3; off++ {
			h := make([]uint16, off+n)
			hb := make([]byte, 2*(off+n)+1)
			f := make([]float32, off+n)
			for i := range h {
				h[i] = uint16(r.Uint32())
				binary.LittleEndian.PutUint16(hb[1+2*i:], h[i])
				f[i] = math.Float32frombits(r.Uint32())
				if r.IntN(4) == 0 {
					f[i] = F16ToF32(h[i]) // exact in f16
				}
			}
			got := make([]float32, n)
			F16ToF32Row(got, h[off:])
			for i := range got {
				if w := f16ToF32Bits(h[off+i]); math.Float32bits(got[i]) != w {
					t.Fatalf("F16ToF32Row n=%d off=%d [%d]: %#04x -> %#08x, want %#08x", n, off, i, h[off+i], math.Float32bits(got[i]), w)
				}
			}
			clear(got)
			DecodeF16LE(got, hb[1+2*off:1+2*(off+n)])
			for i := range got {
				if w := f16ToF32Bits(h[off+i]); math.Float32bits(got[i]) != w {
					t.Fatalf("DecodeF16LE n=%d off=%d [%d]: %#08x, want %#08x", n, off, i, math.Float32bits(got[i]), w)
				}
			}
			clear(got)
			BF16ToF32Row(got, h[off:])
			for i := range got {
				if w := uint32(h[off+i]) << 16; math.Float32bits(got[i]) != w {
					t.Fatalf("BF16ToF32Row n=%d off=%d [%d]: %#08x, want %#08x", n, off, i, math.Float32bits(got[i]), w)
				}
			}
			clear(got)
			DecodeBF16LE(got, hb[1+2*off:1+2*(off+n)])
			for i := range got {
				if w := uint32(h[off+i]) << 16; math.Float32bits(got[i]) != w {
					t.Fatalf("DecodeBF16LE n=%d off=%d [%d]: %#08x, want %#08x", n, off, i, math.Float32bits(got[i]), w)
				}
			}
			ub := make([]uint16, n)
			F32ToBF16Row(ub, f[off:])
			bb := make([]byte, 2*n+1)
			EncodeBF16LE(bb[1:], f[off:])
			for i := range ub {
				w := F32ToBF16(f[off+i])
				if ub[i] != w || binary.LittleEndian.Uint16(bb[1+2*i:]) != w {
					t.Fatalf("F32ToBF16 rows n=%d off=%d [%d]: %#08x -> %#04x / %#04x, want %#04x", n, off, i,
						math.Float32bits(f[off+i]), ub[i], binary.LittleEndian.Uint16(bb[1+2*i:]), w)
				}
			}
			u := make([]uint16, n)
			F32ToF16Row(u, f[off:])
			b := make([]byte, 2*n+1)
			EncodeF16LE(b[1:], f[off:])
			for i := range u {
				w := f32BitsToF16(math.Float32bits(f[off+i]))
				if u[i] != w || binary.LittleEndian.Uint16(b[1+2*i:]) != w {
					t.Fatalf("F32ToF16 rows n=%d off=%d [%d]: %#08x -> %#04x / %#04x, want %#04x", n, off, i,
						math.Float32bits(f[off+i]), u[i], binary.LittleEndian.Uint16(b[1+2*i:]), w)
				}
			}
		}
	}
}

// TestEncodeF16Sweep compares EncodeF16LE (the vector path for groups
// without a NaN) with the scalar rounding on every 61st float32 bit
// pattern and on every pattern around the f16 rounding boundaries.
func TestEncodeF16Sweep(t *testing.T) {
	stride := uint64(61)
	if testing.Short() {
		stride = 997
	}
	const batch = 1 << 14
	src := make([]float32, 0, batch)
	dst := make([]byte, 2*batch)
	flush := func() {
		EncodeF16LE(dst, src)
		for i, v := range src {
			if g, w := binary.LittleEndian.Uint16(dst[2*i:]), f32BitsToF16(math.Float32bits(v)); g != w {
				t.Fatalf("f32 %#08x -> %#04x, want %#04x", math.Float32bits(v), g, w)
			}
		}
		src = src[:0]
	}
	add := func(b uint32) {
		src = append(src, math.Float32frombits(b))
		if len(src) == batch {
			flush()
		}
	}
	for b := uint64(0); b < 1<<32; b += stride {
		add(uint32(b))
	}
	// Every f16 value and the float32 patterns next to it and to the
	// midpoints between neighbours, both signs.
	for h := 0; h < 1<<15; h++ {
		c := f16ToF32Bits(uint16(h))
		n := f16ToF32Bits(uint16(h + 1))
		mid := math.Float32bits(float32((float64(math.Float32frombits(c)) + float64(math.Float32frombits(n))) / 2))
		for _, b := range []uint32{c, mid} {
			for d := uint32(0); d < 3; d++ {
				for _, s := range []uint32{0, 1 << 31} {
					add((b + d) | s)
					add((b - d) | s)
				}
			}
		}
	}
	flush()
}

// TestEncodeBF16Sweep compares EncodeBF16LE (the vector path) with
// F32ToBF16 on every 61st float32 bit pattern and every pattern around the
// bf16 rounding boundaries (ties both ways, the largest finite values, the
// NaN boundary).
func TestEncodeBF16Sweep(t *testing.T) {
	stride := uint64(61)
	if testing.Short() {
		stride = 997
	}
	const batch = 1 << 14
	src := make([]float32, 0, batch)
	dst := make([]byte, 2*batch)
	flush := func() {
		EncodeBF16LE(dst, src)
		for i, v := range src {
			if g, w := binary.LittleEndian.Uint16(dst[2*i:]), F32ToBF16(v); g != w {
				t.Fatalf("f32 %#08x -> %#04x, want %#04x", math.Float32bits(v), g, w)
			}
		}
		src = src[:0]
	}
	add := func(b uint32) {
		src = append(src, math.Float32frombits(b))
		if len(src) == batch {
			flush()
		}
	}
	for b := uint64(0); b < 1<<32; b += stride {
		add(uint32(b))
	}
	for h := uint32(0); h < 1<<16; h++ {
		for _, d := range []uint32{0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF} {
			add(h<<16 | d)
		}
	}
	flush()
}
