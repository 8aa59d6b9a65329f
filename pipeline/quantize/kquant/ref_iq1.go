package kquant

import (
	"encoding/binary"

	"github.com/phonellm/phonellm/internal/half"
)

// Reference IQ1 encoders: quantize_row_iq1_s_impl and quantize_row_iq1_m_impl
// of ggml-quants.c, one 256-value super-block per call. IQ1_S requires the
// importance weights qw; IQ1_M accepts nil (ggml's NULL: weights x*x).

// iq1Delta is IQ1S_DELTA = IQ1M_DELTA: the grid values are -1, 0, 1 shifted
// by +-delta.
const iq1Delta float32 = 0.125

var (
	iq1XP = [3]float32{-1 + iq1Delta, iq1Delta, 1 + iq1Delta}
	iq1XM = [3]float32{-1 - iq1Delta, -iq1Delta, 1 - iq1Delta}
)

// sortPair is one (value, original index) element of the pairs array the
// IQ1 encoders sort.
type sortPair struct {
	v   float32
	idx int32
}

// glibcMergeSort sorts p by value exactly as glibc's qsort (a top-down merge
// sort, left half n/2, taking the left element unless the comparator says
// it is greater) does with iq1_sort_helper: stable for ordinary values, and
// with the same (comparator-defined) result when NaNs compare "equal" to
// everything. ggml's reference build runs on glibc (Debian 12, 2.36), where
// qsort of such small arrays always takes this path.
func glibcMergeSort(p, tmp []sortPair) {
	n := len(p)
	if n <= 1 {
		return
	}
	n1 := n / 2
	glibcMergeSort(p[:n1], tmp)
	glibcMergeSort(p[n1:], tmp)
	b1, b2 := p[:n1], p[n1:]
	t := tmp[:0]
	for len(b1) > 0 && len(b2) > 0 {
		// iq1_sort_helper: *l < *r ? -1 : *l > *r ? 1 : 0; take b1 if <= 0.
		if !(b1[0].v > b2[0].v) {
			t = append(t, b1[0])
			b1 = b1[1:]
		} else {
			t = append(t, b2[0])
			b2 = b2[1:]
		}
	}
	t = append(t, b1...)
	copy(p, t)
}

