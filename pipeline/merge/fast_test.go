package merge

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
)

// TestAddLowRank32Rows checks the float32 kernel (four-row vector part, row and column tails) against a plain
// loop of rounded multiplies and adds, on odd sizes.
func TestAddLowRank32Rows(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 32))
	for _, n := range []int{1, 3, 4, 5, 8, 9} {
		for _, cols := range []int{1, 7, 15, 16, 17, 40, 130, 2048} {
			for _, r := range []int{1, 3, 16, 70} {
				x := make([]float32, n*cols)
				u := make([]float32, n*r)
				v := make([]float32, r*cols)
				for _, s := range [][]float32{x, u, v} {
					for i := range s {
						s[i] = float32(rng.NormFloat64())
					}
				}
				want := append([]float32(nil), x...)
				for i := range n {
					for j := range cols {
						a := want[i*cols+j]
						for k := range r {
							p := u[i*r+k] * v[k*cols+j]
							a = float32(p) + a
						}
						want[i*cols+j] = a
					}
				}
				addLowRank32Rows(x, u, v, n, cols, r)
				for i := range x {
					if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n %d cols %d r %d: x[%d] = %v, want %v", n, cols, r, i, x[i], want[i])
					}
				}
			}
		}
	}
}

// TestEncode16 checks the vector float32→bf16 encoder against the scalar rounding, with ties, NaN, Inf and
// overflow mixed in, and the F16 path against half.
func TestEncode16(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 16))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 63, 1000} {
		for trial := 0; trial < 50; trial++ {
			x := make([]float32, n)
			for i := range x {
				switch rng.IntN(8) {
				case 0, 1: // on, just below and just above bf16 midpoints; exact bf16 values
					low := []uint32{0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF}[rng.IntN(5)]
					x[i] = math.Float32frombits(rng.Uint32()&0xBFFF0000 | low)
				case 2:
					x[i] = math.Float32frombits(0x7F7F8000 | rng.Uint32()&0x80007FFF) // rounds to ±Inf or not
				default:
					x[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
				}
			}
			if n > 0 && trial%5 == 0 {
				x[rng.IntN(n)] = []float32{float32(math.NaN()), float32(math.Inf(-1)), math.Float32frombits(0xFFFFFFFF)}[trial%3]
			}
			got := make([]byte, 2*n)
			want := make([]byte, 2*n)
			gi := encode16("BF16", got, x)
			wi := -1
			for j, v := range x {
				b := math.Float32bits(v)
				h := uint16((uint64(b) + 0x7FFF + uint64(b>>16&1)) >> 16)
				if b&0x7F800000 == 0x7F800000 || h&0x7F80 == 0x7F80 {
					wi = j
					break
				}
				binary.LittleEndian.PutUint16(want[2*j:], h)
			}
			if gi != wi {
				t.Fatalf("n %d: first non-finite at %d, want %d", n, gi, wi)
			}
			if wi < 0 && !bytes.Equal(got, want) {
				t.Fatalf("n %d: vector and scalar bf16 differ", n)
			}
		}
	}
	x := []float32{1, 65504, 65520, -1e-8, 0.1}
	b := make([]byte, 2*len(x))
	if j := encode16("F16", b, x); j != 2 {
		t.Fatalf("F16: first non-finite at %d, want 2 (65520 rounds to Inf)", j)
	}
	if got := binary.LittleEndian.Uint16(b[2:]); got != 0x7BFF {
		t.Fatalf("F16 65504 = %#04x", got)
	}
}

// TestDecode16 checks the vector bf16→float32 decoder on every bit pattern, at an odd length.
func TestDecode16(t *testing.T) {
	b := make([]byte, 2*65536+6)
	for i := 0; i < 65536; i++ {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(i))
	}
	got := make([]float32, 65539)
	decode16("BF16", got, b)
	for i, v := range got {
		h := binary.LittleEndian.Uint16(b[2*i:])
		if math.Float32bits(v) != uint32(h)<<16 {
			t.Fatalf("bf16 %#04x: %#08x", h, math.Float32bits(v))
		}
	}
}

