package kquant

import (
	"encoding/binary"
	"math/bits"
)

// Fast make_qkx2_quants for the fixed sub-block sizes of Q4_K/Q5_K (32
// values, squared error) and Q2_K (16 values, absolute error).
//
// They perform exactly the float32 operations of makeQKX2Quants, in the same
// order for every accumulated sum, so they return the same bits for every
// input (NaN and Inf included). The savings are only in bookkeeping:
//
//   - fixed-size arrays (no bounds checks) and x - min computed once per
//     value of min (the C code moves min to the best fit found so far, and
//     later steps use the moved value in both x - min and max - min);
//   - a step whose levels Laux equal the previous step's levels is skipped.
//     Its sums, D, scale, min and error would be bit-identical to that
//     step's, and an error equal to one already seen can never be strictly
//     smaller than best_error, so skipping it changes nothing. Only the
//     immediately preceding evaluated step is compared (cheap, and where
//     most repeats are);
//   - (32-value version) the step sums restart from the previous evaluated
//     step's prefix sums at the first level that changed: the sums before
//     it are the same additions of the same values;
//   - (32-value version) the error sum stops once it reaches best_error:
//     its terms w*diff^2 are >= 0 (or NaN), so the running float sum never
//     decreases and the step could not have been accepted;
//   - (32-value version) the level loop is unrolled by four.
//
// Measured alternatives that were slower in Go and were dropped: two
// sub-blocks in lockstep, software-pipelining the steps, a float-domain
// nearest_int, incremental levels from per-element thresholds, and an
// unrolled error loop.

// qkx2Fast32 is makeQKX2Quants(32, nmax, x, w, L, _, rmin, rdelta, nstep, false).
func qkx2Fast32(x, w *[32]float32, L *[32]uint8, nmax int32, rmin, rdelta float32, nstep int) (scale, theMin float32) {
	min_, max_ := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < 32; i++ {
		v := x[i]
		if v < min_ {
			min_ = v
		}
		if v > max_ {
			max_ = v
		}
		sumW += w[i]
		sumX += float32(w[i] * v)
	}
	if min_ > 0 {
		min_ = 0
	}
	if max_ == min_ {
		*L = [32]uint8{}
		return 0, -min_
	}
	fnmax := float32(nmax)
	rng := max_ - min_
	var xm [32]float32
	for i := 0; i < 32; i++ {
		xm[i] = x[i] - min_
	}
	iscale := fnmax / rng
	scale = 1 / iscale
	var bestError float32
	for i := 0; i < 32; i++ {
		l := max(0, min(nmax, nearestInt(float32(iscale*xm[i]))))
		L[i] = uint8(l)
		diff := float32(scale*float32(l)) + min_ - x[i]
		diff = diff * diff
		bestError += float32(w[i] * diff)
	}
	var laux, prev [32]uint8
	var fl, pL, pL2, pXL [32]float32 // levels as float and prefix sums of prev
	havePrev := false
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + fnmax) / rng
		levels32(&laux, &xm, iscale, nmax)
		first := 0
		if havePrev {
			first = firstDiff32(&laux, &prev)
			if first == 32 {
				continue
			}
		}
		prev, havePrev = laux, true
		// The sums over the elements before the first changed level are
		// the previous step's prefix sums, bit for bit.
		var sumL, sumL2, sumXL float32
		if first > 0 {
			sumL, sumL2, sumXL = pL[first-1], pL2[first-1], pXL[first-1]
		}
		for i := first; i < 32; i++ {
			f := float32(laux[i])
			fl[i] = f
			a := float32(w[i] * f)
			sumL += a
			sumL2 += float32(a * f)
			sumXL += float32(a * x[i])
			pL[i], pL2[i], pXL[i] = sumL, sumL2, sumXL
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			// The error terms are >= 0 (or NaN), so the running sum never
			// decreases: once it reaches bestError the step cannot win.
			var curError float32
			for k := 0; k < 32 && curError < bestError; k += 8 {
				for i := k; i < k+8; i++ {
					diff := float32(thisScale*fl[i]) + thisMin - x[i]
					diff = diff * diff
					curError += float32(w[i] * diff)
				}
			}
			if curError < bestError {
				*L = laux
				bestError = curError
				scale = thisScale
				min_ = thisMin
				// Later steps use the new minimum, as the C code does.
				rng = max_ - min_
				for i := 0; i < 32; i++ {
					xm[i] = x[i] - min_
				}
			}
		}
	}
	return scale, -min_
}

