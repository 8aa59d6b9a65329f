package merge

import "fmt"

// FormatError reports an adapter or base whose files are malformed or do not fit together: bad JSON, a missing
// tensor, shapes that disagree, NaN weights.
type FormatError struct {
	Path string // adapter or base folder (or file)
	Msg  string // what is wrong, naming the tensor and shapes
}

func (e *FormatError) Error() string { return fmt.Sprintf("merge: %s: %s", e.Path, e.Msg) }

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *FormatError) InputError() bool { return true }

// UnsupportedError reports a valid input that this package deliberately does not merge (a quantized base, a
// PEFT feature without an exact merge, a pickle file).
type UnsupportedError struct {
	Path string
	Msg  string
}

func (e *UnsupportedError) Error() string { return fmt.Sprintf("merge: %s: %s", e.Path, e.Msg) }

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *UnsupportedError) InputError() bool { return true }

func formatErr(path, format string, args ...any) error {
	return &FormatError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

func unsupported(path, format string, args ...any) error {
	return &UnsupportedError{Path: path, Msg: fmt.Sprintf(format, args...)}
}
