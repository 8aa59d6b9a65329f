package httpx

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Budget bounds the request-body bytes a server holds in memory at once, over all requests: a thousand
// clients each sending a body just under the per-request limit must not add up to gigabytes. Bytes are
// reserved as buffers grow (never from a declared Content-Length) and released when the request is done with
// its body. A nil *Budget is unlimited.
type Budget struct {
	mu        sync.Mutex
	max, used int64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

func (b *Budget) take(n int64) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *Budget) give(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// Used returns the bytes reserved now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// ErrBusy means the body budget is spent: the server holds as many request bodies as it may.
var ErrBusy = errors.New("httpx: request bodies in memory at their limit")

// ReadBody reads r's body, at most limit bytes. The buffer grows with the bytes that arrive, each growth
// reserved from budget (nil: unlimited), so a client declaring a huge Content-Length and sending one byte
// costs one small buffer. A declared length above limit fails at once. Errors: *http.MaxBytesError (too
// large), ErrBusy (budget spent), or the read error (a net.Error timeout when the body is too slow). release
// returns the reserved bytes to the budget; call it when the body is no longer needed (it is never nil).
func ReadBody(r *http.Request, limit int64, budget *Budget) (body []byte, release func(), err error) {
	var reserved int64
	var once sync.Once
	release = func() { once.Do(func() { budget.give(reserved) }) }
	if r.Body == nil || r.Body == http.NoBody {
		return nil, release, nil
	}
	if r.ContentLength > limit {
		return nil, release, &http.MaxBytesError{Limit: limit}
	}
	const first = 4 << 10
	src := io.LimitReader(r.Body, limit+1)
	buf := []byte(nil)
	for {
		if len(buf) == cap(buf) {
			want := min(max(2*int64(cap(buf)), first), limit+1)
			grow := want - int64(cap(buf))
			if !budget.take(grow) {
				return nil, release, ErrBusy
			}
			reserved += grow
			nb := make([]byte, len(buf), want)
			copy(nb, buf)
			buf = nb
		}
		n, rerr := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, release, &http.MaxBytesError{Limit: limit}
		}
		if rerr == io.EOF {
			return buf, release, nil
		}
		if rerr != nil {
			return nil, release, rerr
		}
	}
}

// ClientGone reports whether a ReadBody error means the client went away (nobody reads an answer then). A
// read timeout is not that, although net/http cancels the request's context for it too: the slow client
// gets its 408.
func ClientGone(r *http.Request, err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return r.Context().Err() != nil
}

// BodyError turns a ReadBody error into the answer for the client.
func BodyError(err error, readTimeout time.Duration) *Error {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return NewError(http.StatusRequestEntityTooLarge, TypeInvalidRequest, "body_too_large", "",
			"request body larger than %d bytes", mbe.Limit)
	case errors.Is(err, ErrBusy):
		e := NewError(http.StatusTooManyRequests, TypeRateLimit, "server_busy", "",
			"The server holds as many request bodies as it may; retry later.")
		e.RetryAfter = time.Second
		return e
	case errors.As(err, &ne) && ne.Timeout():
		msg := "request body not received in time"
		if readTimeout > 0 {
			msg = fmt.Sprintf("request body not received within %v", readTimeout)
		}
		return NewError(http.StatusRequestTimeout, TypeInvalidRequest, "timeout", "", "%s", msg)
	}
	return NewError(http.StatusBadRequest, TypeInvalidRequest, "bad_body", "", "could not read the request body")
}
