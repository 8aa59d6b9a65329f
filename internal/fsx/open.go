package fsx

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// NotRegularError reports a path where a regular file was expected but something else is: a folder, a named
// pipe, a device or a socket. Reading a FIFO named model.safetensors would block forever and a device such as
// /dev/zero never ends, so input files are refused unless they are regular files.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, describeMode(e.Mode))
}

// InputError classifies the error as bad input (exit 3).
func (e *NotRegularError) InputError() bool { return true }

func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "not a plain file"
}

// Open opens path for reading and refuses anything but a regular file (symbolic links are followed) with a
// *NotRegularError. The open itself never blocks: on Unix it uses O_NONBLOCK, so a FIFO without a writer
// cannot hang it, and the check is made on the opened descriptor, so a file swapped for a FIFO between a check
// and the open cannot slip through. Reads of a regular file are unaffected by O_NONBLOCK.
func Open(path string) (*os.File, error) {
	f, err := openNonblock(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return f, nil
}

// CheckRegular reports a *NotRegularError when path exists and is not a regular file, without opening it (for
// callers whose own open is further away, such as a memory map). A missing file is not an error here.
func CheckRegular(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	if !st.Mode().IsRegular() {
		return &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return nil
}

// LimitError reports a file larger than a reader accepts.
type LimitError struct {
	Path  string
	Limit int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s is larger than the %d bytes accepted for it", e.Path, e.Limit)
}

// InputError classifies the error as bad input (exit 3).
func (e *LimitError) InputError() bool { return true }

// ReadFile reads a regular file (see [Open]) of at most limit bytes; a larger one is a *LimitError. It is
// os.ReadFile for files that come from strangers: side files such as config.json or tokenizer.json.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, &LimitError{Path: path, Limit: limit}
	}
	return data, nil
}
