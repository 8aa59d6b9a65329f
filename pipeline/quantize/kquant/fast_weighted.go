package kquant

import "encoding/binary"

// Fast imatrix paths for the formats where the weighted search dominates
// (Q2_K, Q4_K, Q5_K, Q4_1, Q5_1: make_qkx3_quants with 37 steps; IQ4_NL,
// IQ4_XS: 16 table searches per block). They perform the same float32
// operations as their references (ref_weighted_*.go) on every value that
// decides the output, and the tests check them against the references bit
// for bit.
//
// make_qkx3_quants is make_qkx2_quants with "max <= min" for "max == min",
// which is the same test: after min is raised to 0 when positive, min <= max
// for any non-NaN input, and a NaN makes both tests false. So the weighted
// paths use qkx2Fast32 (fast_qkx2.go) with qkx3's parameters. Its early exit
// from the error sum assumes no negative weight (the error terms must be
// >= 0 or NaN); an importance vector with negative values makes some
// weights negative, and those sub-blocks take the reference search.

// noNegative reports whether no weight is negative (a NaN is not).
func noNegative(w *[32]float32) bool {
	for _, v := range w {
		if v < 0 {
			return false
		}
	}
	return true
}

// qkx3Search32 is makeQKX3Quants(32, nmax, x, w, L, _, -0.9, 0.05, 36,
// false), the search of every 32-value weighted path.
func qkx3Search32(x, w *[32]float32, L *[32]uint8, nmax int32) (scale, theMin float32) {
	if noNegative(w) {
		return qkx2Fast32(x, w, L, nmax, -0.9, 0.05, 36)
	}
	var Laux [32]uint8
	return makeQKX3Quants(32, int(nmax), x[:], w[:], L[:], Laux[:], -0.9, 0.05, 36, false)
}

// fastQ45KWeighted is refQ45KWeighted with qkx3Search32.
func fastQ45KWeighted(hdr []byte, L *[256]uint8, x *[256]float32, qw []float32, nmax int32, clamp63 bool) {
	qw = qw[:256]
	var weights [32]float32
	var mins, scales, sw [8]float32
	sigma2 := 2 * sumSquares(x[:]) / 256
	for j := 0; j < 8; j++ {
		xb := (*[32]float32)(x[32*j : 32*j+32])
		weightsSigma(weights[:], xb[:], qw[32*j:], sigma2)
		var sumw float32
		for _, w := range weights {
			sumw += w
		}
		sw[j] = sumw
		scales[j], mins[j] = qkx3Search32(xb, &weights, (*[32]uint8)(L[32*j:32*j+32]), nmax)
	}
	finishQ45KWeighted(hdr, L, x[:], int(nmax), clamp63, &scales, &mins, &sw)
}

func fastQ4KWeighted(y []byte, x, qw []float32) {
	var L [256]uint8
	fastQ45KWeighted(y[:144], &L, (*[256]float32)(x[:256]), qw, 15, false)
	packQ4K(y[16:144], &L)
}

func fastQ5KWeighted(y []byte, x, qw []float32) {
	var L [256]uint8
	fastQ45KWeighted(y[:176], &L, (*[256]float32)(x[:256]), qw, 31, true)
	packQ5K(y[16:48], y[48:176], &L)
}

// fastQ4_1Weighted is refQ4_1Weighted with qkx3Search32.
func fastQ4_1Weighted(y []byte, x, qw []float32) {
	sigma2 := rowSigma2(x)
	var weight [32]float32
	var L [32]uint8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := (*[32]float32)(x[32*ib : 32*ib+32])
		weightsSigma(weight[:], xb[:], qw[32*ib:], sigma2)
		d, min := qkx3Search32(xb, &weight, &L, 15)
		b := y[20*ib : 20*ib+20]
		putFP16(b, d)
		putFP16(b[2:], -min)
		for j := 0; j < 16; j++ {
			b[4+j] = L[j] | L[j+16]<<4
		}
	}
}