// qkx2Fast16MAD is makeQKX2Quants(16, nmax, x, w, L, _, rmin, rdelta, nstep, true).
func qkx2Fast16MAD(x, w *[16]float32, L *[16]uint8, nmax int32, rmin, rdelta float32, nstep int) (scale, theMin float32) {
	min_, max_ := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < 16; i++ {
		v := x[i]
		if v < min_ {
			min_ = v
		}
		if v > max_ {
			max_ = v
		}
		sumW += w[i]
		sumX += float32(w[i] * v)
	}
	if min_ > 0 {
		min_ = 0
	}
	if max_ == min_ {
		*L = [16]uint8{}
		return 0, -min_
	}
	fnmax := float32(nmax)
	rng := max_ - min_
	var xm [16]float32
	for i := 0; i < 16; i++ {
		xm[i] = x[i] - min_
	}
	iscale := fnmax / rng
	scale = 1 / iscale
	var bestError float32
	for i := 0; i < 16; i++ {
		l := max(0, min(nmax, nearestInt(float32(iscale*xm[i]))))
		L[i] = uint8(l)
		diff := float32(scale*float32(l)) + min_ - x[i]
		bestError += float32(w[i] * absf(diff))
	}
	var laux, prev [16]uint8
	var fl [16]float32
	havePrev := false
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + fnmax) / rng
		for i := 0; i < 16; i++ {
			l := max(0, min(nmax, nearestInt(float32(iscale*xm[i]))))
			laux[i] = uint8(l)
		}
		if havePrev && laux == prev {
			continue
		}
		prev, havePrev = laux, true
		var sumL, sumL2, sumXL float32
		for i := 0; i < 16; i++ {
			f := float32(laux[i])
			fl[i] = f
			a := float32(w[i] * f)
			sumL += a
			sumL2 += float32(a * f)
			sumXL += float32(a * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curError float32
			for i := 0; i < 16; i++ {
				diff := float32(thisScale*fl[i]) + thisMin - x[i]
				curError += float32(w[i] * absf(diff))
			}
			if curError < bestError {
				*L = laux
				bestError = curError
				scale = thisScale
				min_ = thisMin
				// Later steps use the new minimum, as the C code does.
				rng = max_ - min_
				for i := 0; i < 16; i++ {
					xm[i] = x[i] - min_
				}
			}
		}
	}
	return scale, -min_
}

// firstDiff32 is the index of the first byte where a and b differ, or 32.
func firstDiff32(a, b *[32]uint8) int {
	for k := 0; k < 32; k += 8 {
		if d := binary.LittleEndian.Uint64(a[k:]) ^ binary.LittleEndian.Uint64(b[k:]); d != 0 {
			return k + bits.TrailingZeros64(d)/8
		}
	}
	return 32
}

// levels32 sets laux[i] = clamp(nearest_int(iscale*xm[i]), 0, nmax),
// unrolled by four.
func levels32(laux *[32]uint8, xm *[32]float32, iscale float32, nmax int32) {
	for i := 0; i < 32; i += 4 {
		l0 := nearestInt(float32(iscale * xm[i]))
		l1 := nearestInt(float32(iscale * xm[i+1]))
		l2 := nearestInt(float32(iscale * xm[i+2]))
		l3 := nearestInt(float32(iscale * xm[i+3]))
		laux[i] = uint8(max(0, min(nmax, l0)))
		laux[i+1] = uint8(max(0, min(nmax, l1)))
		laux[i+2] = uint8(max(0, min(nmax, l2)))
		laux[i+3] = uint8(max(0, min(nmax, l3)))
	}
}
