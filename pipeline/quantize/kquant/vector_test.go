package kquant

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// vectorKernels and plainKernels are the two implementations behind the
// Format table for every format that has a vector kernel: the vector one
// (used where the CPU has AVX2) and the plain Go one (every other CPU, and
// amd64 builds with -tags purego).
var (
	vectorKernels = map[uint32]kernel{
		TypeQ4_K: quantizeQ4KLanes, TypeQ5_K: quantizeQ5KLanes, TypeQ6_K: quantizeQ6KLanes,
		TypeQ4_0: quantizeQ4_0AVX2, TypeQ8_0: quantizeQ8_0AVX2, TypeQ2_K: quantizeQ2KLanes, TypeQ3_K: quantizeQ3KLanes,
		TypeIQ4_NL: quantizeIQ4NLLanes, TypeIQ4_XS: quantizeIQ4XSLanes,
	}
	plainKernels = map[uint32]kernel{
		TypeQ4_K: quantizeQ4KGo, TypeQ5_K: quantizeQ5KGo, TypeQ6_K: quantizeQ6KGo,
		TypeQ4_0: refQ4_0, TypeQ8_0: refQ8_0, TypeQ2_K: quantizeQ2KGo, TypeQ3_K: quantizeQ3KGo,
		TypeIQ4_NL: quantizeIQ4NLGo, TypeIQ4_XS: quantizeIQ4XSGo,
	}
)

// adversarialBlock fills x (one block of a format with sub-blocks of sub
// values) with one of many shapes meant to reach the corners of the vector
// lanes: sub-blocks with different scales (lanes taking different
// branches), all-equal and all-zero sub-blocks next to normal ones (lanes
// that stop early), subnormals, exact ties of nearest_int, values whose
// squares and sums overflow float32, signed zeros, random finite bit
// patterns, and (kind 0 only) NaN or Inf, which send the block to the
// scalar path.
func adversarialBlock(r *rand.Rand, x []float32, sub int) { adversarialBlockKinds(r, x, sub, false) }

// adversarialBlockKinds is adversarialBlock; with tame, without the kinds
// whose squares overflow (the weighted kernels leave blocks with non-finite
// weights to the plain kernels, so those kinds would rarely reach them).
func adversarialBlockKinds(r *rand.Rand, x []float32, sub int, tame bool) {
	fill := func(lo, hi int, g func() float32) {
		for i := lo; i < hi; i++ {
			x[i] = g()
		}
	}
	for s := 0; s < len(x); s += sub {
		var g func() float32
		kind := r.IntN(15)
		for tame && kind >= 6 && kind <= 8 {
			kind = r.IntN(15)
		}
		switch kind {
		case 0:
			sc := math.Pow(10, float64(r.IntN(20)-12))
			g = func() float32 { return float32(r.NormFloat64() * sc) }
		case 1: // all equal
			c := float32(r.NormFloat64())
			if r.IntN(3) == 0 {
				c = -c * 1e30
			}
			g = func() float32 { return c }
		case 2: // zeros of both signs
			g = func() float32 { return float32(math.Copysign(0, float64(r.IntN(2)*2-1))) }
		case 3: // subnormals and zeros
			g = func() float32 {
				if r.IntN(4) == 0 {
					return 0
				}
				return math.Float32frombits(r.Uint32()&0x807FFFFF) * float32(r.IntN(2)*2-1)
			}
		case 4: // half-integer grids: nearest_int ties at many scales
			e := float32(math.Ldexp(1, r.IntN(12)-8))
			g = func() float32 { return (float32(r.IntN(65)-32) + 0.5*float32(r.IntN(2))) * e }
		case 5: // quarter grid
			g = func() float32 { return float32(r.IntN(17)-8) * 0.25 }
		case 6: // overflow of squares and sums
			g = func() float32 { return float32(r.NormFloat64() * 1e37) }
		case 7: // extremes
			vals := []float32{math.MaxFloat32, -math.MaxFloat32, 1e-45, -1e-45, 3.4e38, 1.17549435e-38, 0}
			g = func() float32 { return vals[r.IntN(len(vals))] }
		case 8: // random finite bit patterns
			g = func() float32 {
				for {
					v := math.Float32frombits(r.Uint32())
					if v-v == 0 {
						return v
					}
				}
			}
		case 9: // one outlier
			k := r.IntN(sub)
			i := 0
			g = func() float32 {
				i++
				if i-1 == k {
					return float32(r.NormFloat64() * 100)
				}
				return float32(r.NormFloat64() * 0.01)
			}
		case 10: // positive only (min > 0), around 1
			g = func() float32 { return float32(math.Abs(r.NormFloat64())) + 1 }
		case 11: // near nearest_int's limit
			g = func() float32 { return float32(4194303-r.IntN(4)) * float32(r.IntN(2)*2-1) }
		case 12: // values that differ in the last bit
			b := math.Float32bits(float32(r.NormFloat64()))
			g = func() float32 { return math.Float32frombits(b + uint32(r.IntN(3))) }
		case 13: // one or two non-zero values: sums that cancel exactly
			a, b := r.IntN(sub), r.IntN(sub)
			va, vb := float32(r.NormFloat64()), float32(r.IntN(3)-1)*float32(r.NormFloat64())
			i := 0
			g = func() float32 {
				i++
				switch i - 1 {
				case a:
					return va
				case b:
					return vb
				}
				return 0
			}
		default: // checkpoint-like
			g = func() float32 { return float32(r.NormFloat64() * 0.02) }
		}
		fill(s, s+sub, g)
	}
}

