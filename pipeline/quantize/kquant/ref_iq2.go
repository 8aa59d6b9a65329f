package kquant

import "encoding/binary"

// Reference IQ2 encoders: quantize_row_iq2_xxs_impl, quantize_row_iq2_xs_impl
// and quantize_row_iq2_s_impl of ggml-quants.c, one 256-value super-block
// per call. qw holds the super-block's importance weights; IQ2_XXS and
// IQ2_XS require them, IQ2_S accepts nil (ggml's NULL).

// refIQ2XXS encodes one IQ2_XXS block: d, then 8 x (4 grid bytes, a uint32
// with four 7-bit sign groups and a 4-bit scale).
func refIQ2XXS(y []byte, x, qw []float32) { iq2xxsEncode(y, x, qw, false) }

// iq2xxsEncode is the body of refIQ2XXS; fast selects the table-driven neighbour
// search (the public kernel).
func iq2xxsEncode(y []byte, x, qw []float32, fast bool) {
	const kMaxQ = 3
	g := iq2xxsLattice()
	y = y[:66]
	x = x[:256]
	qw = qw[:256]
	var scales [8]float32
	var weight, xval, waux [32]float32
	var L, Laux [32]int8
	var Lqp [32]uint8
	var blockSigns [4]uint8
	var q2 [16]uint32

	putFP16(y, 0)
	var maxScale float32
	sigma2 := sumSquares(x) / 256
	for ib := 0; ib < 8; ib++ {
		xb := x[32*ib : 32*ib+32]
		weightsSigma(weight[:], xb, qw[32*ib:], sigma2)
		for i := range waux {
			waux[i] = sqrtf(weight[i])
		}
		for k := 0; k < 4; k++ {
			blockSigns[k] = foldSigns8(xb[8*k:], weight[8*k:], xval[8*k:])
		}
		max := maxOf(xval[:])
		if max < groupMaxEps {
			scales[ib] = 0
			L = [32]int8{}
			continue
		}
		scale := makeQPQuants(32, kMaxQ+1, xval[:], Lqp[:], weight[:])
		for i, l := range Lqp {
			L[i] = int8(l)
		}
		effMax := scale * kMaxQ
		if effMax <= 0 {
			scales[ib] = 0
			L = [32]int8{}
			continue
		}
		var best float32
		for is := -6; is <= 6; is++ {
			id := (2*kMaxQ - 1 + float32(float32(is)*0.1)) / effMax
			thisScale := 1 / id
			for k := 0; k < 4; k++ {
				for i := 0; i < 8; i++ {
					l := nearestHalfLevel(id, xval[8*k+i])
					Laux[8*k+i] = int8(max32(0, min32(kMaxQ-1, l)))
				}
				u := packLevels8(Laux[8*k:])
				if g.kmap[u] < 0 {
					searchNbr8(fast, g.neighboursOf(u), g, xval[8*k:], waux[8*k:], thisScale, Laux[8*k:])
				}
			}
			sumqx, sumq2 := sumQ(weight[:], xval[:], Laux[:])
			if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
				scale = sumqx / sumq2
				best = scale * sumqx
				L = Laux
			}
		}
		if scale > 0 {
			id := 1 / scale
			for k := 0; k < 4; k++ {
				u := 0
				for i := 0; i < 8; i++ {
					l := nearestHalfLevel(id, xval[8*k+i])
					l = max32(0, min32(kMaxQ-1, l))
					u |= int(l) << (2 * i)
				}
				gi := int(g.kmap[u])
				if gi < 0 {
					gi = searchNbr8(fast, g.neighboursOf(u), g, xval[8*k:], waux[8*k:], scale, L[8*k:])
				}
				pg := &g.points[gi]
				for i := 0; i < 8; i++ {
					L[8*k+i] = (pg[i] - 1) / 2
				}
			}
			sumqx, sumq2 := sumQ(weight[:], xval[:], L[:])
			if sumq2 > 0 {
				scale = sumqx / sumq2
			}
		}
		if scale < 0 {
			scale = -scale
			for k := 0; k < 4; k++ {
				blockSigns[k] = ^blockSigns[k] & 127
			}
		}
		for k := 0; k < 4; k++ {
			gi := g.onGrid(packLevels8(L[8*k:]))
			q2[2*ib] |= uint32(gi) << (8 * k)
			q2[2*ib+1] |= uint32(blockSigns[k]) << (7 * k)
		}
		scale = nonNegScale(scale)
		scales[ib] = scale
		maxScale = cmaxf(maxScale, scale)
	}
	qs := y[2:66]
	if maxScale == 0 {
		for i := range qs {
			qs[i] = 0
		}
		return
	}
	d := maxScale / 31
	putFP16(y, d)
	id := 1 / d
	for ib := 0; ib < 8; ib++ {
		l := nearestHalfLevel(id, scales[ib])
		l = max32(0, min32(15, l))
		q2[2*ib+1] |= uint32(l) << 28
	}
	for i, v := range q2 {
		binary.LittleEndian.PutUint32(qs[4*i:], v)
	}
}

