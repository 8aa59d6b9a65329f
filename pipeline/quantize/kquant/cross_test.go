package kquant

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

// specialValues are the inputs where float edge cases live.
var specialValues = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1, 0.5, -0.5, 0.25, 1e-39, -1e-39, 1e-45, 1e-30, 6e-8, 65504, 65520, 1e30, -1e30,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, 4194303, 4194304,
}

// crossInputs makes blocks of many shapes: normal, scaled over many
// magnitudes, constant, sparse, quarter grid, and with special values.
func crossInputs(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	switch kind := r.IntN(9); kind {
	case 0, 1:
		s := math.Pow(10, float64(r.IntN(16)-10))
		for i := range x {
			x[i] = float32(r.NormFloat64() * s)
		}
	case 2:
		c := float32(r.NormFloat64())
		for i := range x {
			x[i] = c
		}
	case 3:
		for i := range x {
			if r.IntN(8) == 0 {
				x[i] = float32(r.NormFloat64())
			}
		}
	case 4:
		for i := range x {
			x[i] = float32(r.IntN(17)-8) * 0.25
		}
	case 5:
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.IntN(16) == 0 {
				x[i] = specialValues[r.IntN(len(specialValues))]
			}
		}
	case 6:
		for i := range x {
			x[i] = math.Float32frombits(r.Uint32())
		}
	case 7:
		for i := range x {
			x[i] = float32(math.Abs(r.NormFloat64())) + 1
		}
	default:
		for i := range x {
			x[i] = float32(r.ExpFloat64()-r.ExpFloat64()) * 0.02
		}
	}
	return x
}

// TestFastMatchesReference runs the public (fast) kernels and the plain
// reference kernels on odd numbers of blocks at odd offsets and requires
// identical bytes.
func TestFastMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	iters := 300
	if testing.Short() {
		iters = 60
	}
	for _, f := range Formats() {
		ref := referenceKernels[f.Type]
		if ref == nil { // requires an importance matrix: see fuzz_imatrix_test.go
			continue
		}
		for it := 0; it < iters; it++ {
			nb := 1 + 2*r.IntN(3) // 1, 3 or 5 blocks
			off := r.IntN(7)
			buf := crossInputs(r, off+nb*f.BlockSize)
			x := buf[off:]
			got := make([]byte, nb*f.BlockBytes+3)
			want := make([]byte, nb*f.BlockBytes)
			f.Quantize(got[3:], x)
			ref(want, x, nb)
			if !bytes.Equal(got[3:], want) {
				for b := 0; b < nb; b++ {
					g := got[3+b*f.BlockBytes : 3+(b+1)*f.BlockBytes]
					w := want[b*f.BlockBytes : (b+1)*f.BlockBytes]
					if !bytes.Equal(g, w) {
						t.Fatalf("%s iteration %d block %d: fast kernel differs from reference\ninput %v\nfast %x\nref  %x",
							f.Name, it, b, x[b*f.BlockSize:(b+1)*f.BlockSize], g, w)
					}
				}
			}
		}
	}
}

// TestBestIndexIQ4 checks the branch-free table search against the
// reference best_index_int8 on every float32 within 64 ulps of each
// midpoint and table entry, on a sweep of the whole table range, and on
// specials.
func TestBestIndexIQ4(t *testing.T) {
	check := func(x float32) {
		if g, w := bestIndexIQ4(x), bestIndexInt8(&kvaluesIQ4NL, x); g != w {
			t.Fatalf("x = %g (%#08x): fast %d, reference %d", x, math.Float32bits(x), g, w)
		}
	}
	var centres []float32
	for i, k := range kvaluesIQ4NL {
		centres = append(centres, float32(k))
		if i > 0 {
			centres = append(centres, float32(int(kvaluesIQ4NL[i-1])+int(k))/2)
		}
	}
	for _, c := range centres {
		for _, s := range []float32{c, -c} {
			b := math.Float32bits(s)
			for d := uint32(0); d <= 64; d++ {
				check(math.Float32frombits(b + d))
				check(math.Float32frombits(b - d))
			}
		}
	}
	for x := float32(-140); x <= 140; x += 1.0 / 1024 {
		check(x)
	}
	for _, v := range specialValues {
		check(v)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 1<<20; i++ {
		check(math.Float32frombits(r.Uint32()))
	}
}
