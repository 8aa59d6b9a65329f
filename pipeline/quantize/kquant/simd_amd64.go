//go:build !purego

package kquant

import "golang.org/x/sys/cpu"

// useAVX2 selects the vector kernels (*_amd64.s). They use AVX2 and F16C
// (every AVX2 CPU has it), never FMA: every product is rounded before it is
// added, as in ggml's build. Build with -tags purego to run the plain Go
// kernels on amd64.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasF16C

// qkx2Lanes32AVX2 runs make_qkx2_quants on the 8 sub-blocks in st (see
// qkx2_amd64.s), with the Q4_K weights or, if weighted, st.w as given.
//
//go:noescape
func qkx2Lanes32AVX2(st *qkx2Lanes, nmax, nstep int, weighted bool)

// qkx2Lanes16AVX2 is the Q2_K variant on rows 0-15 of st (16 values;
// weights |x| unless weighted; absolute error if mad, else squared).
//
//go:noescape
func qkx2Lanes16AVX2(st *qkx2Lanes, nmax, nstep int, weighted, mad bool)

// qx16LanesAVX2 runs make_qx_quants (n 16, rmse_type 1) on the 16
// sub-blocks in st (see qx_amd64.s), with the weights x*x or, if weighted,
// st.w as given.
//
//go:noescape
func qx16LanesAVX2(st *qx16Lanes, num *[18]float32, weighted bool, nmax int)

// q8_0AVX2 and q4_0AVX2 encode blocks until the first one holding a NaN or
// Inf and return how many they encoded (see legacy_amd64.s).
//
//go:noescape
func q8_0AVX2(dst *byte, src *float32, nb int) int

//go:noescape
func q4_0AVX2(dst *byte, src *float32, nb int) int

// iq4Lanes32AVX2 runs the IQ4 scale search on the 8 blocks of 32 values in
// st (weights x*x or, if weighted, st.w); iq4IndexAVX2 encodes 32 values
// with scale 1/id as IQ4 nibbles (see iq4_amd64.s).
//
//go:noescape
func iq4Lanes32AVX2(st *qkx2Lanes, t *iq4Tables, weighted bool)

//go:noescape
func iq4IndexAVX2(dst *byte, x *float32, id float32, t *iq4Tables)

// q3LanesAVX2 runs make_q3_quants for Q3_K on the 16 sub-blocks in st (see
// q3k_amd64.s).
//
//go:noescape
func q3LanesAVX2(st *qx16Lanes)

// transpose32AVX2, transpose16AVX2 and transpose16x8AVX2 put a super-block
// into a lane layout (dst[i][j] = value i of block j for blocks of 32, 16
// and, for half a Q2_K super-block, 16 values) and report whether every
// value is finite (see transpose_amd64.s).
//
//go:noescape
func transpose32AVX2(dst *[32][8]float32, x *[256]float32) bool

//go:noescape
func transpose16AVX2(dst *[16][16]float32, x *[256]float32) bool

//go:noescape
func transpose16x8AVX2(dst *[32][8]float32, x *[128]float32) bool

// requantAVX2 sets dst[i] = max(lo, min(hi, nearest_int((x[i]+dm)/d))) + off
// for n values, n a positive multiple of 8, the result in [0, 255] (see
// legacy_amd64.s).
//
//go:noescape
func requantAVX2(dst *byte, x *float32, n int, d, dm float32, lo, hi, off int)
