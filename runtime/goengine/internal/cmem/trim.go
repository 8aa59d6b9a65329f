//go:build linux && cgo

package cmem

/*
#include <malloc.h>
*/
import "C"

// Trim returns the C heap's free memory to the operating system: glibc's malloc_trim(0), which releases the
// top of the main arena and the free pages of every arena (madvise). It changes no allocator setting.
func Trim() { C.malloc_trim(0) }
