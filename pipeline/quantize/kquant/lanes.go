package kquant

import (
	"encoding/binary"
	"unsafe"
)

// Lane layouts shared by the vector kernels (*_amd64.s) and their Go
// drivers. A vector kernel runs the search of one sub-block per vector lane:
// lane j of row i holds element i of sub-block j, so the sequential sums of
// the reference become one vector add per element, in the same order, and
// every lane performs exactly the float32 operations the scalar code
// performs for its sub-block.

// qkx2Lanes is the state of a search run on 8 blocks at once:
// make_qkx2_quants and make_qkx3_quants on 8 sub-blocks of 32 values (Q4_K,
// Q5_K) or of 16 (Q2_K, rows 0-15), and the IQ4 scale search on 8 blocks
// of 32 (IQ4_XS's sub-blocks, or 8 IQ4_NL blocks). The assembly addresses
// it by the offsets checked in TestLaneLayouts.
type qkx2Lanes struct {
	x     [32][8]float32 // in: x[i][j] is value i of sub-block j
	w     [32][8]float32 // weights (filled by the kernel, or the importance weights)
	L     [32][8]int32   // out: the levels of the best step
	laux  [32][8]int32   // scratch: the levels of the current step
	maxv  [8]float32     // scratch: max
	sumW  [8]float32     // scratch
	sumX  [8]float32     // scratch
	best  [8]float32     // scratch: best error
	scale [8]float32     // out: the scale
	min   [8]float32     // out: the_min (minus the offset, >= 0)
	dead  [8]uint32      // scratch: all-ones where max == min
	num   [40]float32    // in: the numerators rmin + rdelta*is + nmax, is = 0..nstep
}

// qx16Lanes is the state of make_qx_quants (n = 16, rmse_type 1; Q6_K, and
// Q3_K with an importance matrix) or make_q3_quants (Q3_K) run on the 16
// sub-blocks of a super-block at once, in two vectors of 8 lanes (A:
// sub-blocks 0..7, B: 8..15).
type qx16Lanes struct {
	x     [16][16]float32 // in: x[i][j] is value i of sub-block j
	w     [16][16]float32 // the weights: x*x (filled by the kernel) or the importance weights
	wx    [16][16]float32 // scratch: (x*x)*x
	L     [16][16]int32   // out: levels + nmax of the best trial
	laux  [16][16]int32   // scratch: levels of the current trial
	scale [16]float32     // out
	max   [16]float32     // scratch: the value of largest magnitude
	best  [16]float32     // scratch
	dead  [16]uint32      // scratch: all-ones where amax < GROUP_MAX_EPS
}

// qxTrialNum returns -(nmax + 0.1*is) for the trials is = -9..-1, 1..9 of
// make_qx_quants, as the C code computes it.
func qxTrialNum(nmax int) (t [18]float32) {
	fnmax := float32(nmax)
	k := 0
	for is := -9; is <= 9; is++ {
		if is != 0 {
			t[k] = -(fnmax + float32(0.1*float32(is)))
			k++
		}
	}
	return t
}

// q6kTrialNum and q3kTrialNum are qxTrialNum for Q6_K (nmax 32) and for
// Q3_K's weighted search (nmax 4).
var q6kTrialNum, q3kTrialNum = qxTrialNum(32), qxTrialNum(4)

// qkx2Num returns rmin + rdelta*is + nmax for is = 0..nstep, as
// make_qkx2_quants computes the numerator of iscale (st.num).
func qkx2Num(rmin, rdelta float32, nmax int32, nstep int) (num [40]float32) {
	fnmax := float32(nmax)
	for is := 0; is <= nstep; is++ {
		num[is] = rmin + float32(rdelta*float32(is)) + fnmax
	}
	return num
}

// q45kLanes is fastQ45K with the 8 sub-block searches run at once by the
// vector kernel. It returns false, having written nothing, when a value is
// NaN or Inf (those blocks go to the scalar kernel, whose NaN propagation
// the vector lanes do not copy).
func q45kLanes(hdr []byte, L *[256]uint8, x *[256]float32, st *qkx2Lanes, nmax int32, nstep int) bool {
	if !transpose32AVX2(&st.x, x) {
		return false
	}
	qkx2Lanes32AVX2(st, int(nmax), nstep, false)
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		if st.scale[j] > maxScale {
			maxScale = st.scale[j]
		}
		if st.min[j] > maxMin {
			maxMin = st.min[j]
		}
	}
	finishQ45K(hdr, L, x[:], int(nmax), &st.scale, &st.min, maxScale, maxMin, st)
	return true
}

