package kquant

// Reference K-quant encoders: quantize_row_q{2,3,4,5,6}_K_ref of
// ggml-quants.c, one 256-value super-block at a time.

// refQ2K encodes one Q2_K block: scales[16] qs[64] d dmin.
func refQ2K(y []byte, x []float32) {
	y = y[:84]
	x = x[:256]
	var L [256]uint8
	var Laux [16]uint8
	var weights [16]float32
	var mins, scales [16]float32
	const q4scale float32 = 15
	var maxScale, maxMin float32
	for j := 0; j < 16; j++ {
		for l := 0; l < 16; l++ {
			weights[l] = absf(x[16*j+l])
		}
		scales[j], mins[j] = makeQKX2Quants(16, 3, x[16*j:], weights[:], L[16*j:], Laux[:], -0.5, 0.1, 15, true)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	sc := y[0:16]
	if maxScale > 0 {
		iscale := q4scale / maxScale
		for j := 0; j < 16; j++ {
			sc[j] = uint8(nearestInt(float32(iscale * scales[j])))
		}
		putFP16(y[80:], maxScale/q4scale)
	} else {
		for j := range sc {
			sc[j] = 0
		}
		putFP16(y[80:], 0)
	}
	if maxMin > 0 {
		iscale := q4scale / maxMin
		for j := 0; j < 16; j++ {
			l := nearestInt(float32(iscale * mins[j]))
			sc[j] |= uint8(l << 4)
		}
		putFP16(y[82:], maxMin/q4scale)
	} else {
		putFP16(y[82:], 0)
	}
	dd, dmin := getFP16(y[80:]), getFP16(y[82:])
	for j := 0; j < 16; j++ {
		d := dd * float32(sc[j]&0xF)
		if d == 0 {
			continue
		}
		dm := dmin * float32(sc[j]>>4)
		for ii := 0; ii < 16; ii++ {
			l := nearestInt((x[16*j+ii] + dm) / d)
			L[16*j+ii] = uint8(max32(0, min32(3, l)))
		}
	}
	packQ2(y[16:80], L[:])
}

// packQ2 packs 256 2-bit values: per 128-chunk, byte l holds values
// l, l+32, l+64, l+96.
func packQ2(qs []byte, L []uint8) {
	for j := 0; j < 256; j += 128 {
		for l := 0; l < 32; l++ {
			qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
		}
	}
}

// refQ3K encodes one Q3_K block: hmask[32] qs[64] scales[12] d.
func refQ3K(y []byte, x []float32) {
	y = y[:110]
	x = x[:256]
	var L [256]int8
	var scales [16]float32
	var maxScale, amax float32
	for j := 0; j < 16; j++ {
		scales[j] = makeQ3Quants(16, 4, x[16*j:], L[16*j:], true)
		if s := absf(scales[j]); s > amax {
			amax = s
			maxScale = scales[j]
		}
	}
	sc := y[96:108]
	for i := range sc {
		sc[i] = 0
	}
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := 0; j < 16; j++ {
			l := int8(nearestInt(float32(iscale * scales[j])))
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
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max32(-4, min32(3, l)) + 4)
		}
	}
	packQ3(y[0:32], y[32:96], &L)
}

// packQ3 writes the high-bit mask and the low 2 bits of 256 3-bit values.
func packQ3(hmask, qs []byte, L *[256]int8) {
	for i := range hmask[:32] {
		hmask[i] = 0
	}
	m := 0
	hm := uint8(1)
	for j := 0; j < 256; j++ {
		if L[j] > 3 {
			hmask[m] |= hm
			L[j] -= 4
		}
		m++
		if m == 32 {
			m = 0
			hm <<= 1
		}
	}
	for j := 0; j < 256; j += 128 {
		for l := 0; l < 32; l++ {
			qs[j/4+l] = uint8(L[j+l]) | uint8(L[j+l+32])<<2 | uint8(L[j+l+64])<<4 | uint8(L[j+l+96])<<6
		}
	}
}

// q4kWeights fills the Q4_K/Q5_K sub-block weights av_x + |x|.
func q4kWeights(w, x []float32) {
	x = x[:32]
	w = w[:32]
	var sumX2 float32
	for _, v := range x {
		sumX2 += float32(v * v)
	}
	avX := sqrtf(sumX2 / 32)
	for l, v := range x {
		w[l] = avX + absf(v)
	}
}

// packScalesK4 packs 8 6-bit scales and mins (Q4_K/Q5_K scales[12]).
func packScalesK4(sc []byte, ls, lm *[8]uint8) {
	for j := 0; j < 8; j++ {
		if j < 4 {
			sc[j] = ls[j]
			sc[j+4] = lm[j]
		} else {
			sc[j+4] = ls[j]&0xF | (lm[j]&0xF)<<4
			sc[j-4] |= (ls[j] >> 4) << 6
			sc[j] |= (lm[j] >> 4) << 6
		}
	}
}

