package merge

import "golang.org/x/sys/cpu"

var haveAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// lowRankAVX2 does lowRankGo for the first n columns of x (n a multiple of 16); ld is v's row stride.
//
//go:noescape
func lowRankAVX2(x *float64, n int, u *float64, r int, v *float64, ld int)

// lowRank4AVX2 does lowRankGo for the first n columns (a multiple of 8) of four rows of x, ldx apart; ug is
// the four rows' u interleaved (ug[k*4+i]).
//
//go:noescape
func lowRank4AVX2(x *float64, ldx int, n int, ug *float64, r int, v *float64, ldv int)

// lowRankVec runs the vector kernel over the largest multiple of 16 columns and returns how many it did.
func lowRankVec(x, u, v []float64) int {
	n := len(x) &^ 15
	if !haveAVX2FMA || n == 0 {
		return 0
	}
	_ = v[(len(u)-1)*len(x)+n-1] // bounds: the kernel reads v[k*ld+j] for k < len(u), j < n
	lowRankAVX2(&x[0], n, &u[0], len(u), &v[0], len(x))
	return n
}

// lowRank4Vec handles the rows of x in groups of four (all columns, the tail columns in Go) and returns how
// many rows it did.
func lowRank4Vec(x, u, v []float64, n, cols, r int) int {
	nv := cols &^ 7
	if !haveAVX2FMA || nv == 0 || n < 4 {
		return 0
	}
	var ug []float64
	i := 0
	for ; i+4 <= n; i += 4 {
		ug = interleave4(ug, u, i, r)
		_ = x[(i+3)*cols+nv-1]
		lowRank4AVX2(&x[i*cols], cols, nv, &ug[0], r, &v[0], cols)
		if nv < cols {
			for q := 0; q < 4; q++ {
				row := x[(i+q)*cols : (i+q+1)*cols]
				lowRankGo(row[nv:], u[(i+q)*r:(i+q+1)*r], v[nv:], cols)
			}
		}
	}
	return i
}

// encodeBF16AVX2 encodes a prefix of src as bfloat16 into dst and returns its length (see encode_amd64.s).
//
//go:noescape
func encodeBF16AVX2(dst *byte, src *float64, n int) int

// encodeBF16Vec encodes as many leading values of x as the vector path can (a multiple of 8, possibly 0).
func encodeBF16Vec(dst []byte, x []float64) int {
	if !haveAVX2FMA || len(x) < 8 {
		return 0
	}
	_ = dst[2*len(x)-1]
	return encodeBF16AVX2(&dst[0], &x[0], len(x))
}

//go:noescape
func decodeBF16AVX2(dst *float64, src *byte, n int)

// decodeBF16Vec widens the leading multiple of 8 bfloat16 values of b into dst and returns how many it did.
func decodeBF16Vec(dst []float64, b []byte) int {
	n := len(dst) &^ 7
	if !haveAVX2FMA || n == 0 {
		return 0
	}
	_ = b[2*n-1]
	decodeBF16AVX2(&dst[0], &b[0], n)
	return n
}

// interleave4 puts rows i..i+3 of u (r values each) in the order the four-row AVX2 kernels read them,
// ug[k*4+q] = u[(i+q)*r+k], reusing buf when it is large enough.
func interleave4[T float32 | float64](buf, u []T, i, r int) []T {
	if cap(buf) < 4*r {
		buf = make([]T, 4*r)
	}
	ug := buf[:4*r]
	for k := 0; k < r; k++ {
		for q := 0; q < 4; q++ {
			ug[k*4+q] = u[(i+q)*r+k]
		}
	}
	return ug
}