// TestVectorKernels checks the vector kernels against the plain Go kernels
// and the references, bit for bit, on adversarial blocks (see
// adversarialBlock) and on checkpoint-like rows, in chunks of several
// blocks at odd offsets. Without AVX2 (or with -tags purego) only the plain
// kernels are checked.
func TestVectorKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 2026))
	iters := 1500
	if testing.Short() {
		iters = 150
	}
	for _, f := range Formats() {
		plain := plainKernels[f.Type]
		if plain == nil {
			continue
		}
		vec := vectorKernels[f.Type]
		ref := referenceKernels[f.Type]
		sub := 32
		if f.Type == TypeQ6_K || f.Type == TypeQ2_K || f.Type == TypeQ3_K {
			sub = 16
		}
		for it := 0; it < iters; it++ {
			nb := 1 + r.IntN(3)
			if f.BlockSize == 32 { // IQ4_NL's vector kernel takes 8 blocks at a time
				nb = 1 + r.IntN(20)
			}
			off := r.IntN(5)
			buf := make([]float32, off+nb*f.BlockSize)
			x := buf[off:]
			for b := 0; b < nb; b++ {
				adversarialBlock(r, x[b*f.BlockSize:(b+1)*f.BlockSize], sub)
			}
			if it%7 == 0 { // a non-finite value sends its block to the scalar path
				v := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[r.IntN(3)]
				x[r.IntN(len(x))] = v
			}
			want := make([]byte, nb*f.BlockBytes)
			ref(want, x, nb)
			got := make([]byte, len(want))
			plain(got, x, nb)
			diffBlocks(t, f, "plain", it, x, got, want)
			if useAVX2 && vec != nil {
				clear(got)
				vec(got, x, nb)
				diffBlocks(t, f, "vector", it, x, got, want)
			}
		}
	}
}

func diffBlocks(t *testing.T, f Format, what string, it int, x []float32, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for b := 0; b*f.BlockBytes < len(want); b++ {
		g := got[b*f.BlockBytes : (b+1)*f.BlockBytes]
		w := want[b*f.BlockBytes : (b+1)*f.BlockBytes]
		if !bytes.Equal(g, w) {
			t.Fatalf("%s %s kernel, iteration %d, block %d differs from the reference\ninput %v\ngot  %x\nwant %x",
				f.Name, what, it, b, x[b*f.BlockSize:(b+1)*f.BlockSize], g, w)
		}
	}
}

// TestLaneLayouts checks the struct offsets the assembly uses (the #defines
// at the top of qkx2_amd64.s and qx_amd64.s).
func TestLaneLayouts(t *testing.T) {
	var q qkx2Lanes
	var x qx16Lanes
	var iq iq4Tables
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"qkx2Lanes.x", unsafe.Offsetof(q.x), 0},
		{"qkx2Lanes.w", unsafe.Offsetof(q.w), 1024},
		{"qkx2Lanes.L", unsafe.Offsetof(q.L), 2048},
		{"qkx2Lanes.laux", unsafe.Offsetof(q.laux), 3072},
		{"qkx2Lanes.maxv", unsafe.Offsetof(q.maxv), 4096},
		{"qkx2Lanes.sumW", unsafe.Offsetof(q.sumW), 4128},
		{"qkx2Lanes.sumX", unsafe.Offsetof(q.sumX), 4160},
		{"qkx2Lanes.best", unsafe.Offsetof(q.best), 4192},
		{"qkx2Lanes.scale", unsafe.Offsetof(q.scale), 4224},
		{"qkx2Lanes.min", unsafe.Offsetof(q.min), 4256},
		{"qkx2Lanes.dead", unsafe.Offsetof(q.dead), 4288},
		{"qkx2Lanes.num", unsafe.Offsetof(q.num), 4320},
		{"iq4Tables.kvHi", unsafe.Offsetof(iq.kvHi), 32},
		{"iq4Tables.t3", unsafe.Offsetof(iq.t3), 64},
		{"iq4Tables.t4", unsafe.Offsetof(iq.t4), 96},
		{"iq4Tables.c8", unsafe.Offsetof(iq.c8), 128},
		{"iq4Tables.c4", unsafe.Offsetof(iq.c4), 160},
		{"iq4Tables.diff", unsafe.Offsetof(iq.diff), 192},
		{"iq4Tables.i8", unsafe.Offsetof(iq.i8), 224},
		{"iq4Tables.i4", unsafe.Offsetof(iq.i4), 256},
		{"iq4Tables.i2", unsafe.Offsetof(iq.i2), 288},
		{"iq4Tables.try", unsafe.Offsetof(iq.try), 320},
		{"qx16Lanes.x", unsafe.Offsetof(x.x), 0},
		{"qx16Lanes.w", unsafe.Offsetof(x.w), 1024},
		{"qx16Lanes.wx", unsafe.Offsetof(x.wx), 2048},
		{"qx16Lanes.L", unsafe.Offsetof(x.L), 3072},
		{"qx16Lanes.laux", unsafe.Offsetof(x.laux), 4096},
		{"qx16Lanes.scale", unsafe.Offsetof(x.scale), 5120},
		{"qx16Lanes.max", unsafe.Offsetof(x.max), 5184},
		{"qx16Lanes.best", unsafe.Offsetof(x.best), 5248},
		{"qx16Lanes.dead", unsafe.Offsetof(x.dead), 5312},
	} {
		if c.got != c.want {
			t.Errorf("%s at offset %d, the assembly uses %d", c.name, c.got, c.want)
		}
	}
}

