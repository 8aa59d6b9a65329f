package pipeline

import "errors"

// Errors classify themselves (house style §15, like net.Error's Timeout): a stage's error type answers one of
// the small methods below with true, and cmd/phonellm maps the class to an exit code without listing types.
//
//   - InputError() bool: an input file or value is malformed or unsupported (a GGUF, safetensors, config,
//     adapter, imatrix, prompts file, workload, …). Exit 3. Nothing was written.
//   - RemoteError() bool: a remote service refused or failed (the Hub, a fleet, a replica). Exit 5.
//   - CheckFailed() bool: the command ran and its check said no (model does not fit, quality gate failed).
//     Exit 4.
//
// Anything else is a plain failure (exit 1). The methods return bool rather than being bare markers so a type
// can decide per value (an HTTP error is remote, but a 4xx caused by the user's own file may be input).

type inputClass interface{ InputError() bool }
type remoteClass interface{ RemoteError() bool }
type checkClass interface{ CheckFailed() bool }

// IsInputError reports whether an error in err's chain says it is an input problem.
func IsInputError(err error) bool {
	var c inputClass
	return errors.As(err, &c) && c.InputError()
}

// IsRemoteError reports whether an error in err's chain says it is a remote service's failure.
func IsRemoteError(err error) bool {
	var c remoteClass
	return errors.As(err, &c) && c.RemoteError()
}

// IsCheckFailed reports whether an error in err's chain is a failed check (a verdict, not a malfunction).
func IsCheckFailed(err error) bool {
	var c checkClass
	return errors.As(err, &c) && c.CheckFailed()
}

// InputError marks err as an input problem (exit 3) for error values that have no type of their own.
func InputError(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, input: true}
}

// RemoteError marks err as a remote service's failure (exit 5).
func RemoteError(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, remote: true}
}

// CheckFailed marks err as a failed check (exit 4).
func CheckFailed(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, check: true}
}

type classified struct {
	err                  error
	input, remote, check bool
}

func (e *classified) Error() string     { return e.err.Error() }
func (e *classified) Unwrap() error     { return e.err }
func (e *classified) InputError() bool  { return e.input }
func (e *classified) RemoteError() bool { return e.remote }
func (e *classified) CheckFailed() bool { return e.check }
