package kquant

// Reference versions of the shared K-quant routines of ggml-quants.c, written
// to follow the C code statement by statement (float32 arithmetic in C order,
// products rounded before every add).

// makeQXQuants is make_qx_quants with qw == NULL (the only use without an
// importance matrix is Q6_K with rmse_type 1). L receives values in
// [0, 2*nmax).
func makeQXQuants(n, nmax int, x []float32, L []int8, rmseType int) float32 {
	x = x[:n]
	L = L[:n]
	var max, amax float32
	for _, v := range x {
		if ax := absf(v); ax > amax {
			amax = ax
			max = v
		}
	}
	if amax < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	fnmax := float32(nmax)
	iscale := -fnmax / max
	if rmseType == 0 {
		for i, v := range x {
			l := nearestInt(float32(iscale * v))
			L[i] = int8(int32(nmax) + max32(-int32(nmax), min32(int32(nmax)-1, l)))
		}
		return 1 / iscale
	}
	returnEarly := false
	if rmseType < 0 {
		rmseType = -rmseType
		returnEarly = true
	}
	weight := func(v float32) float32 {
		switch rmseType {
		case 1:
			return v * v
		case 2:
			return 1
		case 3:
			return absf(v)
		}
		return sqrtf(absf(v))
	}
	var sumlx, suml2 float32
	for i, v := range x {
		l := nearestInt(float32(iscale * v))
		l = max32(-int32(nmax), min32(int32(nmax)-1, l))
		L[i] = int8(l + int32(nmax))
		w := weight(v)
		fl := float32(l)
		sumlx += float32(w * v * fl)
		suml2 += float32(w * fl * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	if returnEarly {
		if suml2 > 0 {
			return 0.5 * (scale + 1/iscale)
		}
		return 1 / iscale
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fnmax + float32(0.1*float32(is))) / max
		sumlx, suml2 = 0, 0
		for _, v := range x {
			l := nearestInt(float32(iscale * v))
			l = max32(-int32(nmax), min32(int32(nmax)-1, l))
			w := weight(v)
			fl := float32(l)
			sumlx += float32(w * v * fl)
			suml2 += float32(w * fl * fl)
		}
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			for i, v := range x {
				l := nearestInt(float32(iscale * v))
				L[i] = int8(int32(nmax) + max32(-int32(nmax), min32(int32(nmax)-1, l)))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQ3Quants is make_q3_quants. L receives values in [0, 2*nmax).
func makeQ3Quants(n, nmax int, x []float32, L []int8, doRMSE bool) float32 {
	x = x[:n]
	L = L[:n]
	var max, amax float32
	for _, v := range x {
		if ax := absf(v); ax > amax {
			amax = ax
			max = v
		}
	}
	if amax < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	nm := int32(nmax)
	iscale := -float32(nmax) / max
	if doRMSE {
		var sumlx, suml2 float32
		for i, v := range x {
			l := nearestInt(float32(iscale * v))
			l = max32(-nm, min32(nm-1, l))
			L[i] = int8(l)
			w := float32(v * v)
			fl := float32(l)
			sumlx += float32(w * v * fl)
			suml2 += float32(w * fl * fl)
		}
		for itry := 0; itry < 5; itry++ {
			nChanged := 0
			for i, v := range x {
				w := float32(v * v)
				fli := float32(L[i])
				slx := sumlx - float32(w*v*fli)
				if slx > 0 {
					sl2 := suml2 - float32(w*fli*fli)
					newL := nearestInt(v * sl2 / slx)
					newL = max32(-nm, min32(nm-1, newL))
					if newL != int32(L[i]) {
						fnl := float32(newL)
						slx += float32(w * v * fnl)
						sl2 += float32(w * fnl * fnl)
						if sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2 {
							L[i] = int8(newL)
							sumlx = slx
							suml2 = sl2
							nChanged++
						}
					}
				}
			}
			if nChanged == 0 {
				break
			}
		}
		for i := range L {
			L[i] += int8(nmax)
		}
		if suml2 > 0 {
			return sumlx / suml2
		}
		return 0
	}
	for i, v := range x {
		l := nearestInt(float32(iscale * v))
		l = max32(-nm, min32(nm-1, l))
		L[i] = int8(l + nm)
	}
	return 1 / iscale
}

// makeQKX2Quants is make_qkx2_quants. L and Laux receive values in [0, nmax];
// it returns the scale and the (negated, >= 0) minimum.
func makeQKX2Quants(n, nmax int, x, weights []float32, L, Laux []uint8,
	rmin, rdelta float32, nstep int, useMAD bool) (scale, theMin float32) {
	x = x[:n]
	weights = weights[:n]
	L = L[:n]
	Laux = Laux[:n]
	min_ := x[0]
	max_ := x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < min_ {
			min_ = x[i]
		}
		if x[i] > max_ {
			max_ = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if min_ > 0 {
		min_ = 0
	}
	if max_ == min_ {
		for i := range L {
			L[i] = 0
		}
		return 0, -min_
	}
	fnmax := float32(nmax)
	nm := int32(nmax)
	iscale := fnmax / (max_ - min_)
	scale = 1 / iscale
	var bestError float32
	for i, v := range x {
		l := nearestInt(float32(iscale * (v - min_)))
		L[i] = uint8(max32(0, min32(nm, l)))
		diff := float32(scale*float32(L[i])) + min_ - v
		if useMAD {
			diff = absf(diff)
		} else {
			diff = diff * diff
		}
		bestError += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -min_
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + fnmax) / (max_ - min_)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := nearestInt(float32(iscale * (v - min_)))
			l = max32(0, min32(nm, l))
			Laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(w * fl * fl)
			sumXL += float32(w * fl * v)
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
			for i, v := range x {
				diff := float32(thisScale*float32(Laux[i])) + thisMin - v
				if useMAD {
					diff = absf(diff)
				} else {
					diff = diff * diff
				}
				curError += float32(weights[i] * diff)
			}
			if curError < bestError {
				copy(L, Laux)
				bestError = curError
				scale = thisScale
				min_ = thisMin
			}
		}
	}
	return scale, -min_
}

func min32(a, b int32) int32 {
	if a < b {
		return a
	}
	return b
}

func max32(a, b int32) int32 {
	if a > b {
		return a
	}
	return b
}
