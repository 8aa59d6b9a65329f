package merge

// lowRank32x4AVX2 does lowRank32Go for the first n columns (a multiple of 16) of four rows of x, ldx apart,
// ug being the four rows' u interleaved (ug[k*4+i]), and writes their guard masks (flag32Go) from ku (four
// values), nv and floor to mask, the rows' words ldm bytes apart.
//
//go:noescape
func lowRank32x4AVX2(x *float32, ldx int, n int, ug *float32, r int, v *float32, ldv int, ku *float32, nv *float32, floor float32, mask *uint16, ldm int)

// lowRank32x4Vec handles the rows of x in groups of four (all columns, the tail columns in Go), guard masks
// included, and returns how many rows it did.
func lowRank32x4Vec(x, u, v []float32, n, cols, r int, g *guard) int {
	nv := cols &^ 15
	if !haveAVX2FMA || nv == 0 || n < 4 {
		return 0
	}
	tiles := g.tiles(cols)
	_ = g.ku[n-1]
	_ = g.nv[cols-1]
	_ = g.mask[n*tiles-1]
	var ugs [4 * 64]float32
	ug := ugs[:0]
	i := 0
	for ; i+4 <= n; i += 4 {
		ug = interleave4(ug, u, i, r)
		_ = x[(i+3)*cols+nv-1]
		lowRank32x4AVX2(&x[i*cols], cols, nv, &ug[0], r, &v[0], cols, &g.ku[i], &g.nv[0], g.floor, &g.mask[i*tiles], 2*tiles)
		if nv < cols {
			for q := 0; q < 4; q++ {
				row := x[(i+q)*cols : (i+q+1)*cols]
				lowRank32Go(row[nv:], u[(i+q)*r:(i+q+1)*r], v[nv:], cols)
				flag32Go(row, nv, g.ku[i+q], g.nv, g.floor, g.mask[(i+q)*tiles:(i+q+1)*tiles])
			}
		}
	}
	return i
}

//go:noescape
func decodeBF16F32AVX2(dst *float32, src *byte, n int)

// decodeBF16F32Vec widens the leading multiple of 8 bfloat16 values of b into dst and returns how many it did.
func decodeBF16F32Vec(dst []float32, b []byte) int {
	n := len(dst) &^ 7
	if !haveAVX2FMA || n == 0 {
		return 0
	}
	_ = b[2*n-1]
	decodeBF16F32AVX2(&dst[0], &b[0], n)
	return n
}

//go:noescape
func encodeF32BF16AVX2(dst *byte, src *float32, n int) int

// encodeF32BF16Vec encodes as many leading values of x as the vector path can (a multiple of 8, possibly 0).
func encodeF32BF16Vec(dst []byte, x []float32) int {
	if !haveAVX2FMA || len(x) < 8 {
		return 0
	}
	_ = dst[2*len(x)-1]
	return encodeF32BF16AVX2(&dst[0], &x[0], len(x))
}

// fused4BF16AVX2 is decode16 + lowRank32Go + flag32Go + encode16 over four bfloat16 rows (see
// lowrank32_amd64.s).
//
//go:noescape
func fused4BF16AVX2(dst *byte, src *byte, ld int, n int, ug *float32, r int, v *float32, ldv int, ku *float32, nv *float32, floor float32, mask *uint16, ldm int) (bad int)

// fusedBF16Rows computes BF16 rows of x = src + u·v in groups of four straight from src into dst (both n
// rows of cols bfloat16 values), with their guard masks, when cols is a multiple of 16, and returns how many
// rows it did; it stops before a group holding a value that is, or rounds to, NaN/Inf (the caller redoes it on
// the scalar path).
func fusedBF16Rows(dst, src []byte, u, v []float32, n, cols, r int, g *guard) int {
	if !haveAVX2FMA || cols&15 != 0 || cols == 0 || n < 4 || r == 0 {
		return 0
	}
	tiles := g.tiles(cols)
	_ = src[2*n*cols-1]
	_ = dst[2*n*cols-1]
	_ = u[n*r-1]
	_ = v[r*cols-1]
	_ = g.ku[n-1]
	_ = g.nv[cols-1]
	_ = g.mask[n*tiles-1]
	var ugs [4 * 64]float32
	ug := ugs[:0]
	i := 0
	for ; i+4 <= n; i += 4 {
		ug = interleave4(ug, u, i, r)
		if fused4BF16AVX2(&dst[2*i*cols], &src[2*i*cols], 2*cols, cols, &ug[0], r, &v[0], cols,
			&g.ku[i], &g.nv[0], g.floor, &g.mask[i*tiles], 2*tiles) != 0 {
			break
		}
	}
	return i
}
