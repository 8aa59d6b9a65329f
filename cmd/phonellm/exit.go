package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/merge"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// Exit codes. They are part of the command-line contract and documented in README.md.
const (
	exitOK          = 0   // success
	exitFailure     = 1   // the command failed (I/O error, engine error, anything not below)
	exitUsage       = 2   // bad command line: unknown command or flag, invalid flag value
	exitBadInput    = 3   // an input file is malformed or unsupported (GGUF, safetensors, config, adapter)
	exitVerdict     = 4   // the command ran but its check failed: model does not fit, quality gate failed
	exitRemote      = 5   // a remote service refused or failed (Hub, fleet, replica)
	exitInterrupted = 130 // interrupted by Ctrl-C / SIGTERM; nothing half-written was left behind
)

// exitError carries an exit code and an optional hint for people.
type exitError struct {
	code int
	err  error
	hint string
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err with an exit code and a hint.
func withCode(code int, err error, hint string) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err, hint: hint}
}

// usageError is a bad command line.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// inputErrorKinds lists the error types that mean "this input is bad" (exit 3). Stage packages with their own
// FormatError/UnsupportedError register here.
var inputErrorKinds = []func(error) bool{
	func(err error) bool { var e *gguf.FormatError; return errors.As(err, &e) },
	func(err error) bool { var e *gguf.UnsupportedError; return errors.As(err, &e) },
	checkpoint.IsInputError,
	func(err error) bool { var e *convert.ConfigError; return errors.As(err, &e) },
	func(err error) bool { var e *convert.UnsupportedError; return errors.As(err, &e) },
	func(err error) bool { var e *merge.FormatError; return errors.As(err, &e) },
	func(err error) bool { var e *merge.UnsupportedError; return errors.As(err, &e) },
	func(err error) bool { var e *fit.FormatError; return errors.As(err, &e) },
	func(err error) bool { var e *plan.UnsupportedError; return errors.As(err, &e) },
}

// exitCode maps an error to the process exit code and a hint.
func exitCode(ctx context.Context, err error) (int, string) {
	if err == nil {
		return exitOK, ""
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, ee.hint
	}
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return exitInterrupted, ""
	}
	for _, is := range inputErrorKinds {
		if is(err) {
			return exitBadInput, ""
		}
	}
	return exitFailure, ""
}

// asErr is errors.As, spelled short for the command files.
func asErr[T any](err error, target *T) bool { return errors.As(err, target) }
