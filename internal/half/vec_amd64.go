//go:build !purego

package half

import "golang.org/x/sys/cpu"

// useF16C selects the F16C/AVX2 row conversions (vec_amd64.s); -tags purego
// keeps the table and bit-manipulation versions.
var useF16C = cpu.X86.HasAVX2 && cpu.X86.HasF16C

//go:noescape
func decodeF16AVX(dst *float32, src *byte, n int)

//go:noescape
func decodeBF16AVX(dst *float32, src *byte, n int)

//go:noescape
func encodeF16AVX(dst *byte, src *float32, n int) int

//go:noescape
func encodeBF16AVX(dst *byte, src *float32, n int)

// decodeF16Vec converts the leading multiple of 8 of n f16 values at src
// (2n bytes) into dst and returns how many it converted.
func decodeF16Vec(dst []float32, src []byte, n int) int {
	m := n &^ 7
	if !useF16C || m == 0 {
		return 0
	}
	_, _ = dst[m-1], src[2*m-1]
	decodeF16AVX(&dst[0], &src[0], m)
	return m
}

func decodeBF16Vec(dst []float32, src []byte, n int) int {
	m := n &^ 7
	if !useF16C || m == 0 {
		return 0
	}
	_, _ = dst[m-1], src[2*m-1]
	decodeBF16AVX(&dst[0], &src[0], m)
	return m
}

// encodeF16Vec converts leading values of src (up to n) into dst, stopping
// before a group of eight with a NaN, and returns how many it converted.
func encodeF16Vec(dst []byte, src []float32, n int) int {
	if !useF16C || n < 8 {
		return 0
	}
	_, _ = dst[2*n-1], src[n-1]
	return encodeF16AVX(&dst[0], &src[0], n)
}

// encodeBF16Vec converts the leading multiple of 8 of n values of src to
// bf16 at dst (2n bytes) and returns how many it converted.
func encodeBF16Vec(dst []byte, src []float32, n int) int {
	m := n &^ 7
	if !useF16C || m == 0 {
		return 0
	}
	_, _ = dst[2*m-1], src[m-1]
	encodeBF16AVX(&dst[0], &src[0], m)
	return m
}
