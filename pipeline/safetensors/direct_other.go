//go:build !linux

package safetensors

import "os"

// setDirect reports false: direct I/O is only used on Linux.
func setDirect(f *os.File, on bool) bool { return false }

func isInvalid(err error) bool { return false }
