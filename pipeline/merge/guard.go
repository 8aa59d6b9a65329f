package merge

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/phonellm/phonellm/pipeline"
)

// The float32 path's guard. The float32 result x of an element (row i, column j) is off the exact value
// W + Σ_k u_ik·v_kj by at most
//
//	E = (R+3)·2⁻²⁴·(|W| + S),  S = Σ_k |u_ik·v_kj| ≤ ‖u_i‖₂·‖v_j‖₂    (Cauchy–Schwarz)
//
// (R rank components; u is the exact float64 weight·scale·B, rounded once to float32 for the kernel, v = A is
// exact in float32). The result rounds to within one ulp of the exactly rounded value whenever E is at most
// half the spacing of the target's values just below |x|, which for a p-bit significand is at least
// 2^-(p+2)·|x| (BF16: p = 8, F16: p = 11). Since |W| ≤ |x| + S + E, that holds whenever
//
//	|x| ≥ K·‖u_i‖·‖v_j‖,  K = 2c / (b·(1−c) − c),  c = (R+3)·2⁻²⁴,  b = 2^-(p+3)
//
// (b is half the budget: the other half covers float32 subnormal arithmetic, whose errors are absolute, for
// every |x| above the floor below). Where W and s·B·A nearly cancel, |x| is far below S and the bound can
// exceed an ulp; those elements — |x| below max(K·‖u_i‖·‖v_j‖, floor), flagged by the kernels in a bit mask
// while they compute — are recomputed exactly as the float64 path computes them (fma in the same order from
// the float64 u, rounded once), so every element is within one ulp of the exactly rounded value and the
// flagged ones equal the float64 path's. In a real merge they are a few in a million (more for F16, whose
// subnormal results are all flagged).

// Ranks above these take the float64 path: the bound needs c well under b.
const (
	maxFastRankBF16 = 1024
	maxFastRankF16  = 256
)

// guardScale returns K and the floor of the guard for a dtype and total rank R; ok is false when R is too
// large for the float32 path.
func guardScale(dtype pipeline.DType, R int) (k float64, floor float32, ok bool) {
	c := float64(R+3) * 0x1p-24
	budget, fl, maxR := 0x1p-11, float32(0x1p-100), maxFastRankBF16
	if dtype == pipeline.F16 {
		// Below 2⁻¹⁴ F16 is subnormal (fixed spacing 2⁻²⁴): such results are always recomputed.
		budget, fl, maxR = 0x1p-14, 0x1p-14, maxFastRankF16
	}
	if R > maxR {
		return 0, 0, false
	}
	return 2 * c / (budget*(1-c) - c), fl, true
}

// guard is what the kernels need to flag the elements of a block of rows: K·‖u_i‖ per row (rounded up, +Inf
// when the row's float32 u lost relative precision), ‖v_j‖ per column (rounded up, at least 2⁻⁶⁰), the floor,
// and the output mask: per row, one 16-bit word per block of 16 columns, bit b flagging column 16·t+b.
type guard struct {
	ku    []float32
	nv    []float32
	floor float32
	mask  []uint16
}

// tiles is the number of mask words per row.
func (g *guard) tiles(cols int) int { return (cols + 15) / 16 }

// from is the guard of the block's rows from i on (tiles mask words per row).
func (g *guard) from(i, tiles int64) *guard {
	return &guard{ku: g.ku[i:], nv: g.nv, floor: g.floor, mask: g.mask[i*tiles:]}
}

// flag32Go is the specification of the kernels' guard: it writes the mask words of row (the whole row) from
// column j0 (a multiple of 16) on; column j is flagged when |row[j]| < max(float32(ku·nv[j]), floor), a NaN
// never (the encoder reports it).
func flag32Go(row []float32, j0 int, ku float32, nv []float32, floor float32, mask []uint16) {
	for t := j0 / 16; t*16 < len(row); t++ {
		var w uint16
		for b := 0; b < 16 && t*16+b < len(row); b++ {
			j := t*16 + b
			thr := ku * nv[j]
			if !(thr > floor) {
				thr = floor
			}
			if math.Float32frombits(math.Float32bits(row[j])&0x7FFFFFFF) < thr {
				w |= 1 << b
			}
		}
		mask[t] = w
	}
}

// up32 rounds a non-negative float64 up to float32.
func up32(x float64) float32 {
	f := float32(x)
	if float64(f) < x {
		f = math.Nextafter32(f, float32(math.Inf(1)))
	}
	return f
}

// guardFactors fills ld's guard (ku, nv, floor) from its float64 u (rows × R) and float32 v (R × cols).
func guardFactors(dtype pipeline.DType, ld *loaded, rows, cols int64) error {
	R := int64(ld.r32)
	k, floor, ok := guardScale(dtype, int(R))
	if !ok {
		return fmt.Errorf("merge: rank %d too large for the float32 path", R)
	}
	const margin = 1 + 0x1p-20 // covers the float32 roundings of the norms and of their product
	ld.floor = floor
	ld.ku = make([]float32, rows)
	for i := range rows {
		var ss float64
		lost := false
		for _, x := range ld.u64[i*R : (i+1)*R] {
			ss = math.FMA(x, x, ss)
			a := math.Abs(x)
			lost = lost || (a != 0 && a < 0x1p-126) || a > math.MaxFloat32
		}
		if lost {
			ld.ku[i] = float32(math.Inf(1))
			continue
		}
		ld.ku[i] = up32(k * math.Sqrt(ss) * margin)
	}
	ld.nv = make([]float32, cols)
	ss := make([]float64, cols)
	for q := range R {
		for j, x := range ld.v32[q*cols : (q+1)*cols] {
			ss[j] = math.FMA(float64(x), float64(x), ss[j])
		}
	}
	for j, s := range ss {
		ld.nv[j] = max(up32(math.Sqrt(s)*margin), 0x1p-60)
	}
	return nil
}

// exact computes element (row, j) the way the float64 path does — the base value, then fma(u_k, v_kj, ·) for
// every rank component in order — and rounds it once to dtype; ok is false when the result is not finite
// there (x is then the unrounded value, for the message).
func (ld *loaded) exact(dtype pipeline.DType, w float32, row, j, cols int64) (y float32, x float64, ok bool) {
	R := int64(ld.r32)
	x = float64(w)
	for q, uq := range ld.u64[row*R : (row+1)*R] {
		x = math.FMA(uq, float64(ld.v32[int64(q)*cols+j]), x)
	}
	y, ok = round(dtype, x)
	return y, x, ok
}

// fixFlagged recomputes (exact) every element of rows [0, n) of a block that g flags; the block starts at
// tensor row row0, base(i, j) returns an element's base value and set stores its result.
func (ld *loaded) fixFlagged(pl *plan, g *guard, row0, n, cols int64, base func(i, j int64) (float32, error), set func(i, j int64, y float32)) error {
	tiles := int64(g.tiles(int(cols)))
	for i := range n {
		for t, w := range g.mask[i*tiles : (i+1)*tiles] {
			for w != 0 {
				j := int64(t)*16 + int64(bits.TrailingZeros16(w))
				w &= w - 1
				b, err := base(i, j)
				if err != nil {
					return err
				}
				y, x, ok := ld.exact(pl.info.DType, b, row0+i, j, cols)
				if !ok {
					return notFinite(pl, row0+i, cols, int(j), x)
				}
				set(i, j, y)
			}
		}
	}
	return nil
}