// iq1FindBestNeighbour2 is iq1_find_best_neighbour2: the neighbour whose
// values xg[level] times scale are closest to xval (weighted squared
// distance, first on ties); its levels go to L. If no distance is below
// FLT_MAX, ggml scans the whole grid with a defective index (it reads
// xval[grid index], up to 2047 values past the 8 it was given: undefined
// behaviour that ends in an abort or a crash); this takes the first
// neighbour instead.
func iq1FindBestNeighbour2(nbrs []uint16, g *lattice8, xval, weight []float32, scale float32, xg *[3]float32, L []int8) int {
	bestScore := fltMax
	gridIndex := -1
	for _, nb := range nbrs {
		pg := &g.points[nb]
		var d2 float32
		for i := 0; i < 8; i++ {
			q := xg[(pg[i]-1)/2]
			w := weight[i]
			diff := float32(scale*q) - xval[i]
			d2 += float32(float32(w*diff) * diff)
		}
		if d2 < bestScore {
			bestScore = d2
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

// refIQ1S encodes one IQ1_S block: d, qs[32] (low grid-index bytes), qh[8]
// (uint16: 3 high index bits per 8 values, 3-bit scale, delta sign).
func refIQ1S(y []byte, x, qw []float32) { iq1sEncode(y, x, qw, false) }

// iq1sEncode is the body of refIQ1S; fast selects the table-driven
// neighbour search (the public kernel).
func iq1sEncode(y []byte, x, qw []float32, fast bool) {
	const blockSize = 32
	g := iq1Lattice()
	y = y[:50]
	x = x[:256]
	qw = qw[:256]
	var scales [8]float32
	var weight [blockSize]float32
	var sumx, sumw [blockSize + 1]float32
	var pairs, tmp [blockSize]sortPair
	var L [blockSize]int8
	var index [blockSize / 8]uint16
	var shifts [8]int8
	var qh [8]uint16

	for i := range y {
		y[i] = 0
	}
	qs := y[2:34]
	var maxScale float32
	sigma2 := 2 * sumSquares(x) / 256
	for ib := 0; ib < 256/blockSize; ib++ {
		xb := x[blockSize*ib : blockSize*ib+blockSize]
		weightsSigma(weight[:], xb, qw[blockSize*ib:], sigma2)
		max := absf(xb[0])
		for _, v := range xb[1:] {
			max = cmaxf(max, absf(v))
		}
		if max < groupMaxEpsIQ1S {
			scales[ib] = 0
			shifts[ib] = 1
			for i := range L {
				L[i] = 1
			}
			continue
		}
		// Exhaustive search for the two boundaries that split the sorted
		// values into the levels -1, 0, 1 (with either delta sign).
		for j, v := range xb {
			pairs[j] = sortPair{v, int32(j)}
		}
		glibcMergeSort(pairs[:], tmp[:])
		sumx[0], sumw[0] = 0, 0
		for j := 0; j < blockSize; j++ {
			i := pairs[j].idx
			sumx[j+1] = sumx[j] + float32(weight[i]*xb[i])
			sumw[j+1] = sumw[j] + weight[i]
		}
		bestScore := -fltMax
		scale := max
		besti1, besti2, bestShift := -1, -1, 0
		for i1 := 0; i1 <= blockSize; i1++ {
			for i2 := i1; i2 <= blockSize; i2++ {
				sumqx, sumq2 := iq1Split(&sumx, &sumw, i1, i2, blockSize, &iq1XP)
				if sumq2 > 0 && sumqx*sumqx > bestScore*sumq2 {
					scale = sumqx / sumq2
					bestScore = scale * sumqx
					besti1, besti2, bestShift = i1, i2, 1
				}
				sumqx, sumq2 = iq1Split(&sumx, &sumw, i1, i2, blockSize, &iq1XM)
				if sumq2 > 0 && sumqx*sumqx > bestScore*sumq2 {
					scale = sumqx / sumq2
					bestScore = scale * sumqx
					besti1, besti2, bestShift = i1, i2, -1
				}
			}
		}
		if besti1 < 0 || besti2 < 0 || bestShift == 0 {
			scales[ib] = 0
			shifts[ib] = 1
			for i := range L {
				L[i] = 1
			}
			continue
		}
		for j := 0; j < besti1; j++ {
			L[pairs[j].idx] = 0
		}
		for j := besti1; j < besti2; j++ {
			L[pairs[j].idx] = 1
		}
		for j := besti2; j < blockSize; j++ {
			L[pairs[j].idx] = 2
		}
		if scale < 0 {
			for j := range L {
				L[j] = 2 - L[j]
			}
			scale = -scale
			bestShift = -bestShift
		}
		allOnGrid := true
		xx := &iq1XP
		if bestShift != 1 {
			xx = &iq1XM
		}
		for k := 0; k < blockSize/8; k++ {
			u := packLevels8(L[8*k:])
			gi := int(g.kmap[u])
			if gi < 0 {
				allOnGrid = false
				gi = searchNbr1(fast, g.neighboursOf(u), g, xb[8*k:], weight[8*k:], scale, xx, L[8*k:])
			}
			index[k] = uint16(gi)
		}
		if !allOnGrid {
			var sumqx, sumq2 float32
			for k := 0; k < blockSize/8; k++ {
				pg := &g.points[index[k]]
				for j := 0; j < 8; j++ {
					w := weight[8*k+j]
					q := xx[(pg[j]-1)/2]
					sumqx += float32(w * q * xb[8*k+j])
					sumq2 += float32(w * q * q)
				}
			}
			if sumqx > 0 && sumq2 > 0 {
				scale = sumqx / sumq2
			}
		}
		var h uint16
		for k := 0; k < blockSize/8; k++ {
			qs[(blockSize/8)*ib+k] = uint8(index[k])
			h |= (index[k] >> 8) << (3 * k)
		}
		qh[ib] = h
		scale = nonNegScale(scale)
		scales[ib] = scale
		shifts[ib] = int8(bestShift)
		maxScale = cmaxf(maxScale, scale)
	}
	if maxScale != 0 {
		d := maxScale / 15
		putFP16(y, float32(d*1.125))
		id := 1 / d
		for ib := 0; ib < 256/blockSize; ib++ {
			l := nearestHalfLevel(id, scales[ib])
			l = max32(0, min32(7, l))
			if shifts[ib] == -1 {
				l |= 8
			}
			qh[ib] |= uint16(l << 12)
		}
	}
	for ib, v := range qh {
		binary.LittleEndian.PutUint16(y[34+2*ib:], v)
	}
}

// iq1Split is the score of one split of the sorted values: the values below
// i1 get level xv[0], those in [i1, i2) xv[1], the rest xv[2].
func iq1Split(sumx, sumw *[33]float32, i1, i2, n int, xv *[3]float32) (sumqx, sumq2 float32) {
	sumqx = float32((sumx[i1]-sumx[0])*xv[0]) + float32((sumx[i2]-sumx[i1])*xv[1]) + float32((sumx[n]-sumx[i2])*xv[2])
	sumq2 = float32(float32((sumw[i1]-sumw[0])*xv[0])*xv[0]) + float32(float32((sumw[i2]-sumw[i1])*xv[1])*xv[1]) +
		float32(float32((sumw[n]-sumw[i2])*xv[2])*xv[2])
	return sumqx, sumq2
}

// iq1mLevels returns the level tables of the two 8-value halves of an
// IQ1_M 16-value group for shift code k (0: +,+  1: +,-  2: -,+  3: -,-).
func iq1mLevels(k int) (first, second *[3]float32) {
	first, second = &iq1XP, &iq1XP
	if k >= 2 {
		first = &iq1XM
	}
	if k%2 != 0 {
		second = &iq1XM
	}
	return first, second
}

// iq1mSplitRef is the exhaustive split search of quantize_row_iq1_m_impl
// for one 16-value group as ggml writes it: for every split and shift code,
// the weighted sums over all 16 values in sorted order (pairs: the values
// sorted ascending). It returns the best scale, split (i1, i2) and shift
// code k, or k = -1 when no split has a positive sumq2.
func iq1mSplitRef(pairs *[16]sortPair, weight, xb *[16]float32, max float32) (scale float32, besti1, besti2, bestK int) {
	const blockSize = 16
	bestScore := -fltMax
	scale = max
	besti1, besti2, bestK = -1, -1, -1
	for i1 := 0; i1 <= blockSize; i1++ {
		for i2 := i1; i2 <= blockSize; i2++ {
			for k := 0; k < 4; k++ {
				first, second := iq1mLevels(k)
				var sumqx, sumq2 float32
				for j := 0; j < blockSize; j++ {
					seg := 2
					if j < i1 {
						seg = 0
					} else if j < i2 {
						seg = 1
					}
					i := pairs[j].idx
					xv := second
					if i < blockSize/2 {
						xv = first
					}
					t := xv[seg]
					sumqx += float32(float32(weight[i]*t) * xb[i])
					sumq2 += float32(float32(weight[i]*t) * t)
				}
				if sumq2 > 0 && sumqx*sumqx > bestScore*sumq2 {
					scale = sumqx / sumq2
					bestScore = scale * sumqx
					besti1, besti2, bestK = i1, i2, k
				}
			}
		}
	}
	return scale, besti1, besti2, bestK
}

// iq1mMasks are the delta-sign bits of the two halves in qh per shift code.
var iq1mMasks = [4]uint8{0x00, 0x80, 0x08, 0x88}

// refIQ1M encodes one IQ1_M block: qs[32] (low grid-index bytes), qh[16]
// (3 high index bits and a delta-sign bit per 8 values), scales[8] (four
// uint16, each with four 3-bit group scales and 4 bits of the f16 scale).
func refIQ1M(y []byte, x, qw []float32) { iq1mEncode(y, x, qw, false) }

// iq1mEncode is the body of refIQ1M; fast selects the table-driven
// neighbour search and the incremental split search (the public kernel).
func iq1mEncode(y []byte, x, qw []float32, fast bool) {
	const blockSize = 16
	g := iq1Lattice()
	y = y[:56]
	x = x[:256]
	var scales [16]float32
	var weight [blockSize]float32
	var pairs, tmp [blockSize]sortPair
	var L [blockSize]int8
	var index [blockSize / 8]uint16
	var shifts [16]int8

	for i := range y {
		y[i] = 0
	}
	qs := y[0:32]
	qh := y[32:48]
	var maxScale float32
	sigma2 := 2 * sumSquares(x) / 256
	setWeights := func(xb []float32, ib int) {
		if qw != nil {
			weightsSigma(weight[:], xb, qw[blockSize*ib:], sigma2)
		} else {
			for i, v := range xb {
				weight[i] = v * v
			}
		}
	}
	for ib := 0; ib < 256/blockSize; ib++ {
		xb := x[blockSize*ib : blockSize*ib+blockSize]
		setWeights(xb, ib)
		max := absf(xb[0])
		for _, v := range xb[1:] {
			max = cmaxf(max, absf(v))
		}
		if max < groupMaxEpsIQ1M {
			scales[ib] = 0
			shifts[ib] = 0
			for i := range L {
				L[i] = 1
			}
			continue
		}
		for j, v := range xb {
			pairs[j] = sortPair{v, int32(j)}
		}
		glibcMergeSort(pairs[:], tmp[:])
		var scale float32
		var besti1, besti2, bestK int
		if fast {
			scale, besti1, besti2, bestK = iq1mSplitFast(&pairs, &weight, (*[blockSize]float32)(xb), max)
		} else {
			scale, besti1, besti2, bestK = iq1mSplitRef(&pairs, &weight, (*[blockSize]float32)(xb), max)
		}
		if besti1 < 0 || besti2 < 0 || bestK < 0 {
			scales[ib] = 0
			shifts[ib] = 0
			for i := range L {
				L[i] = 1
			}
			continue
		}
		for j := 0; j < besti1; j++ {
			L[pairs[j].idx] = 0
		}
		for j := besti1; j < besti2; j++ {
			L[pairs[j].idx] = 1
		}
		for j := besti2; j < blockSize; j++ {
			L[pairs[j].idx] = 2
		}
		if scale < 0 {
			for j := range L {
				L[j] = 2 - L[j]
			}
			scale = -scale
			bestK = 3 - bestK
		}
		allOnGrid := true
		first, second := iq1mLevels(bestK)
		for k := 0; k < blockSize/8; k++ {
			xx := first
			if k != 0 {
				xx = second
			}
			u := packLevels8(L[8*k:])
			gi := int(g.kmap[u])
			if gi < 0 {
				allOnGrid = false
				gi = searchNbr1(fast, g.neighboursOf(u), g, xb[8*k:], weight[8*k:], scale, xx, L[8*k:])
			}
			index[k] = uint16(gi)
		}
		if !allOnGrid {
			var sumqxF, sumq2F float32
			for k := 0; k < blockSize/8; k++ {
				xx := first
				if k != 0 {
					xx = second
				}
				pg := &g.points[index[k]]
				for j := 0; j < 8; j++ {
					w := weight[8*k+j]
					q := xx[(pg[j]-1)/2]
					sumqxF += float32(w * q * xb[8*k+j])
					sumq2F += float32(w * q * q)
				}
			}
			if sumqxF > 0 && sumq2F > 0 {
				scale = sumqxF / sumq2F
			}
		}
		qs[2*ib+0] = uint8(index[0])
		qs[2*ib+1] = uint8(index[1])
		qh[ib] = uint8(index[0]>>8) | uint8((index[1]>>8)<<4)
		scale = nonNegScale(scale)
		scales[ib] = scale
		shifts[ib] = int8(bestK)
		maxScale = cmaxf(maxScale, scale)
	}
	if maxScale == 0 {
		return
	}
	var sc [4]uint16
	d := maxScale / 15
	id := 1 / d
	var sumqxF, sumq2F float32
	for ib := 0; ib < 256/blockSize; ib++ {
		l := nearestHalfLevel(id, scales[ib])
		l = max32(0, min32(7, l))
		sc[ib/4] |= uint16(l << (3 * (ib % 4)))
		qh[ib] |= iq1mMasks[shifts[ib]]
		xb := x[blockSize*ib : blockSize*ib+blockSize]
		setWeights(xb, ib)
		first, second := iq1mLevels(int(shifts[ib]))
		for k := 0; k < blockSize/8; k++ {
			xx := first
			if k != 0 {
				xx = second
			}
			gi := int(qs[2*ib+k]) + (int(qh[ib])<<(8-4*k))&0x700
			pg := &g.points[gi]
			for j := 0; j < 8; j++ {
				w := weight[8*k+j]
				q := xx[(pg[j]-1)/2] * float32(2*l+1)
				sumqxF += float32(float32(w*q) * xb[8*k+j])
				sumq2F += float32(float32(w*q) * q)
			}
		}
	}
	if sumq2F > 0 {
		d = sumqxF / sumq2F
	}
	s := half.F32ToF16(float32(d * 1.1125))
	sc[0] |= (s & 0x000f) << 12
	sc[1] |= (s & 0x00f0) << 8
	sc[2] |= (s & 0x0f00) << 4
	sc[3] |= s & 0xf000
	for i, v := range sc {
		binary.LittleEndian.PutUint16(y[48+2*i:], v)
	}
}
