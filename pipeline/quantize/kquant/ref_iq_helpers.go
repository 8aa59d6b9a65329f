package kquant

import "math"

// Helpers shared by the IQ1/IQ2/IQ3 encoders (ggml-quants.c).
//
// Where ggml stops the process (GGML_ASSERT / GGML_ABORT) these encoders go
// on with a documented choice instead, so that hostile input never crashes a
// caller. ggml reaches those points only for inputs whose squared values or
// weighted distances are not finite (NaN or Inf weights or values, or values
// so large that x*x overflows); for every input that ggml encodes, the bytes
// are ggml's.

const fltMax = float32(math.MaxFloat32)

// The smaller all-zero thresholds of the IQ quantizers (GROUP_MAX_EPS_*).
const (
	groupMaxEpsIQ3XXS float32 = 1e-8
	groupMaxEpsIQ2S   float32 = 1e-8
	groupMaxEpsIQ1M   float32 = 1e-7
	groupMaxEpsIQ1S   float32 = 1e-12
)

// nearestHalfLevel is nearest_int(0.5f*(id*x - 1)), the lattice level of
// x at inverse scale id (levels are 2l+1 times the scale).
func nearestHalfLevel(id, x float32) int32 {
	return nearestInt(float32(0.5 * (float32(id*x) - 1)))
}

// foldSigns8 is the sign handling of quantize_row_iq2_xxs_impl,
// quantize_row_iq2_xs_impl and quantize_row_iq3_xxs_impl for 8 values:
// xval gets |x| and the result the sign bits; when an odd number of values
// is negative, the one with the smallest weight*x*x keeps a negated xval
// and its sign bit is cleared, so the 7 stored bits give the 8th by parity.
func foldSigns8(xb, weight, xval []float32) uint8 {
	xb = xb[:8]
	weight = weight[:8]
	xval = xval[:8]
	nflip := 0
	var s uint8
	for i, v := range xb {
		if v >= 0 {
			xval[i] = v
		} else {
			xval[i] = -v
			nflip++
			s |= 1 << i
		}
	}
	if nflip%2 != 0 {
		imin := 0
		min := float32(weight[0]*xb[0]) * xb[0]
		for i := 1; i < 8; i++ {
			ax := float32(weight[i]*xb[i]) * xb[i]
			if ax < min {
				min = ax
				imin = i
			}
		}
		xval[imin] = -xval[imin]
		s ^= 1 << imin
	}
	return s & 127
}

// signBits8 is the plain sign handling of IQ2_S and IQ3_S: xval gets |x|,
// the result one bit per negative value.
func signBits8(xb, xval []float32) uint8 {
	xb = xb[:8]
	xval = xval[:8]
	var s uint8
	for i, v := range xb {
		if v >= 0 {
			xval[i] = v
		} else {
			xval[i] = -v
			s |= 1 << i
		}
	}
	return s
}

// maxOf is the running MAX over x starting from x[0].
func maxOf(x []float32) float32 {
	max := x[0]
	for _, v := range x[1:] {
		max = cmaxf(max, v)
	}
	return max
}

// sumQ is the sums of w*x*q and w*q*q with q = 2*L+1, the score of a set
// of lattice levels.
func sumQ(weight, xval []float32, L []int8) (sumqx, sumq2 float32) {
	for i, l := range L {
		w := weight[i]
		q := float32(2*int32(l) + 1)
		sumqx += float32(w * xval[i] * q)
		sumq2 += float32(w * q * q)
	}
	return sumqx, sumq2
}

// packLevels8 packs 8 2-bit levels (C: u |= L[i] << 2*i into a uint16,
// levels read as int).
func packLevels8(L []int8) int {
	var u uint16
	for i := 0; i < 8; i++ {
		u |= uint16(int32(L[i]) << (2 * i))
	}
	return int(u)
}

// packLevels4 packs 4 3-bit levels.
func packLevels4(L []int8) int {
	var u uint16
	for i := 0; i < 4; i++ {
		u |= uint16(int32(L[i]) << (3 * i))
	}
	return int(u)
}

