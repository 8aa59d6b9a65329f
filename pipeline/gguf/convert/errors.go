package convert

import "fmt"

// ConfigError reports a checkpoint file (config.json, tokenizer.json, ...) that lacks a field the conversion
// needs or holds a value it cannot use.
type ConfigError struct {
	File  string // path of the file
	Field string // JSON field, e.g. "text_config.linear_num_value_heads"
	Msg   string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("convert: %s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("convert: %s: field %q: %s", e.File, e.Field, e.Msg)
}

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *ConfigError) InputError() bool { return true }

// UnsupportedError reports a valid checkpoint that this package does not convert: an architecture, a tensor
// dtype, a tokenizer kind.
type UnsupportedError struct {
	File string // file or tensor the problem was found in
	What string
}

func (e *UnsupportedError) Error() string {
	if e.File == "" {
		return "convert: unsupported " + e.What
	}
	return fmt.Sprintf("convert: %s: unsupported %s", e.File, e.What)
}

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *UnsupportedError) InputError() bool { return true }
