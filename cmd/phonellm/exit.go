package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/phonellm/phonellm/pipeline"
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

// exitError carries an exit code and an optional hint for people. Stage errors need none: they classify
// themselves (pipeline.IsInputError, IsRemoteError, IsCheckFailed) and exitCode maps the class. exitError is for
// what only cmd knows: a bad command line, a verdict cmd itself computed, a hint.
type exitError struct {
	code int // 0: take the code from the wrapped error's class
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

// withHint adds a hint for people to err; the exit code still comes from err's class.
func withHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &exitError{err: err, hint: hint}
}

// usageError is a bad command line.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// hinter is an error that suggests what to do (publish.HubError does).
type hinter interface{ Hint() string }

// exitCode maps an error to the process exit code and a hint: an explicit code from cmd first, then Ctrl-C,
// then the class the error reports about itself (pipeline/errors.go), else 1.
func exitCode(ctx context.Context, err error) (int, string) {
	if err == nil {
		return exitOK, ""
	}
	// cmd's own code and hint (the outermost of each) come first, then a hint the error itself offers.
	code, hint := 0, ""
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ee, ok := e.(*exitError); ok {
			if hint == "" {
				hint = ee.hint
			}
			if code == 0 {
				code = ee.code
			}
		}
	}
	var h hinter
	if hint == "" && errors.As(err, &h) {
		hint = h.Hint()
	}
	if code != 0 {
		return code, hint
	}
	switch {
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return exitInterrupted, ""
	case pipeline.IsCheckFailed(err):
		return exitVerdict, hint
	case pipeline.IsInputError(err):
		return exitBadInput, hint
	case pipeline.IsRemoteError(err):
		return exitRemote, hint
	}
	return exitFailure, hint
}

// asErr is errors.As, spelled short for the command files.
func asErr[T any](err error, target *T) bool { return errors.As(err, target) }