// fastQ5_1Weighted is refQ5_1Weighted with qkx3Search32.
func fastQ5_1Weighted(y []byte, x, qw []float32) {
	sigma2 := rowSigma2(x)
	var weight [32]float32
	var L [32]uint8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := (*[32]float32)(x[32*ib : 32*ib+32])
		weightsSigma(weight[:], xb[:], qw[32*ib:], sigma2)
		d, min := qkx3Search32(xb, &weight, &L, 31)
		b := y[24*ib : 24*ib+24]
		putFP16(b, d)
		putFP16(b[2:], -min)
		var qh uint32
		for j := 0; j < 16; j++ {
			xi0, xi1 := L[j], L[j+16]
			b[8+j] = xi0&0x0F | (xi1&0x0F)<<4
			qh |= uint32(xi0&0x10) >> 4 << j
			qh |= uint32(xi1&0x10) >> 4 << (j + 16)
		}
		binary.LittleEndian.PutUint32(b[4:], qh)
	}
}

// iq4SearchWeighted is the per-32-block scale search of
// quantize_row_iq4_nl_impl with quant weights (ntry = 7), with the
// branch-free table search and the repeated-try skip of iq4Search. Lb gets
// the levels of the first try; it returns the scale (0 for an all-zero
// block, whose Lb is left as it is, as in ggml).
func iq4SearchWeighted(xb, weight *[32]float32, Lb *[32]uint8) float32 {
	var amax, max float32
	for _, v := range xb {
		if ax := absf(v); ax > amax {
			amax = ax
			max = v
		}
	}
	if amax < groupMaxEps {
		return 0
	}
	d := -max / -127
	id := 1 / d
	var sumqx, sumq2 float32
	for j, v := range xb {
		l := bestIndexIQ4(float32(id * v))
		Lb[j] = uint8(l)
		q := kvaluesIQ4NLf[l]
		w := weight[j]
		sumqx += float32(w * q * v)
		sumq2 += float32(w * q * q)
	}
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	// A try whose levels equal the previous try's has the same sums: with
	// the same best it is rejected again, and if the previous try set best
	// it re-sets the same d and best. Either way nothing changes.
	var prev, cur [32]uint8
	havePrev := false
	for itry := -7; itry <= 7; itry++ {
		id = float32(itry-127) / max
		for j, v := range xb {
			cur[j] = uint8(bestIndexIQ4(float32(id * v)))
		}
		if havePrev && cur == prev {
			continue
		}
		prev, havePrev = cur, true
		sumqx, sumq2 = 0, 0
		for j, v := range xb {
			q := kvaluesIQ4NLf[cur[j]&15]
			w := weight[j]
			sumqx += float32(w * q * v)
			sumq2 += float32(w * q * q)
		}
		if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

// fastIQ4NLWeighted is refIQ4BlockWeighted(y, x, qw, 32).
func fastIQ4NLWeighted(y []byte, xs, qw []float32) {
	y = y[:18]
	x := (*[32]float32)(xs[:32])
	var weight [32]float32
	var L [32]uint8
	sigma2 := sumSquares(x[:])
	sigma2 *= 2.0 / 32
	weightsSigma(weight[:], x[:], qw, sigma2)
	s := iq4SearchWeighted(x, &weight, &L)
	putFP16(y, s)
	var id float32
	if s != 0 {
		id = 1 / s
	}
	for j, v := range x {
		L[j] = uint8(bestIndexIQ4(float32(id * v)))
	}
	for j := 0; j < 16; j++ {
		y[2+j] = L[j] | L[16+j]<<4
	}
}

// fastIQ4XSWeighted is refIQ4BlockWeighted(y, x, qw, 256).
func fastIQ4XSWeighted(y []byte, xs, qw []float32) {
	y = y[:136]
	x := (*[256]float32)(xs[:256])
	qw = qw[:256]
	var weight [32]float32
	var L [256]uint8
	var scales [8]float32
	var maxScale, amaxScale float32
	sigma2 := sumSquares(x[:])
	sigma2 *= 2.0 / 256
	for ib := 0; ib < 8; ib++ {
		xb := (*[32]float32)(x[32*ib : 32*ib+32])
		weightsSigma(weight[:], xb[:], qw[32*ib:], sigma2)
		d := iq4SearchWeighted(xb, &weight, (*[32]uint8)(L[32*ib:32*ib+32]))
		scales[ib] = d
		if ad := absf(d); ad > amaxScale {
			amaxScale = ad
			maxScale = d
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
		l := max(-32, min(31, nearestInt(float32(id*scales[ib]))))
		dl := d * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		for j := 32 * ib; j < 32*ib+32; j++ {
			L[j] = uint8(bestIndexIQ4(float32(idl * x[j])))
		}
		l += 32
		if ib%2 == 0 {
			y[4+ib/2] = uint8(l) & 0xF
		} else {
			y[4+ib/2] |= (uint8(l) & 0xF) << 4
		}
		scalesH |= uint16(l>>4) << (2 * ib)
	}
	binary.LittleEndian.PutUint16(y[2:], scalesH)
	for i := 0; i < 8; i++ {
		for j := 0; j < 16; j++ {
			y[8+16*i+j] = L[32*i+j] | L[32*i+16+j]<<4
		}
	}
}

// qkx3Fast16 is makeQKX3Quants(16, nmax, x, w, L, _, -0.9, 0.05, 36,
// false), the search of the weighted Q2_K sub-blocks, with the bookkeeping
// savings of qkx2Fast16MAD: fixed-size arrays, x - min computed once per
// value of min, and a step whose levels equal the previous evaluated step's
// skipped (its sums, D, scale, min and error would be the same bits, and an
// error equal to one already seen cannot be strictly smaller than the best).
// It makes no assumption on the sign of the weights.
func qkx3Fast16(x, w *[16]float32, L *[16]uint8, nmax int32) (scale, theMin float32) {
	const rmin, rdelta, nstep = -0.9, 0.05, 36
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
	if max_ <= min_ {
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
		diff = diff * diff
		bestError += float32(w[i] * diff)
	}
	var laux, prev [16]uint8
	var fl [16]float32
	havePrev := false
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + fnmax) / rng
		for i := 0; i < 16; i++ {
			laux[i] = uint8(max(0, min(nmax, nearestInt(float32(iscale*xm[i])))))
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
				diff = diff * diff
				curError += float32(w[i] * diff)
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

// fastQ2KWeighted is refQ2KWeighted with qkx3Fast16.
func fastQ2KWeighted(y []byte, xs, qw []float32) {
	y = y[:84]
	x := (*[256]float32)(xs[:256])
	qw = qw[:256]
	var L [256]uint8
	var mins, scales, sw [16]float32
	var weight [16]float32
	sigma2 := sumSquares(x[:]) / 256
	for j := 0; j < 16; j++ {
		xb := (*[16]float32)(x[16*j : 16*j+16])
		weightsSigma(weight[:], xb[:], qw[16*j:], sigma2)
		for l := 0; l < 16; l++ {
			sw[j] += weight[l]
		}
		scales[j], mins[j] = qkx3Fast16(xb, &weight, (*[16]uint8)(L[16*j:16*j+16]), 3)
	}
	finishQ2KWeighted(y, &L, x, &scales, &mins, &sw)
}

// finishQ2KWeighted quantizes the sub-block scales and mins with
// make_qp_quants, stores d and dmin, re-quantizes every sub-block with the
// stored values and packs (the end of quantize_row_q2_K_impl).
func finishQ2KWeighted(y []byte, L *[256]uint8, x *[256]float32, scales, mins, sw *[16]float32) {
	y = y[:84]
	var Ls, Lm [16]uint8
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