// refIQ2XS encodes one IQ2_XS block: d, qs[32] (uint16: 9-bit grid index,
// 7 sign bits), scales[8] (two 4-bit scales per 32 values).
func refIQ2XS(y []byte, x, qw []float32) { iq2xsEncode(y, x, qw, false) }

// iq2xsEncode is the body of refIQ2XS; fast selects the table-driven neighbour
// search (the public kernel).
func iq2xsEncode(y []byte, x, qw []float32, fast bool) {
	const kMaxQ = 3
	g := iq2xsLattice()
	y = y[:74]
	x = x[:256]
	qw = qw[:256]
	var scales [16]float32
	var weight, xval, waux [16]float32
	var L, Laux [16]int8
	var isOnGrid, isOnGridAux [2]bool
	var blockSigns [2]uint8
	var q2 [32]uint16

	putFP16(y, 0)
	ysc := y[66:74]
	for i := range ysc {
		ysc[i] = 0
	}
	var maxScale float32
	sigma2 := sumSquares(x) / 256
	for ib := 0; ib < 16; ib++ {
		xb := x[16*ib : 16*ib+16]
		weightsSigma(weight[:], xb, qw[16*ib:], sigma2)
		for i := range waux {
			waux[i] = sqrtf(weight[i])
		}
		for k := 0; k < 2; k++ {
			blockSigns[k] = foldSigns8(xb[8*k:], weight[8*k:], xval[8*k:])
		}
		max := maxOf(xval[:])
		L = [16]int8{}
		if max < groupMaxEps {
			scales[ib] = 0
			continue
		}
		var best float32
		scale := max / (2*kMaxQ - 1)
		isOnGrid = [2]bool{true, true}
		for is := -9; is <= 9; is++ {
			id := (2*kMaxQ - 1 + float32(float32(is)*0.1)) / max
			thisScale := 1 / id
			for k := 0; k < 2; k++ {
				for i := 0; i < 8; i++ {
					l := nearestHalfLevel(id, xval[8*k+i])
					Laux[8*k+i] = int8(max32(0, min32(kMaxQ-1, l)))
				}
				u := packLevels8(Laux[8*k:])
				isOnGridAux[k] = true
				if g.kmap[u] < 0 {
					isOnGridAux[k] = false
					searchNbr8(fast, g.neighboursOf(u), g, xval[8*k:], waux[8*k:], thisScale, Laux[8*k:])
				}
			}
			sumqx, sumq2 := sumQ(weight[:], xval[:], Laux[:])
			if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
				scale = sumqx / sumq2
				best = scale * sumqx
				L = Laux
				isOnGrid = isOnGridAux
			}
		}
		nNotOnGrid := 0
		for k := 0; k < 2; k++ {
			if !isOnGrid[k] {
				nNotOnGrid++
			}
		}
		if nNotOnGrid > 0 && scale > 0 {
			id := 1 / scale
			for k := 0; k < 2; k++ {
				if isOnGrid[k] {
					continue
				}
				u := 0
				for i := 0; i < 8; i++ {
					l := nearestHalfLevel(id, xval[8*k+i])
					l = max32(0, min32(kMaxQ-1, l))
					u |= int(l) << (2 * i)
					L[8*k+i] = int8(l)
				}
				if g.kmap[u] < 0 {
					searchNbr8(fast, g.neighboursOf(u), g, xval[8*k:], waux[8*k:], scale, L[8*k:])
				}
			}
			sumqx, sumq2 := sumQ(weight[:], xval[:], L[:])
			if sumq2 > 0 {
				scale = sumqx / sumq2
			}
		}
		if scale < 0 {
			scale = -scale
			for k := 0; k < 2; k++ {
				blockSigns[k] = ^blockSigns[k] & 127
			}
		}
		for k := 0; k < 2; k++ {
			gi := g.onGrid(packLevels8(L[8*k:]))
			q2[2*ib+k] = uint16(gi) | uint16(blockSigns[k])<<9
		}
		scale = nonNegScale(scale)
		scales[ib] = scale
		maxScale = cmaxf(maxScale, scale)
	}
	qs := y[2:66]
	if maxScale == 0 {
		for i := range qs {
			qs[i] = 0
		}
		return
	}
	d := maxScale / 31
	putFP16(y, d)
	id := 1 / d
	for ib := 0; ib < 16; ib++ {
		l := nearestHalfLevel(id, scales[ib])
		l = max32(0, min32(15, l))
		if ib%2 == 0 {
			ysc[ib/2] = uint8(l)
		} else {
			ysc[ib/2] |= uint8(l) << 4
		}
	}
	for i, v := range q2 {
		binary.LittleEndian.PutUint16(qs[2*i:], v)
	}
}

