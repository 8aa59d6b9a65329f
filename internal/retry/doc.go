// Package retry is phonellm's one retry helper: a bounded number of attempts,
// jittered exponential back-off, and server-provided delays (Retry-After,
// RateLimit "t=") honoured.
//
// Do never decides on its own that a call is safe to repeat: an attempt is
// retried only when the callback returns an error marked with Transient (or
// After). Callers mark errors of idempotent calls only; a non-idempotent call
// (a Hub commit) returns its ambiguous failures unmarked and lets its caller
// check what happened before trying again.
package retry
