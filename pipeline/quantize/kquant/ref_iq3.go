package kquant

import "encoding/binary"

// Reference IQ3 encoders: quantize_row_iq3_xxs_impl (grid_size 256) and
// quantize_row_iq3_s_impl (block_size 32) of ggml-quants.c, one 256-value
// super-block per call. qw holds the super-block's importance weights, or
// is nil (ggml's NULL: the weights are then x*x).

// refIQ3XXS encodes one IQ3_XXS block: d, qs[64] (grid indices, 4 values
// each), then per 32 values a uint32 with four 7-bit sign groups and a
// 4-bit scale.
func refIQ3XXS(y []byte, x, qw []float32) { iq3xxsEncode(y, x, qw, false) }

// iq3xxsEncode is the body of refIQ3XXS; fast selects the faster neighbour
// search (the public kernel).
func iq3xxsEncode(y []byte, x, qw []float32, fast bool) {
	const kMaxQ = 8
	g := iq3xxsLattice()
	y = y[:98]
	x = x[:256]
	var scales [8]float32
	var weight, xval, waux [32]float32
	var L, Laux [32]int8
	var isOnGrid, isOnGridAux [8]bool
	var blockSigns [8]uint8
	var q3 [64]uint8
	var scalesAndSigns [8]uint32

	putFP16(y, 0)
	var maxScale float32
	sigma2 := 2 * sumSquares(x) / 256
	for ib := 0; ib < 8; ib++ {
		xb := x[32*ib : 32*ib+32]
		if qw != nil {
			weightsSigma(weight[:], xb, qw[32*ib:], sigma2)
		} else {
			for i, v := range xb {
				weight[i] = v * v
			}
		}
		for i := range waux {
			waux[i] = sqrtf(weight[i])
		}
		for k := 0; k < 4; k++ {
			blockSigns[k] = foldSigns8(xb[8*k:], weight[8*k:], xval[8*k:])
		}
		max := maxOf(xval[:])
		L = [32]int8{}
		if max < groupMaxEpsIQ3XXS {
			scales[ib] = 0
			continue
		}
		var best float32
		scale := max / (2*kMaxQ - 1)
		isOnGrid = [8]bool{true, true, true, true, true, true, true, true}
		for is := -15; is <= 15; is++ {
			id := (2*kMaxQ - 1 + float32(float32(is)*0.2)) / max
			thisScale := 1 / id
			for k := 0; k < 8; k++ {
				for i := 0; i < 4; i++ {
					l := nearestHalfLevel(id, xval[4*k+i])
					Laux[4*k+i] = int8(max32(0, min32(kMaxQ-1, l)))
				}
				u := packLevels4(Laux[4*k:])
				isOnGridAux[k] = true
				if g.kmap[u] < 0 {
					isOnGridAux[k] = false
					searchNbr4(fast, g.neighboursOf(u), g, xval[4*k:], waux[4*k:], thisScale, Laux[4*k:])
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
		for k := 0; k < 8; k++ {
			if !isOnGrid[k] {
				nNotOnGrid++
			}
		}
		if nNotOnGrid > 0 && scale > 0 {
			id := 1 / scale
			for k := 0; k < 8; k++ {
				if isOnGrid[k] {
					continue
				}
				u := 0
				for i := 0; i < 4; i++ {
					l := nearestHalfLevel(id, xval[4*k+i])
					l = max32(0, min32(kMaxQ-1, l))
					u |= int(l) << (3 * i)
				}
				gi := int(g.kmap[u])
				if gi < 0 {
					gi = searchNbr4(fast, g.neighboursOf(u), g, xval[4*k:], waux[4*k:], scale, L[4*k:])
				}
				pg := &g.points[gi]
				for i := 0; i < 4; i++ {
					L[4*k+i] = (pg[i] - 1) / 2
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
		for k := 0; k < 8; k++ {
			q3[8*ib+k] = uint8(g.onGrid(packLevels4(L[4*k:])))
		}
		scalesAndSigns[ib] = uint32(blockSigns[0]) | uint32(blockSigns[1])<<7 |
			uint32(blockSigns[2])<<14 | uint32(blockSigns[3])<<21
		scale = nonNegScale(scale)
		scales[ib] = scale
		maxScale = cmaxf(maxScale, scale)
	}
	qs := y[2:98]
	if maxScale == 0 {
		for i := range qs {
			qs[i] = 0
		}
		return
	}
	d := maxScale / 31
	putFP16(y, float32(d*1.0125))
	id := 1 / d
	for ib := 0; ib < 8; ib++ {
		l := nearestHalfLevel(id, scales[ib])
		l = max32(0, min32(15, l))
		scalesAndSigns[ib] |= uint32(l) << 28
	}
	copy(qs, q3[:])
	for ib, v := range scalesAndSigns {
		binary.LittleEndian.PutUint32(qs[64+4*ib:], v)
	}
}

// refIQ3S encodes one IQ3_S block: d, qs[64] (low grid-index bytes), qh[8]
// (9th index bit), signs[32], scales[4] (two 4-bit scales per byte).
//
// As in ggml, the qs and signs write positions advance only for 32-value
// groups that are not all zero, so a zero group shifts the later groups'
// indices and signs down (while qh and the scales stay at fixed positions);
// dequantize_row_iq3_s reads them back at fixed positions.
func refIQ3S(y []byte, x, qw []float32) { iq3sEncode(y, x, qw, false) }

// iq3sEncode is the body of refIQ3S; fast selects the faster neighbour
// search (the public kernel).
func iq3sEncode(y []byte, x, qw []float32, fast bool) {
	const kMaxQ = 8
	const blockSize, bs4, bs8 = 32, 8, 4
	g := iq3sLattice()
	y = y[:110]
	x = x[:256]
	var scales [8]float32
	var weight, xval, waux [32]float32
	var L, Laux [32]int8
	var isOnGrid, isOnGridAux [8]bool
	var blockSigns [4]uint8

	for i := range y {
		y[i] = 0
	}
	putFP16(y, 0)
	qs := y[2:66]
	qh := y[66:74]
	signs := y[74:106]
	ysc := y[106:110]
	var maxScale float32
	sigma2 := 2 * sumSquares(x) / 256
	for ib := 0; ib < 256/blockSize; ib++ {
		xb := x[blockSize*ib : blockSize*ib+blockSize]
		if qw != nil {
			weightsSigma(weight[:], xb, qw[blockSize*ib:], sigma2)
		} else {
			for i, v := range xb {
				weight[i] = v * v
			}
		}
		for i := range waux {
			waux[i] = sqrtf(weight[i])
		}
		for k := 0; k < bs8; k++ {
			blockSigns[k] = signBits8(xb[8*k:], xval[8*k:])
		}
		max := maxOf(xval[:])
		L = [32]int8{}
		if max == 0 {
			scales[ib] = 0
			continue
		}
		var best float32
		scale := max / (2*kMaxQ - 1)
		isOnGrid = [8]bool{}
		for is := -9; is <= 9; is++ {
			id := (2*kMaxQ - 1 + float32(float32(is)*0.2)) / max
			thisScale := 1 / id
			for k := 0; k < bs4; k++ {
				for i := 0; i < 4; i++ {
					l := nearestHalfLevel(id, xval[4*k+i])
					Laux[4*k+i] = int8(max32(0, min32(kMaxQ-1, l)))
				}
				u := packLevels4(Laux[4*k:])
				isOnGridAux[k] = true
				if g.kmap[u] < 0 {
					isOnGridAux[k] = false
					searchNbr4(fast, g.neighboursOf(u), g, xval[4*k:], waux[4*k:], thisScale, Laux[4*k:])
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
		for k := 0; k < bs4; k++ {
			if !isOnGrid[k] {
				nNotOnGrid++
			}
		}
		if nNotOnGrid > 0 && scale > 0 {
			// Unlike IQ3_XXS, every group is searched again, on the grid
			// or not.
			id := 1 / scale
			for k := 0; k < bs4; k++ {
				u := 0
				for i := 0; i < 4; i++ {
					l := nearestHalfLevel(id, xval[4*k+i])
					l = max32(0, min32(kMaxQ-1, l))
					u |= int(l) << (3 * i)
				}
				gi := int(g.kmap[u])
				if gi < 0 {
					gi = searchNbr4(fast, g.neighboursOf(u), g, xval[4*k:], waux[4*k:], scale, L[4*k:])
				}
				pg := &g.points[gi]
				for i := 0; i < 4; i++ {
					L[4*k+i] = (pg[i] - 1) / 2
				}
			}
			sumqx, sumq2 := sumQ(weight[:], xval[:], L[:])
			if sumq2 > 0 {
				scale = sumqx / sumq2
			}
		}
		if scale < 0 {
			scale = -scale
			for k := 0; k < bs8; k++ {
				blockSigns[k] = ^blockSigns[k]
			}
		}
		for k := 0; k < bs4; k++ {
			gi := g.onGrid(packLevels4(L[4*k:]))
			qs[k] = uint8(gi)
			pos := ib*bs4 + k
			qh[pos/8] |= uint8((gi >> 8) << (pos % 8))
		}
		qs = qs[bs4:]
		copy(signs, blockSigns[:])
		signs = signs[bs8:]
		scale = nonNegScale(scale)
		scales[ib] = scale
		maxScale = cmaxf(maxScale, scale)
	}
	if maxScale == 0 {
		return
	}
	d := maxScale / 31
	putFP16(y, float32(d*1.033))
	id := 1 / d
	for ib := 0; ib < 256/blockSize; ib += 2 {
		l1 := nearestHalfLevel(id, scales[ib])
		l1 = max32(0, min32(15, l1))
		l2 := nearestHalfLevel(id, scales[ib+1])
		l2 = max32(0, min32(15, l2))
		ysc[ib/2] = uint8(l1) | uint8(l2)<<4
	}
}
