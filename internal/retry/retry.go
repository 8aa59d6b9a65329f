package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Policy bounds the attempts and the delays between them. The zero value is
// usable and equals Default.
type Policy struct {
	Attempts int           // total attempts including the first; <= 0 means Default.Attempts
	Base     time.Duration // first back-off delay; <= 0 means Default.Base
	Max      time.Duration // cap for back-off and for server-requested delays; <= 0 means Default.Max
	// Sleep waits for d or until ctx is done. Nil means a timer; tests may
	// replace it to run without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Default mirrors huggingface_hub's http_backoff: 5 tries, 1 s doubling to 8 s.
var Default = Policy{Attempts: 5, Base: time.Second, Max: 8 * time.Second}

// transientError marks an error as safe to retry, optionally after a delay
// requested by the server.
type transientError struct {
	err   error
	after time.Duration
}

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Transient marks err as retryable. A nil err stays nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err}
}

// After marks err as retryable no sooner than d (a server's Retry-After).
func After(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err, after: d}
}

// IsTransient reports whether err was marked retryable, and the delay the
// server asked for (0 when none).
func IsTransient(err error) (bool, time.Duration) {
	var te *transientError
	if errors.As(err, &te) {
		return true, te.after
	}
	return false, 0
}

// Do calls op until it returns nil, an error not marked Transient, or the
// attempts are used up; ctx cancellation stops it at once. attempt counts from
// 1. The last error is returned, annotated with the attempt count when more
// than one attempt was made.
func (p Policy) Do(ctx context.Context, op func(attempt int) error) error {
	p = p.withDefaults()
	var err error
	for attempt := 1; ; attempt++ {
		if cerr := ctx.Err(); cerr != nil {
			if err != nil {
				return fmt.Errorf("%w (after %d attempts: %v)", cerr, attempt-1, err)
			}
			return cerr
		}
		err = op(attempt)
		if err == nil {
			return nil
		}
		ok, after := IsTransient(err)
		if !ok {
			return err
		}
		if attempt >= p.Attempts {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		d := p.Delay(attempt)
		if after > d {
			d = after
		}
		if d > p.Max {
			d = p.Max
		}
		if serr := p.Sleep(ctx, d); serr != nil {
			return fmt.Errorf("%w (after %d attempts: %v)", serr, attempt, err)
		}
	}
}

// Delay is the jittered back-off before attempt+1: Base·2^(attempt-1), capped
// at Max, then "equal jitter" (uniform in [d/2, d]).
func (p Policy) Delay(attempt int) time.Duration {
	p = p.withDefaults()
	d := p.Base
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	if d > p.Max {
		d = p.Max
	}
	half := d / 2
	return half + rand.N(half+1)
}

func (p Policy) withDefaults() Policy {
	if p.Attempts <= 0 {
		p.Attempts = Default.Attempts
	}
	if p.Base <= 0 {
		p.Base = Default.Base
	}
	if p.Max <= 0 {
		p.Max = Default.Max
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	return p
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// StatusRetryable reports whether an HTTP status is worth retrying for an
// idempotent request: 408, 429, 500, 502, 503, 504 (huggingface_hub
// utils/_http.py http_backoff retry_on_status_codes).
func StatusRetryable(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// ServerDelay returns the delay a response asks for: Retry-After (seconds or
// an HTTP date), else the "t=" of an IETF RateLimit header when its "r=" is 0
// (the Hub's `RateLimit: "api";r=0;t=166`, docs hub/rate-limits.md). Values
// are bounded to a day so a hostile header cannot stall a run forever.
func ServerDelay(h http.Header, now time.Time) (time.Duration, bool) {
	const maxDelay = 24 * time.Hour
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			if n > int64(maxDelay/time.Second) {
				return maxDelay, true
			}
			return time.Duration(n) * time.Second, true
		}
		if t, err := http.ParseTime(v); err == nil {
			d := t.Sub(now)
			if d < 0 {
				d = 0
			}
			return min(d, maxDelay), true
		}
	}
	if v := h.Get("RateLimit"); v != "" {
		var r, t int64 = -1, -1
		for _, part := range strings.Split(v, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
			if err != nil || n < 0 {
				continue
			}
			switch strings.TrimSpace(k) {
			case "r":
				r = n
			case "t":
				t = n
			}
		}
		if r == 0 && t >= 0 {
			if t > int64(maxDelay/time.Second) {
				return maxDelay, true
			}
			return time.Duration(t+1) * time.Second, true
		}
	}
	return 0, false
}

// NetworkError reports whether err is a transport failure (reset, refused,
// timeout, truncated body) rather than an answer from the server. For an
// idempotent request such an error is Transient; for a non-idempotent one it
// means "outcome unknown".
func NetworkError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}
