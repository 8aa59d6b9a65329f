package kquant

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
	finishQ45K(hdr, L, x[:], int(nmax), &scales, &mins, maxScale, maxMin)
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
	finishQ2K(y, &L, x, &scales, &mins)
}

// finishQ2K quantizes the sub-block scales and mins to 4 bits, stores d and
// dmin, re-quantizes every sub-block with the stored values and packs.
func finishQ2K(y []byte, L *[256]uint8, x *[256]float32, scales, mins *[16]float32) {
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
		for ii := 0; ii < 16; ii++ {
			L[16*j+ii] = uint8(max(0, min(3, nearestInt((x[16*j+ii]+dm)/d))))
		}
	}
	packQ2(y[16:80], L[:])
}