// scaleMinK4 is get_scale_min_k4.
func scaleMinK4(j int, q []byte) (d, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// refQ45K encodes one Q4_K (nmax 15) or Q5_K (nmax 31) block up to the
// integer levels L; the caller packs L. It writes d, dmin and scales[12]
// into hdr (16 bytes).
func refQ45K(hdr []byte, L *[256]uint8, x []float32, nmax int, rmin float32, nstep int) {
	x = x[:256]
	var Laux [32]uint8
	var weights [32]float32
	var mins, scales [8]float32
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		q4kWeights(weights[:], x[32*j:])
		scales[j], mins[j] = makeQKX2Quants(32, nmax, x[32*j:], weights[:], L[32*j:], Laux[:], rmin, 0.1, nstep, false)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	finishQ45K(hdr, L, x, nmax, &scales, &mins, maxScale, maxMin, nil)
}

// finishQ45K quantizes the sub-block scales and mins to 6 bits, stores
// d/dmin, and re-quantizes every sub-block with the stored values; L holds
// the searches' levels, kept for sub-blocks whose stored scale is 0. With
// lanes != nil those levels are read from the vector kernel's output
// instead and the re-quantization runs on the vector kernel too (the
// values are all finite there).
func finishQ45K(hdr []byte, L *[256]uint8, x []float32, nmax int, scales, mins *[8]float32, maxScale, maxMin float32, lanes *qkx2Lanes) {
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	var ls, lm [8]uint8
	for j := 0; j < 8; j++ {
		ls[j] = min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm[j] = min(63, uint8(nearestInt(float32(invMin*mins[j]))))
	}
	sc := hdr[4:16]
	packScalesK4(sc, &ls, &lm)
	putFP16(hdr[0:], maxScale/63)
	putFP16(hdr[2:], maxMin/63)
	dd, dmin := getFP16(hdr[0:]), getFP16(hdr[2:])
	nm := int32(nmax)
	for j := 0; j < 8; j++ {
		s, m := scaleMinK4(j, sc)
		d := dd * float32(s)
		if d == 0 {
			if lanes != nil {
				for ii := 0; ii < 32; ii++ {
					L[32*j+ii] = uint8(lanes.L[ii][j])
				}
			}
			continue
		}
		dm := dmin * float32(m)
		if lanes != nil {
			requantAVX2(&L[32*j], &x[32*j], 32, d, dm, 0, nmax, 0)
			continue
		}
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / d)
			L[32*j+ii] = uint8(max32(0, min32(nm, l)))
		}
	}
}

// packQ4K writes Q4_K qs[128]: per 64-chunk, byte l holds values l and l+32.
func packQ4K(q []byte, L *[256]uint8) {
	for j := 0; j < 256; j += 64 {
		for l := 0; l < 32; l++ {
			q[j/2+l] = L[j+l] | L[j+l+32]<<4
		}
	}
}

// packQ5K writes Q5_K qh[32] and qs[128].
func packQ5K(qh, ql []byte, L *[256]uint8) {
	for i := range qh[:32] {
		qh[i] = 0
	}
	m1, m2 := uint8(1), uint8(2)
	for n := 0; n < 256; n += 64 {
		for j := 0; j < 32; j++ {
			l1 := L[n+j]
			if l1 > 15 {
				l1 -= 16
				qh[j] |= m1
			}
			l2 := L[n+j+32]
			if l2 > 15 {
				l2 -= 16
				qh[j] |= m2
			}
			ql[n/2+j] = l1 | l2<<4
		}
		m1 <<= 2
		m2 <<= 2
	}
}

func refQ4K(y []byte, x []float32) {
	var L [256]uint8
	refQ45K(y[:144], &L, x, 15, -1, 20)
	packQ4K(y[16:144], &L)
}

func refQ5K(y []byte, x []float32) {
	var L [256]uint8
	refQ45K(y[:176], &L, x, 31, -0.5, 15)
	packQ5K(y[16:48], y[48:176], &L)
}

// refQ6K encodes one Q6_K block: ql[128] qh[64] scales[16] d.
func refQ6K(y []byte, x []float32) {
	y = y[:210]
	x = x[:256]
	var L [256]int8
	var scales [16]float32
	var maxScale, maxAbsScale float32
	for ib := 0; ib < 16; ib++ {
		s := makeQXQuants(16, 32, x[16*ib:], L[16*ib:], 1)
		scales[ib] = s
		if as := absf(s); as > maxAbsScale {
			maxAbsScale = as
			maxScale = s
		}
	}
	if maxAbsScale < groupMaxEps {
		for i := range y {
			y[i] = 0
		}
		putFP16(y[208:], 0)
		return
	}
	iscale := -128 / maxScale
	putFP16(y[208:], 1/iscale)
	sc := y[192:208]
	for ib := 0; ib < 16; ib++ {
		sc[ib] = uint8(int8(min32(127, nearestInt(float32(iscale*scales[ib])))))
	}
	dd := getFP16(y[208:])
	for j := 0; j < 16; j++ {
		d := dd * float32(int8(sc[j]))
		if d == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max32(-32, min32(31, l)) + 32)
		}
	}
	packQ6K(y[0:128], y[128:192], &L)
}

func packQ6K(ql, qh []byte, L *[256]int8) {
	for j := 0; j < 256; j += 128 {
		o, h := j/2, j/4
		for l := 0; l < 32; l++ {
			q1 := uint8(L[j+l]) & 0xF
			q2 := uint8(L[j+l+32]) & 0xF
			q3 := uint8(L[j+l+64]) & 0xF
			q4 := uint8(L[j+l+96]) & 0xF
			ql[o+l] = q1 | q3<<4
			ql[o+l+32] = q2 | q4<<4
			qh[h+l] = uint8(L[j+l])>>4 | (uint8(L[j+l+32])>>4)<<2 | (uint8(L[j+l+64])>>4)<<4 | (uint8(L[j+l+96])>>4)<<6
		}
	}
}
