package merge

import "math"

// addLowRank adds Σ_k u[k]·v[k,:] to x, where v holds len(u) rows of len(x) values:
//
//	x[j] = fma(u[k], v[k,j], x[j])   for k = 0, 1, …, in that order
//
// lowRankGo is the specification; the amd64 AVX2 kernels perform the same fused operations in the same order,
// so every path gives identical bits (TestAddLowRank).
func addLowRank(x, u, v []float64) {
	cols := len(x)
	if len(u) == 0 || cols == 0 {
		return
	}
	v = v[:len(u)*cols]
	done := lowRankVec(x, u, v)
	if done < cols {
		lowRankGo(x[done:], u, v[done:], cols)
	}
}

// addLowRankRows does addLowRank for n consecutive rows of x (each cols long), row i using u[i*r:(i+1)*r].
// On amd64 four rows share each load of v.
func addLowRankRows(x, u, v []float64, n, cols, r int) {
	if r == 0 || cols == 0 || n == 0 {
		return
	}
	x = x[:n*cols]
	u = u[:n*r]
	v = v[:r*cols]
	i := lowRank4Vec(x, u, v, n, cols, r)
	for ; i < n; i++ {
		addLowRank(x[i*cols:(i+1)*cols], u[i*r:(i+1)*r], v)
	}
}

// lowRankGo is the portable kernel: x[j] = fma(u[k], v[k*ld+j], x[j]) for every k, then the next column
// block. v starts at the first column of x; ld is v's row stride.
func lowRankGo(x, u, v []float64, ld int) {
	for k, uk := range u {
		vk := v[k*ld : k*ld+len(x)]
		for j := range x {
			x[j] = math.FMA(uk, vk[j], x[j])
		}
	}
}
