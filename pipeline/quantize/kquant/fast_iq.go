package kquant

// Fast variants of the IQ1/IQ2 encoders. The encoders themselves are the
// reference bodies (iq2xxsEncode, …, iq1mEncode) with faster searches
// plugged in; each search performs the float32 operations of its reference
// on every value that decides the result, and the tests check the public
// kernels against the references bit for bit.

// iq2FindBestNeighbourFast is iq2FindBestNeighbour with the error terms
// tabulated: every neighbour's coordinate i at level l contributes
// weight[i]*diff*diff with diff = scale*(2l+1) - xval[i], the same value
// whichever neighbour it belongs to, so the 8 x 3 possible terms are
// computed once and each neighbour's distance is the same sequential sum of
// 8 of them. (ggml's grids only use levels 0..2; TestTableRelations checks.)
func iq2FindBestNeighbourFast(nbrs []uint16, g *lattice8, xval, weight []float32, scale float32, L []int8) int {
	xval = xval[:8]
	weight = weight[:8]
	var sq [3]float32
	for l := range sq {
		sq[l] = float32(scale * float32(2*l+1))
	}
	var e [8][3]float32
	for i := range e {
		for l := range sq {
			diff := sq[l] - xval[i]
			e[i][l] = float32(float32(weight[i]*diff) * diff)
		}
	}
	bestD2 := fltMax
	gridIndex := -1
	for _, nb := range nbrs {
		lv := &g.levels[nb]
		var d2 float32
		d2 += e[0][lv[0]]
		d2 += e[1][lv[1]]
		d2 += e[2][lv[2]]
		d2 += e[3][lv[3]]
		d2 += e[4][lv[4]]
		d2 += e[5][lv[5]]
		d2 += e[6][lv[6]]
		d2 += e[7][lv[7]]
		if d2 < bestD2 {
			bestD2 = d2
			gridIndex = int(nb)
		}
	}
	if gridIndex < 0 {
		gridIndex = int(nbrs[0])
	}
	lv := &g.levels[gridIndex]
	for i := 0; i < 8; i++ {
		L[i] = int8(lv[i])
	}
	return gridIndex
}

// iq1FindBestNeighbour2Fast is iq1FindBestNeighbour2 with the error terms
// tabulated the same way (value of level l: xg[l]).
func iq1FindBestNeighbour2Fast(nbrs []uint16, g *lattice8, xval, weight []float32, scale float32, xg *[3]float32, L []int8) int {
	xval = xval[:8]
	weight = weight[:8]
	var sq [3]float32
	for l := range sq {
		sq[l] = float32(scale * xg[l])
	}
	var e [8][3]float32
	for i := range e {
		for l := range sq {
			diff := sq[l] - xval[i]
			e[i][l] = float32(float32(weight[i]*diff) * diff)
		}
	}
	bestScore := fltMax
	gridIndex := -1
	for _, nb := range nbrs {
		lv := &g.levels[nb]
		var d2 float32
		d2 += e[0][lv[0]]
		d2 += e[1][lv[1]]
		d2 += e[2][lv[2]]
		d2 += e[3][lv[3]]
		d2 += e[4][lv[4]]
		d2 += e[5][lv[5]]
		d2 += e[6][lv[6]]
		d2 += e[7][lv[7]]
		if d2 < bestScore {
			bestScore = d2
			gridIndex = int(nb)
		}
	}
	if gridIndex < 0 {
		gridIndex = int(nbrs[0])
	}
	lv := &g.levels[gridIndex]
	for i := 0; i < 8; i++ {
		L[i] = int8(lv[i])
	}
	return gridIndex
}

