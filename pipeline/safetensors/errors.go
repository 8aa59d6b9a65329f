package safetensors

import "fmt"

// FormatError reports bytes that do not form a valid safetensors file (or
// index): truncation, a header that lies about offsets, overlapping or
// out-of-range entries, bad JSON, a shape that does not match its byte span.
type FormatError struct {
	Path   string // file the problem is in
	Tensor string // tensor name, or "" when the problem is not about one tensor
	Msg    string // what is wrong and what was expected
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("safetensors: %s: tensor %q: %s", e.Path, e.Tensor, e.Msg)
	}
	return fmt.Sprintf("safetensors: %s: %s", e.Path, e.Msg)
}

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *FormatError) InputError() bool { return true }

// UnsupportedError reports a valid file that uses something this package does
// not handle, such as an unknown dtype or reading an F8 tensor as float32.
type UnsupportedError struct {
	Path   string
	Tensor string
	DType  DType
	Msg    string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("safetensors: %s: tensor %q: %s", e.Path, e.Tensor, e.Msg)
}

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *UnsupportedError) InputError() bool { return true }

func formatErr(path, tensor, format string, args ...any) *FormatError {
	return &FormatError{Path: path, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
}
