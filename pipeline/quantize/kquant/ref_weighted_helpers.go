package kquant

// Reference versions of the search routines that ggml-quants.c uses when
// quantization weights are given (make_qx_quants with qw, make_qkx3_quants,
// make_qp_quants), statement by statement. Every product that feeds an
// addition or subtraction is rounded first (float32(a*b)), as the x86 build
// of ggml does; see doc.go.

// cmaxf is ggml's MAX(a, b) = a > b ? a : b on floats (a NaN b wins, a NaN
// a loses).
func cmaxf(a, b float32) float32 {
	if a > b {
		return a
	}
	return b
}

// makeQXQuantsW is make_qx_quants with a weight array qw and rmse_type 1,
// the only combination the weighted call sites use (with qw given, the
// weight of value i is qw[i] whatever rmse_type is, and rmse_type 1 does not
// return early). L receives values in [0, 2*nmax).
func makeQXQuantsW(n, nmax int, x []float32, L []int8, qw []float32) float32 {
	x = x[:n]
	L = L[:n]
	qw = qw[:n]
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
	fnmax := float32(nmax)
	iscale := -fnmax / max
	var sumlx, suml2 float32
	for i, v := range x {
		l := nearestInt(float32(iscale * v))
		l = max32(-nm, min32(nm-1, l))
		L[i] = int8(l + nm)
		w := qw[i]
		fl := float32(l)
		sumlx += float32(w * v * fl)
		suml2 += float32(w * fl * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fnmax + float32(0.1*float32(is))) / max
		sumlx, suml2 = 0, 0
		for i, v := range x {
			l := nearestInt(float32(iscale * v))
			l = max32(-nm, min32(nm-1, l))
			w := qw[i]
			fl := float32(l)
			sumlx += float32(w * v * fl)
			suml2 += float32(w * fl * fl)
		}
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			for i, v := range x {
				l := nearestInt(float32(iscale * v))
				L[i] = int8(nm + max32(-nm, min32(nm-1, l)))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQKX3Quants is make_qkx3_quants with a weight array (every call site
// passes one). L and Laux receive values in [0, nmax]; it returns the scale
// and the negated minimum (>= 0).
func makeQKX3Quants(n, nmax int, x, weights []float32, L, Laux []uint8,
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
	if max_ <= min_ {
		for i := range L {
			L[i] = 0
		}
		return 0, -min_
	}
	nm := int32(nmax)
	fnmax := float32(nmax)
	iscale := fnmax / (max_ - min_)
	scale = 1 / iscale
	var bestMAD float32
	for i, v := range x {
		l := nearestInt(float32(iscale * (v - min_)))
		L[i] = uint8(max32(0, min32(nm, l)))
		diff := float32(scale*float32(L[i])) + min_ - v
		if useMAD {
			diff = absf(diff)
		} else {
			diff = diff * diff
		}
		bestMAD += float32(weights[i] * diff)
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
			var mad float32
			for i, v := range x {
				diff := float32(thisScale*float32(Laux[i])) + thisMin - v
				if useMAD {
					diff = absf(diff)
				} else {
					diff = diff * diff
				}
				mad += float32(weights[i] * diff)
			}
			if mad < bestMAD {
				copy(L, Laux)
				bestMAD = mad
				scale = thisScale
				min_ = thisMin
			}
		}
	}
	return scale, -min_
}

// makeQPQuants is make_qp_quants: quantizes the non-negative values x (sub-
// block scales or mins) to [0, nmax] with weights qw, refining the levels
// one at a time. L receives the levels as uint8 (a negative level wraps, as
// in C).
func makeQPQuants(n, nmax int, x []float32, L []uint8, qw []float32) float32 {
	x = x[:n]
	L = L[:n]
	qw = qw[:n]
	var max float32
	for _, v := range x {
		max = cmaxf(max, v)
	}
	if max < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	nm := int32(nmax)
	fnmax := float32(nmax)
	iscale := fnmax / max
	for i, v := range x {
		L[i] = uint8(nearestInt(float32(iscale * v)))
	}
	scale := 1 / iscale
	var bestMSE float32
	for i, v := range x {
		diff := v - float32(scale*float32(L[i]))
		w := qw[i]
		bestMSE += float32(w * diff * diff)
	}
	for is := -4; is <= 4; is++ {
		if is == 0 {
			continue
		}
		iscaleIs := (float32(0.1*float32(is)) + fnmax) / max
		scaleIs := 1 / iscaleIs
		var mse float32
		for i, v := range x {
			l := nearestInt(float32(iscaleIs * v))
			l = min32(nm, l)
			diff := v - float32(scaleIs*float32(l))
			w := qw[i]
			mse += float32(w * diff * diff)
		}
		if mse < bestMSE {
			bestMSE = mse
			iscale = iscaleIs
		}
	}
	var sumlx, suml2 float32
	for i, v := range x {
		l := nearestInt(float32(iscale * v))
		l = min32(nm, l)
		L[i] = uint8(l)
		w := qw[i]
		fl := float32(l)
		sumlx += float32(w * v * fl)
		suml2 += float32(w * fl * fl)
	}
	for itry := 0; itry < 5; itry++ {
		nChanged := 0
		for i, v := range x {
			w := qw[i]
			fli := float32(L[i])
			slx := sumlx - float32(w*v*fli)
			sl2 := suml2 - float32(w*fli*fli)
			if slx > 0 && sl2 > 0 {
				newL := nearestInt(v * sl2 / slx)
				newL = min32(nm, newL)
				if newL != int32(L[i]) {
					fnl := float32(newL)
					slx += float32(w * v * fnl)
					sl2 += float32(w * fnl * fnl)
					if slx*slx*suml2 > sumlx*sumlx*sl2 {
						L[i] = uint8(newL)
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
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// weightsSigma fills w[j] = qw[j] * sqrtf(sigma2 + x[j]*x[j]), the weight
// every imatrix path uses.
func weightsSigma(w, x, qw []float32, sigma2 float32) {
	x = x[:len(w)]
	qw = qw[:len(w)]
	for j, v := range x {
		w[j] = qw[j] * sqrtf(sigma2+float32(v*v))
	}
}

// sumSquares is the sequential float32 sum of x[j]*x[j].
func sumSquares(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += float32(v * v)
	}
	return s
}
