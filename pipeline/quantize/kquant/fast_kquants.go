package kquant

import "unsafe"

// Fast K-quant block encoders. Each performs the same float32 operations as
// its reference (ref_kquants.go) and is cross-tested against it bit for bit.

// fastQ45K is refQ45K with the fixed-size make_qkx2_quants.
func fastQ45K(hdr []byte, L *[256]uint8, x *[256]float32, nmax int32, rmin float32, nstep int) {
	var weights [32]float32
	var mins, scales [8]float32
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		xb := (*[32]float32)(x[32*j : 32*j+32])
		var sumX2 float32
		for _, v := range xb {
			sumX2 += float32(v * v)
		}
		avX := sqrtf(sumX2 / 32)
		for l, v := range xb {
			weights[l] = avX + absf(v)
		}
		scales[j], mins[j] = qkx2Fast32(xb, &weights, (*[32]uint8)(L[32*j:32*j+32]), nmax, rmin, 0.1, nstep)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	finishQ45K(hdr, L, x[:], int(nmax), &scales, &mins, maxScale, maxMin, nil)
}

func fastQ4K(y []byte, x []float32) {
	var L [256]uint8
	fastQ45K(y[:144], &L, (*[256]float32)(x[:256]), 15, -1, 20)
	packQ4K(y[16:144], &L)
}

func fastQ5K(y []byte, x []float32) {
	var L [256]uint8
	fastQ45K(y[:176], &L, (*[256]float32)(x[:256]), 31, -0.5, 15)
	packQ5K(y[16:48], y[48:176], &L)
}

// fastQ2K is refQ2K with the fixed-size make_qkx2_quants.
func fastQ2K(y []byte, xs []float32) {
	y = y[:84]
	x := (*[256]float32)(xs[:256])
	var L [256]uint8
	var weights [16]float32
	var mins, scales [16]float32
	for j := 0; j < 16; j++ {
		xb := (*[16]float32)(x[16*j : 16*j+16])
		for l, v := range xb {
			weights[l] = absf(v)
		}
		scales[j], mins[j] = qkx2Fast16MAD(xb, &weights, (*[16]uint8)(L[16*j:16*j+16]), 3, -0.5, 0.1, 15)
	}
	finishQ2K(y, &L, x, &scales, &mins, false)
}

// finishQ2K quantizes the sub-block scales and mins to 4 bits, stores d and
// dmin, re-quantizes every sub-block with the stored values (with vec, by
// the vector kernel: for blocks whose values are all finite) and packs.
func finishQ2K(y []byte, L *[256]uint8, x *[256]float32, scales, mins *[16]float32, vec bool) {
	const q4scale float32 = 15
	var maxScale, maxMin float32
	for j := 0; j < 16; j++ {
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
			sc[j] |= uint8(nearestInt(float32(iscale*mins[j])) << 4)
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
		if vec {
			requantAVX2(&L[16*j], &x[16*j], 16, d, dm, 0, 3, 0)
			continue
		}
		for ii := 0; ii < 16; ii++ {
			L[16*j+ii] = uint8(max(0, min(3, nearestInt((x[16*j+ii]+dm)/d))))
		}
	}
	packQ2(y[16:80], L[:])
}

// fastQ6K is refQ6K with the fixed-size make_qx_quants (qxFast16).
func fastQ6K(y []byte, xs []float32) {
	x := (*[256]float32)(xs[:256])
	var L [256]int8
	var scales [16]float32
	for ib := 0; ib < 16; ib++ {
		scales[ib] = qxFast16((*[16]float32)(x[16*ib:16*ib+16]), (*[16]int8)(L[16*ib:16*ib+16]))
	}
	finishQ6K(y, x, &scales, &L, nil)
}

// finishQ6K quantizes the 16 sub-block scales to int8, stores d,
// re-quantizes every sub-block with the stored scale and packs. L holds the
// searches' levels (+32), kept for sub-blocks whose stored scale is 0; with
// lanes != nil they are read from the vector kernel's output instead, and
// the re-quantization runs on the vector kernel too (the values are all
// finite there).
func finishQ6K(y []byte, x *[256]float32, scales *[16]float32, L *[256]int8, lanes *qx16Lanes) {
	y = y[:210]
	var maxScale, maxAbsScale float32
	for ib := 0; ib < 16; ib++ {
		s := scales[ib]
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
			if lanes != nil {
				for ii := 0; ii < 16; ii++ {
					L[16*j+ii] = int8(lanes.L[ii][j])
				}
			}
			continue
		}
		if lanes != nil {
			requantAVX2((*byte)(unsafe.Pointer(&L[16*j])), &x[16*j], 16, d, 0, -32, 31, 32)
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max32(-32, min32(31, l)) + 32)
		}
	}
	packQ6K(y[0:128], y[128:192], L)
}

// qxFast16 is makeQXQuants(16, 32, x, L, 1): the same float32 operations,
// with w = x*x and w*x computed once instead of once per trial and each
// trial's levels kept instead of recomputed when it is accepted.
func qxFast16(x *[16]float32, L *[16]int8) float32 {
	var max, amax float32
	for _, v := range x {
		if ax := absf(v); ax > amax {
			amax = ax
			max = v
		}
	}
	if amax < groupMaxEps {
		*L = [16]int8{}
		return 0
	}
	var w, wx [16]float32
	for i, v := range x {
		w[i] = v * v
		wx[i] = w[i] * v
	}
	var cur, keep [16]int8
	trial := func(iscale float32) (sumlx, suml2 float32) {
		for i, v := range x {
			l := max32(-32, min32(31, nearestInt(float32(iscale*v))))
			cur[i] = int8(l)
			fl := float32(l)
			sumlx += float32(wx[i] * fl)
			suml2 += float32(float32(w[i]*fl) * fl)
		}
		return sumlx, suml2
	}
	sumlx, suml2 := trial(-32 / max)
	keep = cur
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for _, num := range q6kTrialNum {
		sumlx, suml2 = trial(num / max)
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			keep = cur
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	for i, l := range keep {
		L[i] = l + 32
	}
	return scale
}