// refIQ2S encodes one IQ2_S block: d, qs[64] (32 low grid-index bytes, then
// 32 sign bytes), qh[8] (2 high index bits per 8 values), scales[8].
func refIQ2S(y []byte, x, qw []float32) { iq2sEncode(y, x, qw, false) }

// iq2sEncode is the body of refIQ2S; fast selects the table-driven neighbour
// search (the public kernel).
func iq2sEncode(y []byte, x, qw []float32, fast bool) {
	const kMaxQ = 3
	g := iq2sLattice()
	y = y[:82]
	x = x[:256]
	var scales [16]float32
	var weight, xval, waux [16]float32
	var L, Laux [16]int8
	var isOnGrid, isOnGridAux [2]bool
	var blockSigns [2]uint8

	for i := range y {
		y[i] = 0
	}
	putFP16(y, 0)
	qs := y[2:66]
	qh := y[66:74]
	ysc := y[74:82]
	var maxScale float32
	sigma2 := 2 * sumSquares(x) / 256
	for ib := 0; ib < 16; ib++ {
		xb := x[16*ib : 16*ib+16]
		if qw != nil {
			weightsSigma(weight[:], xb, qw[16*ib:], sigma2)
		} else {
			for i, v := range xb {
				weight[i] = float32(0.25*sigma2) + float32(v*v)
			}
		}
		for i := range waux {
			waux[i] = sqrtf(weight[i])
		}
		for k := 0; k < 2; k++ {
			blockSigns[k] = signBits8(xb[8*k:], xval[8*k:])
		}
		max := maxOf(xval[:])
		L = [16]int8{}
		if max < groupMaxEpsIQ2S {
			scales[ib] = 0
			continue
		}
		var best float32
		scale := max / (2*kMaxQ - 1)
		isOnGrid = [2]bool{true, true}
		for is := -9; is <= 9; is++ {
			id := (2*kMaxQ - 1 + float32(float32(is)*0.1)) / max
			thisScale := 1 / id
			for k := 0; k < 2; k++ {
				for i := 0; i < 8; i++ {
					l := nearestHalfLevel(id, xval[8*k+i])
					Laux[8*k+i] = int8(max32(0, min32(kMaxQ-1, l)))
				}
				u := packLevels8(Laux[8*k:])
				isOnGridAux[k] = true
				if g.kmap[u] < 0 {
					isOnGridAux[k] = false
					searchNbr8(fast, g.neighboursOf(u), g, xval[8*k:], waux[8*k:], thisScale, Laux[8*k:])
				}
			}
			sumqx, sumq2 := sumQ(weight[:], xval[:], Laux[:])
			if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
				scale = sumqx / sumq2
				best = scale * sumqx
				L = Laux
				isOnGrid = isOnGridAux
			}
		}
		nNotOnGrid := 0
		for k := 0; k < 2; k++ {
			if !isOnGrid[k] {
				nNotOnGrid++
			}
		}
		if nNotOnGrid > 0 && scale > 0 {
			id := 1 / scale
			for k := 0; k < 2; k++ {
				if isOnGrid[k] {
					continue
				}
				u := 0
				for i := 0; i < 8; i++ {
					l := nearestHalfLevel(id, xval[8*k+i])
					l = max32(0, min32(kMaxQ-1, l))
					u |= int(l) << (2 * i)
					L[8*k+i] = int8(l)
				}
				if g.kmap[u] < 0 {
					searchNbr8(fast, g.neighboursOf(u), g, xval[8*k:], waux[8*k:], scale, L[8*k:])
				}
			}
			sumqx, sumq2 := sumQ(weight[:], xval[:], L[:])
			if sumq2 > 0 {
				scale = sumqx / sumq2
			}
		}
		if scale < 0 {
			scale = -scale
			for k := 0; k < 2; k++ {
				blockSigns[k] = ^blockSigns[k]
			}
		}
		for k := 0; k < 2; k++ {
			gi := g.onGrid(packLevels8(L[8*k:]))
			i8 := 2*ib + k
			qs[i8] = uint8(gi)
			qh[i8/4] |= uint8((gi >> 8) << (2 * (i8 % 4)))
			qs[32+i8] = blockSigns[k]
		}
		scale = nonNegScale(scale)
		scales[ib] = scale
		maxScale = cmaxf(maxScale, scale)
	}
	if maxScale == 0 {
		return
	}
	d := maxScale / 31
	putFP16(y, float32(d*0.9875))
	id := 1 / d
	for ib := 0; ib < 16; ib++ {
		l := nearestHalfLevel(id, scales[ib])
		l = max32(0, min32(15, l))
		if ib%2 == 0 {
			ysc[ib/2] = uint8(l)
		} else {
			ysc[ib/2] |= uint8(l) << 4
		}
	}
}
