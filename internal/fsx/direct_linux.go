package fsx

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// setDirect turns O_DIRECT on or off for f and reports whether that worked.
func setDirect(f syscall.Conn, on bool) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	rc.Control(func(fd uintptr) {
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			return
		}
		if on {
			flags |= unix.O_DIRECT
		} else {
			flags &^= unix.O_DIRECT
		}
		_, err = unix.FcntlInt(fd, unix.F_SETFL, flags)
		ok = err == nil
	})
	return ok
}

func isInvalid(err error) bool { return errors.Is(err, unix.EINVAL) }
