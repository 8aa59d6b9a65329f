package deploy

import (
	"fmt"
	"strings"

	"github.com/phonellm/phonellm/pipeline/fit"
)

// The error types of this package and its targets classify themselves (pipeline/errors.go): a bad spec,
// bundle or target configuration is an input problem (exit 3), a fleet that fails to come up or answer is a
// remote failure (exit 5), a model that does not fit the phone is a failed check (exit 4).

// SpecError is an invalid deployment spec, bundle configuration, target option or ship option: the input is
// wrong, and nothing was started.
type SpecError struct{ Msg string }

func (e *SpecError) Error() string    { return e.Msg }
func (e *SpecError) InputError() bool { return true }

// SpecErrorf returns a *[SpecError] (targets use it for their own options).
func SpecErrorf(format string, args ...any) error {
	return &SpecError{Msg: fmt.Sprintf(format, args...)}
}

// BundleError is a runtime bundle that is malformed or does not match its manifest.
type BundleError struct{ Msg string }

func (e *BundleError) Error() string    { return "deploy: bundle: " + e.Msg }
func (e *BundleError) InputError() bool { return true }

func bundleErrorf(format string, args ...any) error {
	return &BundleError{Msg: fmt.Sprintf(format, args...)}
}

// FleetError is a deployment that did not come up or answer: replicas that never became ready, a gateway
// that did not answer, a failed first request, a phone network that refused the job.
type FleetError struct {
	// Deployment is the deployment's ID ("" when none was recorded).
	Deployment string
	Err        error
	// Logs is where the target kept the processes' output, when it has such a place.
	Logs string
}

func (e *FleetError) Error() string {
	msg := e.Err.Error()
	if e.Logs != "" {
		msg += " (logs under " + e.Logs + ")"
	}
	return msg
}
func (e *FleetError) Unwrap() error     { return e.Err }
func (e *FleetError) RemoteError() bool { return true }

// NotFitError is the fit check's "no": the model needs more memory than the phone profile leaves one app at
// this context and slot count. Fit holds the whole estimate (the caller can suggest what would fit).
type NotFitError struct {
	Model    string
	Phone    string
	Ctx      int
	Parallel int
	Fit      fit.Result
}

func (e *NotFitError) Error() string {
	return fmt.Sprintf("%s does not fit a %s phone at ctx %d × %d slots (needs %.2f GB of %.2f GB)", e.Model, e.Phone,
		e.Ctx, e.Parallel, float64(e.Fit.Verdict.Needed)/1e9, float64(e.Fit.Verdict.Usable)/1e9)
}
func (e *NotFitError) CheckFailed() bool { return true }

// PortInUseError is a gateway port that another process already listens on. Nothing was started.
type PortInUseError struct {
	Port int
	Err  error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("gateway port %d is already in use on 127.0.0.1 (another deployment or program listens there); nothing was started", e.Port)
}
func (e *PortInUseError) Unwrap() error { return e.Err }

// oneLine keeps the first line of a message (remote error bodies can be long and multi-line) and caps it.
func oneLine(s string, max int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + " …"
	}
	return s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