func quantizeQ4KLanes(dst []byte, src []float32, nb int) {
	var st qkx2Lanes
	st.num = qkx2Num(-1, 0.1, 15, 20)
	for i := 0; i < nb; i++ {
		y := dst[i*144 : i*144+144]
		x := (*[256]float32)(src[i*256 : i*256+256])
		var L [256]uint8
		if !q45kLanes(y, &L, x, &st, 15, 20) {
			fastQ4K(y, x[:])
			continue
		}
		packQ4K(y[16:144], &L)
	}
}

func quantizeQ5KLanes(dst []byte, src []float32, nb int) {
	var st qkx2Lanes
	st.num = qkx2Num(-0.5, 0.1, 31, 15)
	for i := 0; i < nb; i++ {
		y := dst[i*176 : i*176+176]
		x := (*[256]float32)(src[i*256 : i*256+256])
		var L [256]uint8
		if !q45kLanes(y, &L, x, &st, 31, 15) {
			fastQ5K(y, x[:])
			continue
		}
		packQ5K(y[16:48], y[48:176], &L)
	}
}

// q6kLanes is refQ6K with the 16 make_qx_quants searches run at once by the
// vector kernel. It returns false, having written nothing, when a value is
// NaN or Inf.
func q6kLanes(y []byte, x *[256]float32, st *qx16Lanes) bool {
	if !transpose16AVX2(&st.x, x) {
		return false
	}
	qx16LanesAVX2(st, &q6kTrialNum, false, 32)
	var L [256]int8
	finishQ6K(y, x, &st.scale, &L, st)
	return true
}

func quantizeQ6KLanes(dst []byte, src []float32, nb int) {
	var st qx16Lanes
	for i := 0; i < nb; i++ {
		y := dst[i*210 : i*210+210]
		x := (*[256]float32)(src[i*256 : i*256+256])
		if !q6kLanes(y, x, &st) {
			refQ6K(y, x[:])
		}
	}
}

// q2kLanes is fastQ2K with the 16 make_qkx2_quants searches run by the
// vector kernel, 8 sub-blocks at a time. It returns false, having written
// nothing, when a value is NaN or Inf.
func q2kLanes(y []byte, x *[256]float32, st *qkx2Lanes) bool {
	y = y[:84]
	var L [256]uint8
	var mins, scales [16]float32
	for h := 0; h < 2; h++ {
		if !transpose16x8AVX2(&st.x, (*[128]float32)(x[128*h:128*h+128])) {
			return false
		}
		qkx2Lanes16AVX2(st, 3, 15, false, true)
		for j := 0; j < 8; j++ {
			scales[8*h+j], mins[8*h+j] = st.scale[j], st.min[j]
			for i := 0; i < 16; i++ {
				L[16*(8*h+j)+i] = uint8(st.L[i][j])
			}
		}
	}
	finishQ2K(y, &L, x, &scales, &mins, true)
	return true
}

func quantizeQ2KLanes(dst []byte, src []float32, nb int) {
	var st qkx2Lanes
	st.num = qkx2Num(-0.5, 0.1, 3, 15)
	for i := 0; i < nb; i++ {
		y := dst[i*84 : i*84+84]
		x := (*[256]float32)(src[i*256 : i*256+256])
		if !q2kLanes(y, x, &st) {
			fastQ2K(y, x[:])
		}
	}
}

// iq4Tables holds what the IQ4 vector kernels need of kvalues_iq4nl, all
// derived from kvaluesIQ4NL: the values (as float32, in two halves for
// VPERMPS), twice the midpoints the binary search of bestIndexIQ4 compares
// with at each level (level 1: mid2[8]; level 2: mid2[4] or mid2[12],
// picked as c4 + (mask & diff); level 3: mid2[4k+2]; level 4:
// mid2[2k+1]), the index bits, and itry + kvalues[0] for itry = -7..7.
type iq4Tables struct {
	kvLo, kvHi   [8]float32
	t3, t4       [8]float32
	c8, c4, diff [8]float32
	i8, i4, i2   [8]int32
	try          [15]float32
}

var iq4Tab = func() (t iq4Tables) {
	m := kvaluesIQ4NLmid2
	for k := 0; k < 8; k++ {
		t.kvLo[k], t.kvHi[k] = kvaluesIQ4NLf[k], kvaluesIQ4NLf[8+k]
		t.t4[k] = m[2*k+1]
		if k < 4 {
			t.t3[k] = m[4*k+2]
		}
		t.c8[k], t.c4[k], t.diff[k] = m[8], m[4], m[12]-m[4]
		t.i8[k], t.i4[k], t.i2[k] = 8, 4, 2
	}
	for itry := -7; itry <= 7; itry++ {
		t.try[itry+7] = float32(itry + int(kvaluesIQ4NL[0]))
	}
	return t
}()

