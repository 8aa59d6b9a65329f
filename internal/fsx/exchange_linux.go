package fsx

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// exchange swaps tmp and path atomically (renameat2 RENAME_EXCHANGE, Linux 3.15+). It reports false, with no
// error, when the kernel or the file system does not support the exchange, so the caller falls back.
func exchange(tmp, path string) (bool, error) {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
		return false, nil
	}
	return false, &os.LinkError{Op: "renameat2 exchange", Old: tmp, New: path, Err: err}
}