// onGrid8 is the final "is the point on the grid" check of the IQ2
// encoders: the grid index of the packed levels u. Where ggml aborts ("Oops:
// found point not on grid"; reachable only after a NaN scale, when the
// levels never went through the grid search) this returns the first
// neighbour of u, or grid point 0 if u is outside the map.
func (g *lattice8) onGrid(u int) int {
	if u < len(g.kmap) {
		if gi := g.kmap[u]; gi >= 0 {
			return int(gi)
		}
		return int(g.neighboursOf(u)[0])
	}
	return 0
}

func (g *lattice4) onGrid(u int) int {
	if u < len(g.kmap) {
		if gi := g.kmap[u]; gi >= 0 {
			return int(gi)
		}
		return int(g.neighboursOf(u)[0])
	}
	return 0
}

// searchNbr8, searchNbr1 and searchNbr4 call the reference neighbour
// search or its fast variant (direct calls, so that the callers' arrays stay
// on the stack).
func searchNbr8(fast bool, nbrs []uint16, g *lattice8, xval, weight []float32, scale float32, L []int8) int {
	if fast {
		return iq2FindBestNeighbourFast(nbrs, g, xval, weight, scale, L)
	}
	return iq2FindBestNeighbour(nbrs, g, xval, weight, scale, L)
}

func searchNbr1(fast bool, nbrs []uint16, g *lattice8, xval, weight []float32, scale float32, xg *[3]float32, L []int8) int {
	if fast {
		return iq1FindBestNeighbour2Fast(nbrs, g, xval, weight, scale, xg, L)
	}
	return iq1FindBestNeighbour2(nbrs, g, xval, weight, scale, xg, L)
}

func searchNbr4(fast bool, nbrs []uint16, g *lattice4, xval, weight []float32, scale float32, L []int8) int {
	if fast {
		return iq3FindBestNeighbourFast(nbrs, g, xval, weight, scale, L)
	}
	return iq3FindBestNeighbour(nbrs, g, xval, weight, scale, L)
}

// iq2FindBestNeighbour is iq2_find_best_neighbour: the neighbour whose
// points, times scale, are closest to xval in squared distance weighted by
// weight (the first on ties); its levels go to L. If no distance is below
// FLT_MAX (ggml: GGML_ASSERT fails) the first neighbour is taken.
func iq2FindBestNeighbour(nbrs []uint16, g *lattice8, xval, weight []float32, scale float32, L []int8) int {
	bestD2 := fltMax
	gridIndex := -1
	for _, nb := range nbrs {
		pg := &g.points[nb]
		var d2 float32
		for i := 0; i < 8; i++ {
			q := float32(pg[i])
			diff := float32(scale*q) - xval[i]
			d2 += float32(float32(weight[i]*diff) * diff)
		}
		if d2 < bestD2 {
			bestD2 = d2
			gridIndex = int(nb)
		}
	}
	if gridIndex < 0 {
		gridIndex = int(nbrs[0])
	}
	pg := &g.points[gridIndex]
	for i := 0; i < 8; i++ {
		L[i] = (pg[i] - 1) / 2
	}
	return gridIndex
}

// iq3FindBestNeighbour is iq3_find_best_neighbour (4 values), with the same
// fallback.
func iq3FindBestNeighbour(nbrs []uint16, g *lattice4, xval, weight []float32, scale float32, L []int8) int {
	bestD2 := fltMax
	gridIndex := -1
	for _, nb := range nbrs {
		pg := &g.points[nb]
		var d2 float32
		for i := 0; i < 4; i++ {
			q := float32(pg[i])
			diff := float32(scale*q) - xval[i]
			d2 += float32(float32(weight[i]*diff) * diff)
		}
		if d2 < bestD2 {
			bestD2 = d2
			gridIndex = int(nb)
		}
	}
	if gridIndex < 0 {
		gridIndex = int(nbrs[0])
	}
	pg := &g.points[gridIndex]
	for i := 0; i < 4; i++ {
		L[i] = (pg[i] - 1) / 2
	}
	return gridIndex
}

// nonNegScale is what the encoders store after GGML_ASSERT(scale >= 0): the
// scale, or 0 where ggml would abort (a NaN scale).
func nonNegScale(scale float32) float32 {
	if scale >= 0 {
		return scale
	}
	return 0
}
