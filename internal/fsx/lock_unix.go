//go:build unix

package fsx

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockExclusive takes a non-blocking exclusive flock on f and reports whether it holds it. The lock lives as
// long as the descriptor: a killed process loses it, which is how RemoveStale tells abandoned temporaries.
func lockExclusive(f *os.File) bool {
	c, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var lerr error
	if err := c.Control(func(fd uintptr) { lerr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) }); err != nil {
		return false
	}
	return lerr == nil
}

// tryLock reports whether f can be locked, that is whether no live process holds its lock. Where the file
// system has no locks it reports true and the owner's pid decides alone.
func tryLock(f *os.File) bool {
	c, err := f.SyscallConn()
	if err != nil {
		return true
	}
	var lerr error
	if err := c.Control(func(fd uintptr) { lerr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) }); err != nil {
		return true
	}
	return !errors.Is(lerr, unix.EWOULDBLOCK)
}

// processAlive reports whether a process with this pid exists (a pid reused by another program counts as
// alive: the temporary is then kept, which is the safe mistake).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return !errors.Is(err, syscall.ESRCH)
}
