//go:build !purego

package quantize

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAVX2Finite selects finiteAVX2 (finite_amd64.s) for the check every input value passes; build with -tags
// purego for the plain Go loop.
var useAVX2Finite = cpu.X86.HasAVX2

//go:noescape
func finiteAVX2(x *float32, n int) bool

// allFiniteVec reports whether the first n values of rows, n the largest multiple of 32 it checks, are finite
// (n is 0 without AVX2).
func allFiniteVec(rows []float32) (n int, ok bool) {
	n = len(rows) &^ 31
	if !useAVX2Finite || n == 0 {
		return 0, true
	}
	return n, finiteAVX2((*float32)(unsafe.Pointer(&rows[0])), n)
}
