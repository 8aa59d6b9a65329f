package kquant

import (
	"math"
	"unsafe"
)

// Vector drivers of the importance-matrix paths (QuantizeWeighted): the
// lane kernels of lanes.go given the weights ggml computes, with the plain
// kernels as fallback for blocks with a non-finite value or weight (and,
// where the vector error sums stop early, a negative weight).

// sigmaWeights fills st.w (transposed) with the weights weightsSigma makes
// for the 8 blocks of 32 values of x, qw*sqrtf(sigma2 + x*x), and reports
// whether they are all finite.
func (st *qkx2Lanes) sigmaWeights(x *[256]float32, qw []float32, sigma2 float32) bool {
	qw = qw[:256]
	for j := 0; j < 8; j++ {
		for i := 0; i < 32; i++ {
			v := x[32*j+i]
			w := float32(qw[32*j+i] * sqrtf(sigma2+float32(v*v)))
			if w-w != 0 {
				return false
			}
			st.w[i][j] = w
		}
	}
	return true
}

// q45kWeightedLanes is fastQ45KWeighted with the 8 make_qkx3_quants searches
// run at once by the vector kernel (make_qkx3_quants is make_qkx2_quants
// with its own parameters, fast_weighted.go). It returns false, having
// written nothing, when a value is NaN or Inf or a weight is negative, NaN
// or Inf (the vector error sums stop early, which needs weights >= 0).
func q45kWeightedLanes(hdr []byte, L *[256]uint8, x *[256]float32, qw []float32, st *qkx2Lanes, nmax int32, clamp63 bool) bool {
	qw = qw[:256]
	if !transpose32AVX2(&st.x, x) {
		return false
	}
	sigma2 := 2 * sumSquares(x[:]) / 256
	var sw [8]float32
	for j := 0; j < 8; j++ {
		var sumw float32
		for i := 0; i < 32; i++ {
			v := x[32*j+i]
			w := float32(qw[32*j+i] * sqrtf(sigma2+float32(v*v)))
			if !(w >= 0 && w <= math.MaxFloat32) {
				return false
			}
			st.w[i][j] = w
			sumw += w
		}
		sw[j] = sumw
	}
	qkx2Lanes32AVX2(st, int(nmax), 36, true)
	for i := 0; i < 32; i++ {
		for j := 0; j < 8; j++ {
			L[32*j+i] = uint8(st.L[i][j])
		}
	}
	finishQ45KWeighted(hdr, L, x[:], int(nmax), clamp63, &st.scale, &st.min, &sw)
	return true
}

// qkx3Num15 and qkx3Num31 are the numerators of make_qkx3_quants' 37 steps
// (rmin -0.9, rdelta 0.05) for nmax 15 and 31.
var qkx3Num15, qkx3Num31 = qkx2Num(-0.9, 0.05, 15, 36), qkx2Num(-0.9, 0.05, 31, 36)

func weightedQ4K(y []byte, x, qw []float32) {
	if useAVX2 {
		var st qkx2Lanes
		st.num = qkx3Num15
		var L [256]uint8
		if q45kWeightedLanes(y[:144], &L, (*[256]float32)(x[:256]), qw, &st, 15, false) {
			packQ4K(y[16:144], &L)
			return
		}
	}
	fastQ4KWeighted(y, x, qw)
}

func weightedQ5K(y []byte, x, qw []float32) {
	if useAVX2 {
		var st qkx2Lanes
		st.num = qkx3Num31
		var L [256]uint8
		if q45kWeightedLanes(y[:176], &L, (*[256]float32)(x[:256]), qw, &st, 31, true) {
			packQ5K(y[16:48], y[48:176], &L)
			return
		}
	}
	fastQ5KWeighted(y, x, qw)
}

// q6kWeightedLanes is refQ6KWeighted with the 16 make_qx_quants searches
// run at once by the vector kernel, with the importance weights as given.
// It returns false, having written nothing, when a value or a weight is
// NaN or Inf.
func q6kWeightedLanes(y []byte, x *[256]float32, qw []float32, st *qx16Lanes) bool {
	qw = qw[:256]
	if !transpose16AVX2(&st.x, x) || !transpose16AVX2(&st.w, (*[256]float32)(qw)) {
		return false
	}
	qx16LanesAVX2(st, &q6kTrialNum, true, 32)
	var L [256]int8
	finishQ6K(y, x, &st.scale, &L, st)
	return true
}

func weightedQ6K(y []byte, x, qw []float32) {
	if useAVX2 {
		var st qx16Lanes
		if q6kWeightedLanes(y, (*[256]float32)(x[:256]), qw, &st) {
			return
		}
	}
	refQ6KWeighted(y, x, qw)
}

func weightedIQ4XS(y []byte, x, qw []float32) {
	if useAVX2 {
		var st qkx2Lanes
		if iq4xsLanes(y, (*[256]float32)(x[:256]), qw, &st) {
			return
		}
	}
	fastIQ4XSWeighted(y, x, qw)
}

