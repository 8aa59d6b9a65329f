package gguf

import "fmt"

// FormatError reports bytes that are not a valid GGUF file.
type FormatError struct {
	File   string // file name, when known
	Offset int64  // byte offset where the problem was found, -1 when not meaningful
	Msg    string
}

func (e *FormatError) Error() string {
	where := ""
	if e.File != "" {
		where = e.File + ": "
	}
	if e.Offset >= 0 {
		return fmt.Sprintf("gguf: %sinvalid format at byte %d: %s", where, e.Offset, e.Msg)
	}
	return fmt.Sprintf("gguf: %sinvalid format: %s", where, e.Msg)
}

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *FormatError) InputError() bool { return true }

// UnsupportedError reports a valid GGUF feature this package does not handle.
type UnsupportedError struct {
	File string
	What string
}

func (e *UnsupportedError) Error() string {
	if e.File != "" {
		return fmt.Sprintf("gguf: %s: unsupported %s", e.File, e.What)
	}
	return "gguf: unsupported " + e.What
}

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *UnsupportedError) InputError() bool { return true }
