package kquant

// Weighted K-quant encoders: quantize_row_q{2,3,4,5,6}_K_impl of
// ggml-quants.c with quant_weights != NULL, one 256-value super-block at a
// time; qw holds the super-block's 256 importance weights. The packing
// helpers are shared with the reference encoders (ref_kquants.go).

// refQ2KWeighted encodes one Q2_K block: scales[16] qs[64] d dmin.
func refQ2KWeighted(y []byte, x, qw []float32) {
	y = y[:84]
	x = x[:256]
	var L [256]uint8
	var Laux [16]uint8
	var mins, scales, sw, weight [16]float32
	var Ls, Lm [16]uint8
	sigma2 := sumSquares(x) / 256
	for j := 0; j < 16; j++ {
		weightsSigma(weight[:], x[16*j:], qw[16*j:], sigma2)
		for l := 0; l < 16; l++ {
			sw[j] += weight[l]
		}
		scales[j], mins[j] = makeQKX3Quants(16, 3, x[16*j:], weight[:], L[16*j:], Laux[:], -0.9, 0.05, 36, false)
	}
	dm := makeQPQuants(16, 15, scales[:], Ls[:], sw[:])
	mm := makeQPQuants(16, 15, mins[:], Lm[:], sw[:])
	putFP16(y[80:], dm)
	putFP16(y[82:], mm)
	dm, mm = getFP16(y[80:]), getFP16(y[82:])
	sc := y[0:16]
	for j := 0; j < 16; j++ {
		sc[j] = Ls[j] | Lm[j]<<4
	}
	for j := 0; j < 16; j++ {
		d := float32(dm * float32(sc[j]&0xF))
		if d == 0 {
			continue
		}
		m := float32(mm * float32(sc[j]>>4))
		for ii := 0; ii < 16; ii++ {
			l := nearestInt((x[16*j+ii] + m) / d)
			L[16*j+ii] = uint8(max32(0, min32(3, l)))
		}
	}
	packQ2(y[16:80], L[:])
}

// refQ3KWeighted encodes one Q3_K block: hmask[32] qs[64] scales[12] d.
func refQ3KWeighted(y []byte, x, qw []float32) {
	y = y[:110]
	x = x[:256]
	var L [256]int8
	var scales, weight, sw [16]float32
	var Ls [16]int8
	sigma2 := 2 * sumSquares(x) / 256
	for j := 0; j < 16; j++ {
		weightsSigma(weight[:], x[16*j:], qw[16*j:], sigma2)
		var sumw float32
		for l := 0; l < 16; l++ {
			sumw += weight[l]
		}
		sw[j] = sumw
		scales[j] = makeQXQuantsW(16, 4, x[16*j:], L[16*j:], weight[:])
	}
	sc := y[96:108]
	for i := range sc {
		sc[i] = 0
	}
	dBlock := makeQXQuantsW(16, 32, scales[:], Ls[:], sw[:])
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
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max32(-4, min32(3, l)) + 4)
		}
	}
	packQ3(y[0:32], y[32:96], &L)
}

// refQ45KWeighted is the shared body of quantize_row_q4_K_impl (nmax 15)
// and quantize_row_q5_K_impl (nmax 31) up to the integer levels L; it
// writes d, dmin and scales[12] into hdr. Q5_K clamps the 6-bit scale and
// min codes to 63 before packing, Q4_K does not (clamp63).
func refQ45KWeighted(hdr []byte, L *[256]uint8, x, qw []float32, nmax int, clamp63 bool) {
	x = x[:256]
	var Laux [32]uint8
	var weights [32]float32
	var mins, scales, sw [8]float32
	sigma2 := 2 * sumSquares(x) / 256
	for j := 0; j < 8; j++ {
		weightsSigma(weights[:], x[32*j:], qw[32*j:], sigma2)
		var sumw float32
		for l := 0; l < 32; l++ {
			sumw += weights[l]
		}
		sw[j] = sumw
		scales[j], mins[j] = makeQKX3Quants(32, nmax, x[32*j:], weights[:], L[32*j:], Laux[:], -0.9, 0.05, 36, false)
	}
	finishQ45KWeighted(hdr, L, x, nmax, clamp63, &scales, &mins, &sw)
}

// finishQ45KWeighted is the second half of quantize_row_q4_K_impl /
// quantize_row_q5_K_impl: the sub-block scales and mins quantized with
// make_qp_quants (weights: the sub-block weight sums sw), packed, and every
// sub-block re-quantized with the stored values.
func finishQ45KWeighted(hdr []byte, L *[256]uint8, x []float32, nmax int, clamp63 bool, scales, mins, sw *[8]float32) {
	var Ls, Lm [8]uint8
	dBlock := makeQPQuants(8, 63, scales[:], Ls[:], sw[:])
	mBlock := makeQPQuants(8, 63, mins[:], Lm[:], sw[:])
	if clamp63 {
		for j := 0; j < 8; j++ {
			Ls[j] = min(63, Ls[j])
			Lm[j] = min(63, Lm[j])
		}
	}
	sc := hdr[4:16]
	packScalesK4(sc, &Ls, &Lm)
	putFP16(hdr[0:], dBlock)
	putFP16(hdr[2:], mBlock)
	dd, dmin := getFP16(hdr[0:]), getFP16(hdr[2:])
	nm := int32(nmax)
	for j := 0; j < 8; j++ {
		s, m := scaleMinK4(j, sc)
		d := float32(dd * float32(s))
		if d == 0 {
			continue
		}
		dm := float32(dmin * float32(m))
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / d)
			L[32*j+ii] = uint8(max32(0, min32(nm, l)))
		}
	}
}

func refQ4KWeighted(y []byte, x, qw []float32) {
	var L [256]uint8
	refQ45KWeighted(y[:144], &L, x, qw, 15, false)
	packQ4K(y[16:144], &L)
}

func refQ5KWeighted(y []byte, x, qw []float32) {
	var L [256]uint8
	refQ45KWeighted(y[:176], &L, x, qw, 31, true)
	packQ5K(y[16:48], y[48:176], &L)
}

// refQ6KWeighted encodes one Q6_K block: ql[128] qh[64] scales[16] d. The
// importance weights go to make_qx_quants unchanged (no sigma2 term).
func refQ6KWeighted(y []byte, x, qw []float32) {
	y = y[:210]
	x = x[:256]
	var L [256]int8
	var scales [16]float32
	var maxScale, maxAbsScale float32
	for ib := 0; ib < 16; ib++ {
		s := makeQXQuantsW(16, 32, x[16*ib:], L[16*ib:], qw[16*ib:])
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
		d := float32(dd * float32(int8(sc[j])))
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