// adversarialImatrix makes importance vectors for the weighted vector
// kernels: mostly the kinds real imatrix files have (lognormal, uniform,
// sparse zeros, ties, twelve orders of magnitude), and sometimes a negative,
// NaN or Inf value, which sends the block to the plain kernel.
func adversarialImatrix(r *rand.Rand, n int) []float32 {
	im := make([]float32, n)
	kind := r.IntN(7)
	for i := range im {
		switch kind {
		case 0, 1:
			im[i] = float32(math.Exp(r.NormFloat64() * 2))
		case 2:
			im[i] = 1
		case 3:
			if r.IntN(3) != 0 {
				im[i] = float32(r.ExpFloat64())
			}
		case 4:
			im[i] = float32(1 + r.IntN(3))
		case 5:
			im[i] = float32(math.Pow(10, float64(r.IntN(25)-12)))
		default:
			im[i] = float32(r.ExpFloat64())
			if r.IntN(64) == 0 {
				im[i] = []float32{-1, float32(math.NaN()), float32(math.Inf(1)), 0}[r.IntN(4)]
			}
		}
	}
	return im
}

// TestVectorWeightedKernels checks the weighted vector kernels (what
// QuantizeWeighted runs) against the plain Go ones and the references on
// adversarial blocks and importance vectors.
func TestVectorWeightedKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 7))
	iters := 600
	if testing.Short() {
		iters = 60
	}
	for _, c := range []struct {
		typ        uint32
		plain, vec blockKernel
	}{
		{TypeQ4_K, fastQ4KWeighted, weightedQ4K},
		{TypeQ5_K, fastQ5KWeighted, weightedQ5K},
		{TypeQ6_K, refQ6KWeighted, weightedQ6K},
		{TypeQ3_K, refQ3KWeighted, weightedQ3K},
		{TypeQ2_K, fastQ2KWeighted, weightedQ2K},
		{TypeIQ4_XS, fastIQ4XSWeighted, weightedIQ4XS},
		{TypeIQ4_NL, blockLoopW(18, 32, fastIQ4NLWeighted), weightedIQ4NLRow},
	} {
		f, _ := ForType(c.typ)
		ref := referenceWeightedBlock[c.typ]
		n, sub := 256, 32
		if c.typ == TypeQ6_K || c.typ == TypeQ3_K || c.typ == TypeQ2_K {
			sub = 16
		}
		if c.typ == TypeIQ4_NL { // a row of blocks: groups of 8 and a tail
			n = 32 * 19
			ref = blockLoopW(18, 32, ref)
		}
		for it := 0; it < iters; it++ {
			x := make([]float32, n)
			adversarialBlockKinds(r, x, sub, it%4 != 0)
			if it%9 == 0 {
				x[r.IntN(n)] = float32(math.Inf(-1))
			}
			im := adversarialImatrix(r, n)
			want := make([]byte, f.RowBytes(n))
			ref(want, x, im)
			got := make([]byte, len(want))
			c.plain(got, x, im)
			diffBlocks(t, f, "plain weighted", it, x, got, want)
			clear(got)
			c.vec(got, x, im)
			diffBlocks(t, f, "vector weighted", it, x, got, want)
		}
	}
}

// blockLoopW runs a weighted block kernel over a row of blocks.
func blockLoopW(bb, bs int, k blockKernel) blockKernel {
	return func(y []byte, x, qw []float32) {
		for i := 0; i < len(x)/bs; i++ {
			k(y[i*bb:(i+1)*bb], x[i*bs:(i+1)*bs], qw[i*bs:(i+1)*bs])
		}
	}
}
