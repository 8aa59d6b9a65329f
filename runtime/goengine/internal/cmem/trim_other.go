//go:build !linux || !cgo

package cmem

// Trim does nothing where the C allocator is not glibc's.
func Trim() {}