func BenchmarkAddLowRank32Rows(b *testing.B) {
	const n, cols, r = 32, 2048, 16
	x := make([]float32, n*cols)
	u := make([]float32, n*r)
	v := make([]float32, r*cols)
	b.SetBytes(n * cols * 2)
	for b.Loop() {
		addLowRank32Rows(x, u, v, n, cols, r)
	}
}

// TestFusedBF16Rows checks the one-pass BF16 kernel against decode16 + addLowRank32Rows + encode16, bit for
// bit, out of place and in place, and that it stops before a group of rows that overflows.
func TestFusedBF16Rows(t *testing.T) {
	if !haveAVX2FMA {
		t.Skip("no vector kernel here")
	}
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{4, 5, 8, 11} {
		for _, cols := range []int{16, 48, 2048} {
			for _, r := range []int{1, 3, 16, 70} {
				for _, overflow := range []bool{false, true} {
					src := make([]byte, 2*n*cols)
					for i := 0; i < n*cols; i++ {
						f := float32(rng.NormFloat64() * 0.05)
						if i%97 == 0 { // values on and beside bf16 midpoints after the update
							f = math.Float32frombits(math.Float32bits(f) | 0x8000)
						}
						binary.LittleEndian.PutUint16(src[2*i:], half.F32ToBF16(f))
					}
					u := make([]float32, n*r)
					v := make([]float32, r*cols)
					for i := range u {
						u[i] = float32(rng.NormFloat64() * 0.01)
					}
					for i := range v {
						v[i] = float32(rng.NormFloat64() * 0.02)
					}
					badRow := -1
					if overflow {
						badRow = rng.IntN(n)
						u[badRow*r] = 1e38
						v[rng.IntN(cols)] = 1e38
					}
					x := make([]float32, n*cols)
					decode16("BF16", x, src)
					addLowRank32Rows(x, u, v, n, cols, r)
					want := make([]byte, len(src))
					wj := encode16("BF16", want, x)
					got := make([]byte, len(src))
					done := fusedBF16Rows(got, src, u, v, n, cols, r)
					inPlace := append([]byte(nil), src...)
					doneIn := fusedBF16Rows(inPlace, inPlace, u, v, n, cols, r)
					if done != doneIn {
						t.Fatalf("n %d cols %d r %d: %d rows out of place, %d in place", n, cols, r, done, doneIn)
					}
					wantDone := n &^ 3
					if wj >= 0 && wj/cols < wantDone {
						wantDone = wj / cols &^ 3
					}
					if wj >= 0 && done > wj/cols {
						t.Fatalf("n %d cols %d r %d: went past the overflow in row %d (%d rows done)", n, cols, r, wj/cols, done)
					}
					if done != wantDone {
						t.Fatalf("n %d cols %d r %d overflow %v: %d rows done, want %d", n, cols, r, overflow, done, wantDone)
					}
					if !bytes.Equal(got[:2*done*cols], want[:2*done*cols]) || !bytes.Equal(inPlace[:2*done*cols], want[:2*done*cols]) {
						t.Fatalf("n %d cols %d r %d: fused rows differ from the three-pass path", n, cols, r)
					}
				}
			}
		}
	}
}

func BenchmarkRowsBF16(b *testing.B) {
	const n, cols, r = 32, 2048, 16
	src := make([]byte, 2*n*cols)
	dst := make([]byte, 2*n*cols)
	u := make([]float32, n*r)
	v := make([]float32, r*cols)
	x := make([]float32, n*cols)
	b.Run("fused", func(b *testing.B) {
		b.SetBytes(2 * n * cols)
		for b.Loop() {
			fusedBF16Rows(dst, src, u, v, n, cols, r)
		}
	})
	b.Run("three-pass", func(b *testing.B) {
		b.SetBytes(2 * n * cols)
		for b.Loop() {
			decode16("BF16", x, src)
			addLowRank32Rows(x, u, v, n, cols, r)
			encode16("BF16", dst, x)
		}
	})
}
