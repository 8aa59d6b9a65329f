//go:build !linux

package fsx

import "syscall"

// setDirect reports false: direct I/O is only used on Linux.
func setDirect(f syscall.Conn, on bool) bool { return false }

func isInvalid(err error) bool { return false }