// iq4xsLanes is fastIQ4XS (qw nil) or fastIQ4XSWeighted with the 8
// sub-block searches run at once by the vector kernel and the final table
// searches vectorized. It returns false, having written nothing, when a
// value or weight is NaN or Inf.
func iq4xsLanes(y []byte, x *[256]float32, qw []float32, st *qkx2Lanes) bool {
	if !transpose32AVX2(&st.x, x) {
		return false
	}
	if qw != nil {
		sigma2 := sumSquares(x[:])
		sigma2 *= 2.0 / 256
		if !st.sigmaWeights(x, qw, sigma2) {
			return false
		}
	}
	iq4Lanes32AVX2(st, &iq4Tab, qw != nil)
	y = y[:136]
	var maxScale, amaxScale float32
	for ib := 0; ib < 8; ib++ {
		if ad := absf(st.scale[ib]); ad > amaxScale {
			amaxScale = ad
			maxScale = st.scale[ib]
		}
	}
	d := -maxScale / 32
	putFP16(y[0:], d)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var scalesH uint16
	for ib := 0; ib < 8; ib++ {
		l := max(-32, min(31, nearestInt(float32(id*st.scale[ib]))))
		dl := d * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		iq4IndexAVX2(&y[8+16*ib], &x[32*ib], idl, &iq4Tab)
		l += 32
		if ib%2 == 0 {
			y[4+ib/2] = uint8(l) & 0xF
		} else {
			y[4+ib/2] |= (uint8(l) & 0xF) << 4
		}
		scalesH |= uint16(l>>4) << (2 * ib)
	}
	binary.LittleEndian.PutUint16(y[2:], scalesH)
	return true
}

func quantizeIQ4XSLanes(dst []byte, src []float32, nb int) {
	var st qkx2Lanes
	for i := 0; i < nb; i++ {
		y := dst[i*136 : i*136+136]
		x := (*[256]float32)(src[i*256 : i*256+256])
		if !iq4xsLanes(y, x, nil, &st) {
			fastIQ4XS(y, x[:])
		}
	}
}

// quantizeIQ4NLLanes runs the search on 8 blocks at a time (one per lane),
// the remaining blocks and any group of 8 with a NaN or Inf on the scalar
// kernel.
func quantizeIQ4NLLanes(dst []byte, src []float32, nb int) {
	var st qkx2Lanes
	i := 0
	for ; i+8 <= nb; i += 8 {
		x := (*[256]float32)(src[i*32 : i*32+256])
		if !transpose32AVX2(&st.x, x) {
			for k := i; k < i+8; k++ {
				fastIQ4NL(dst[k*18:k*18+18], src[k*32:k*32+32])
			}
			continue
		}
		iq4Lanes32AVX2(&st, &iq4Tab, false)
		for j := 0; j < 8; j++ {
			y := dst[(i+j)*18 : (i+j)*18+18]
			s := st.scale[j]
			putFP16(y, s)
			var id float32
			if s != 0 {
				id = 1 / s
			}
			iq4IndexAVX2(&y[2], &x[32*j], id, &iq4Tab)
		}
	}
	for ; i < nb; i++ {
		fastIQ4NL(dst[i*18:i*18+18], src[i*32:i*32+32])
	}
}

// q3kLanes is refQ3K with the 16 make_q3_quants searches run at once by the
// vector kernel. It returns false, having written nothing, when a value is
// NaN or Inf.
func q3kLanes(y []byte, x *[256]float32, st *qx16Lanes) bool {
	if !transpose16AVX2(&st.x, x) {
		return false
	}
	q3LanesAVX2(st)
	y = y[:110]
	var maxScale, amax float32
	for j := 0; j < 16; j++ {
		if s := absf(st.scale[j]); s > amax {
			amax = s
			maxScale = st.scale[j]
		}
	}
	sc := y[96:108]
	for i := range sc {
		sc[i] = 0
	}
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := 0; j < 16; j++ {
			l := int8(nearestInt(float32(iscale * st.scale[j])))
			l = int8(max32(-32, min32(31, int32(l))) + 32)
			if j < 8 {
				sc[j] = uint8(l) & 0xF
			} else {
				sc[j-8] |= (uint8(l) & 0xF) << 4
			}
			l >>= 4
			sc[j%4+8] |= uint8(l) << (2 * (j / 4))
		}
		putFP16(y[108:], 1/iscale)
	} else {
		putFP16(y[108:], 0)
	}
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
		d := dAll * float32(scv)
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

func quantizeQ3KLanes(dst []byte, src []float32, nb int) {
	var st qx16Lanes
	for i := 0; i < nb; i++ {
		y := dst[i*110 : i*110+110]
		x := (*[256]float32)(src[i*256 : i*256+256])
		if !q3kLanes(y, x, &st) {
			refQ3K(y, x[:])
		}
	}
}