// weightedIQ4NLRow is fastIQ4NLWeighted on every block of a row, the
// searches of 8 blocks at a time on the vector kernel (each block's
// sigma2 is its own: sum x^2 * 2/32).
func weightedIQ4NLRow(y []byte, x, qw []float32) {
	nb := len(x) / 32
	i := 0
	if useAVX2 {
		var st qkx2Lanes
		for ; i+8 <= nb; i += 8 {
			xs := (*[256]float32)(x[i*32 : i*32+256])
			ok := transpose32AVX2(&st.x, xs)
			for j := 0; j < 8 && ok; j++ {
				sigma2 := sumSquares(xs[32*j : 32*j+32])
				sigma2 *= 2.0 / 32
				for k := 0; k < 32; k++ {
					v := xs[32*j+k]
					w := float32(qw[i*32+32*j+k] * sqrtf(sigma2+float32(v*v)))
					if w-w != 0 {
						ok = false
						break
					}
					st.w[k][j] = w
				}
			}
			if !ok {
				for k := i; k < i+8; k++ {
					fastIQ4NLWeighted(y[k*18:k*18+18], x[k*32:k*32+32], qw[k*32:k*32+32])
				}
				continue
			}
			iq4Lanes32AVX2(&st, &iq4Tab, true)
			for j := 0; j < 8; j++ {
				b := y[(i+j)*18 : (i+j)*18+18]
				s := st.scale[j]
				putFP16(b, s)
				var id float32
				if s != 0 {
					id = 1 / s
				}
				iq4IndexAVX2(&b[2], &xs[32*j], id, &iq4Tab)
			}
		}
	}
	for ; i < nb; i++ {
		fastIQ4NLWeighted(y[i*18:i*18+18], x[i*32:i*32+32], qw[i*32:i*32+32])
	}
}

// q3kWeightedLanes is refQ3KWeighted with the 16 make_qx_quants searches
// (nmax 4, weights qw*sqrt(sigma2 + x^2)) run at once by the vector kernel.
// It returns false, having written nothing, when a value or a weight is
// NaN or Inf.
func q3kWeightedLanes(y []byte, x *[256]float32, qw []float32, st *qx16Lanes) bool {
	qw = qw[:256]
	if !transpose16AVX2(&st.x, x) {
		return false
	}
	sigma2 := 2 * sumSquares(x[:]) / 256
	var sw [16]float32
	for j := 0; j < 16; j++ {
		var sumw float32
		for l := 0; l < 16; l++ {
			v := x[16*j+l]
			w := float32(qw[16*j+l] * sqrtf(sigma2+float32(v*v)))
			if w-w != 0 {
				return false
			}
			st.w[l][j] = w
			sumw += w
		}
		sw[j] = sumw
	}
	qx16LanesAVX2(st, &q3kTrialNum, true, 4)
	y = y[:110]
	sc := y[96:108]
	for i := range sc {
		sc[i] = 0
	}
	var Ls [16]int8
	dBlock := makeQXQuantsW(16, 32, st.scale[:], Ls[:], sw[:])
	for j := 0; j < 16; j++ {
		l := int32(Ls[j])
		if j < 8 {
			sc[j] = uint8(l & 0xF)
		} else {
			sc[j-8] |= uint8(l&0xF) << 4
		}
		l >>= 4
		sc[j%4+8] |= uint8(l << (2 * (j / 4)))
	}
	putFP16(y[108:], dBlock)
	dAll := getFP16(y[108:])
	var L [256]int8
	for j := 0; j < 16; j++ {
		var s uint8
		if j < 8 {
			s = sc[j] & 0xF
		} else {
			s = sc[j-8] >> 4
		}
		scv := int8(s|((sc[8+j%4]>>(2*(j/4)))&3)<<4) - 32
		d := float32(dAll * float32(scv))
		if d == 0 {
			for ii := 0; ii < 16; ii++ {
				L[16*j+ii] = int8(st.L[ii][j])
			}
			continue
		}
		requantAVX2((*byte)(unsafe.Pointer(&L[16*j])), &x[16*j], 16, d, 0, -4, 3, 4)
	}
	packQ3(y[0:32], y[32:96], &L)
	return true
}

func weightedQ3K(y []byte, x, qw []float32) {
	if useAVX2 {
		var st qx16Lanes
		if q3kWeightedLanes(y, (*[256]float32)(x[:256]), qw, &st) {
			return
		}
	}
	refQ3KWeighted(y, x, qw)
}

// qkx3Num3 are the numerators of make_qkx3_quants' 37 steps for nmax 3.
var qkx3Num3 = qkx2Num(-0.9, 0.05, 3, 36)

// q2kWeightedLanes is fastQ2KWeighted with the 16 make_qkx3_quants
// searches run by the vector kernel, 8 sub-blocks at a time. It returns
// false, having written nothing, when a value is NaN or Inf or a weight is
// negative, NaN or Inf (the vector error sums stop early, which needs
// weights >= 0).
func q2kWeightedLanes(y []byte, x *[256]float32, qw []float32, st *qkx2Lanes) bool {
	qw = qw[:256]
	sigma2 := sumSquares(x[:]) / 256
	var L [256]uint8
	var mins, scales, sw [16]float32
	for h := 0; h < 2; h++ {
		if !transpose16x8AVX2(&st.x, (*[128]float32)(x[128*h:128*h+128])) {
			return false
		}
		for j := 0; j < 8; j++ {
			sb := 8*h + j
			for l := 0; l < 16; l++ {
				v := x[16*sb+l]
				w := float32(qw[16*sb+l] * sqrtf(sigma2+float32(v*v)))
				if !(w >= 0 && w <= math.MaxFloat32) {
					return false
				}
				st.w[l][j] = w
				sw[sb] += w
			}
		}
		qkx2Lanes16AVX2(st, 3, 36, true, false)
		for j := 0; j < 8; j++ {
			scales[8*h+j], mins[8*h+j] = st.scale[j], st.min[j]
			for i := 0; i < 16; i++ {
				L[16*(8*h+j)+i] = uint8(st.L[i][j])
			}
		}
	}
	finishQ2KWeighted(y, &L, x, &scales, &mins, &sw)
	return true
}

func weightedQ2K(y []byte, x, qw []float32) {
	if useAVX2 {
		var st qkx2Lanes
		st.num = qkx3Num3
		if q2kWeightedLanes(y, (*[256]float32)(x[:256]), qw, &st) {
			return
		}
	}
	fastQ2KWeighted(y, x, qw)
}