// iq1mSplitFast is iq1mSplitRef with the same sums built incrementally. For
// split (i1, i2) and shift code k ggml adds, in sorted order j = 0..15, the
// term of value j at its level (0 below i1, 1 below i2, else 2) into two
// accumulators starting at 0. The terms are tabulated once per value, level
// and delta sign; the accumulators after the first i1 terms are shared by
// every i2 >= i1, and those after the first i2 terms (for a given i1) grow by
// one term per i2, so only the tail j >= i2 is summed per split. Every
// accumulator still receives the same terms in the same order, and the
// splits and codes are scored in ggml's order (i1, then i2, then k).
func iq1mSplitFast(pairs *[16]sortPair, weight, xb *[16]float32, max float32) (scale float32, besti1, besti2, bestK int) {
	const n = 16
	// tx[k][j][seg], tq[k][j][seg]: the terms of sorted value j.
	var tx, tq [4][n][3]float32
	for j := 0; j < n; j++ {
		i := pairs[j].idx
		for k := 0; k < 4; k++ {
			first, second := iq1mLevels(k)
			xv := second
			if i < n/2 {
				xv = first
			}
			for seg := 0; seg < 3; seg++ {
				t := xv[seg]
				a := float32(weight[i] * t)
				tx[k][j][seg] = float32(a * xb[i])
				tq[k][j][seg] = float32(a * t)
			}
		}
	}
	bestScore := -fltMax
	scale = max
	besti1, besti2, bestK = -1, -1, -1
	var s0x, s0q [4]float32 // after the terms j < i1 (level 0)
	for i1 := 0; i1 <= n; i1++ {
		ax, aq := s0x, s0q // after the terms j < i2 (levels 0, 1)
		for i2 := i1; i2 <= n; i2++ {
			for k := 0; k < 4; k++ {
				sumqx, sumq2 := ax[k], aq[k]
				for j := i2; j < n; j++ {
					sumqx += tx[k][j][2]
					sumq2 += tq[k][j][2]
				}
				if sumq2 > 0 && sumqx*sumqx > bestScore*sumq2 {
					scale = sumqx / sumq2
					bestScore = scale * sumqx
					besti1, besti2, bestK = i1, i2, k
				}
			}
			if i2 < n {
				for k := 0; k < 4; k++ {
					ax[k] += tx[k][i2][1]
					aq[k] += tq[k][i2][1]
				}
			}
		}
		if i1 < n {
			for k := 0; k < 4; k++ {
				s0x[k] += tx[k][i1][0]
				s0q[k] += tq[k][i1][0]
			}
		}
	}
	return scale, besti1, besti2, bestK
}

func fastIQ2XXS(y []byte, x, qw []float32) { iq2xxsEncode(y, x, qw, true) }
func fastIQ2XS(y []byte, x, qw []float32)  { iq2xsEncode(y, x, qw, true) }
func fastIQ2S(y []byte, x, qw []float32)   { iq2sEncode(y, x, qw, true) }
func fastIQ1S(y []byte, x, qw []float32)   { iq1sEncode(y, x, qw, true) }
func fastIQ1M(y []byte, x, qw []float32) {
	iq1mEncode(y, x, qw, true)
}

// iq3FindBestNeighbourFast is iq3FindBestNeighbour on float32 copies of the
// points, unrolled (the same operations in the same order).
func iq3FindBestNeighbourFast(nbrs []uint16, g *lattice4, xval, weight []float32, scale float32, L []int8) int {
	x := (*[4]float32)(xval[:4])
	w := (*[4]float32)(weight[:4])
	bestD2 := fltMax
	gridIndex := -1
	for _, nb := range nbrs {
		p := &g.pointsF[nb]
		diff0 := float32(scale*p[0]) - x[0]
		diff1 := float32(scale*p[1]) - x[1]
		diff2 := float32(scale*p[2]) - x[2]
		diff3 := float32(scale*p[3]) - x[3]
		var d2 float32
		d2 += float32(float32(w[0]*diff0) * diff0)
		d2 += float32(float32(w[1]*diff1) * diff1)
		d2 += float32(float32(w[2]*diff2) * diff2)
		d2 += float32(float32(w[3]*diff3) * diff3)
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

func fastIQ3XXS(y []byte, x, qw []float32) { iq3xxsEncode(y, x, qw, true) }
func fastIQ3S(y []byte, x, qw []float32)   { iq3sEncode(y, x, qw, true) }
