package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
)

var errResponseTimeout = errors.New("no response headers within the response timeout")

// maxHeldBody bounds the body of a 5xx/429 answer kept to relay when every attempt fails.
const maxHeldBody = 64 << 10

// held is a refused upstream answer (5xx or 429), relayed to the client if no other replica does better.
type held struct {
	code   int
	header http.Header
	body   []byte
}

// step is what one attempt left to do.
type step int

const (
	stepDone  step = iota // the client has its answer (or is gone)
	stepRetry             // nothing reached the client; try another replica
)

func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request) {
	// The body is buffered so attempts can replay it: it grows with the bytes that arrive (never from the
	// declared Content-Length) and counts against the gateway-wide body budget until the request is done.
	body, release, err := httpx.ReadBody(r, g.o.MaxBodyBytes, g.budget)
	defer release()
	if err != nil {
		if !httpx.ClientGone(r, err) {
			httpx.Reject(w, r, httpx.BodyError(err, g.o.HTTP.WithDefaults().ReadTimeout))
		}
		return
	}
	rq := &routeReq{tried: map[*replica]bool{}, loadOnly: routingOverride(r)}
	r.Header.Del(RoutingHeader)
	switch {
	case r.Method != http.MethodPost:
	case g.o.Affinity.Mode == AffinityOff:
		// Routed by load: the body is read only for its model, when replicas serve different ones.
		if g.pool.modelRouting(time.Now()) {
			rq.model = requestModel(body)
		}
	default:
		k, apiErr := keyOf(body, r.URL.Path, &g.o.Affinity)
		if apiErr != nil {
			httpx.WriteError(w, apiErr)
			return
		}
		if k.ok {
			rq.key, rq.sharedBytes = k.key, k.shared
		}
		rq.bytes = k.total
		if g.pool.modelRouting(time.Now()) {
			rq.model = k.model
			if len(body) > MaxKeyedBody {
				rq.model = requestModel(body)
			}
		}
	}
	ctx := r.Context()
	var last *held
	for attempt := 1; attempt <= g.o.MaxAttempts; attempt++ {
		l, err := g.pool.acquire(ctx, rq)
		if err != nil {
			if ctx.Err() != nil {
				return // the client left while queued
			}
			if last != nil {
				writeHeld(w, last)
				return
			}
			g.refuse(w, err)
			return
		}
		if attempt > 1 {
			g.m.retry()
		}
		s, h, detail := g.attempt(w, r, l, body)
		if s == stepDone {
			return
		}
		rq.tried[l.r] = true
		if h != nil {
			last = h
		}
		g.o.Logger.Info("attempt failed", "replica", l.r.conf().Name, "attempt", attempt, "error", detail)
	}
	if last != nil {
		writeHeld(w, last)
		return
	}
	// Details (addresses, errors) go to the log and /metrics, not to clients.
	httpx.WriteError(w, httpx.NewError(http.StatusBadGateway, httpx.TypeServer, "upstream_failed", "",
		"No replica answered after %d attempts.", g.o.MaxAttempts))
}

// refuse answers a request that got no slot.
func (g *Gateway) refuse(w http.ResponseWriter, err error) {
	live, _, _, _, _ := g.pool.capacity(time.Now())
	switch {
	case errors.Is(err, errClosed):
		httpx.WriteError(w, httpx.NewError(http.StatusServiceUnavailable, httpx.TypeServer, "shutting_down", "", "The gateway is shutting down."))
	case live == 0:
		e := httpx.NewError(http.StatusServiceUnavailable, httpx.TypeServer, "no_replica", "", "No replica is available; retry later.")
		e.RetryAfter = 5 * time.Second
		httpx.WriteError(w, e)
	default:
		g.m.reject()
		e := httpx.NewError(http.StatusTooManyRequests, httpx.TypeRateLimit, "queue_full", "", "All replica slots are busy (%v); retry later.", err)
		e.RetryAfter = time.Second
		httpx.WriteError(w, e)
	}
}

// attempt sends the request to rep. It returns stepRetry when nothing reached the client, with the refused
// answer (if any) and a description of the failure.
func (g *Gateway) attempt(w http.ResponseWriter, r *http.Request, l *lease, body []byte) (step, *held, string) {
	rep := l.r
	ctx := r.Context()
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	req, err := g.upstreamRequest(actx, r, rep, body)
	if err != nil {
		g.pool.release(l, outFailure, err.Error(), 0, 0, usage{})
		return stepRetry, nil, err.Error()
	}
	var timer *time.Timer
	if g.o.ResponseTimeout > 0 {
		timer = time.AfterFunc(g.o.ResponseTimeout, func() { cancel(errResponseTimeout) })
	}
	resp, err := g.rt.RoundTrip(req)
	if timer != nil && !timer.Stop() && err == nil {
		// The timer fired as the headers arrived: the attempt context is cancelled, so drop this answer.
		resp.Body.Close()
		err = errResponseTimeout
	}
	if err != nil {
		if ctx.Err() != nil {
			g.pool.release(l, outCanceled, "", 0, 0, usage{})
			return stepDone, nil, ""
		}
		o := outDown
		if errors.Is(err, errResponseTimeout) || errors.Is(context.Cause(actx), errResponseTimeout) {
			err, o = errResponseTimeout, outFailure // slow, not gone: the breaker counts it, health decides
		}
		detail := unwrapURLError(err).Error()
		g.pool.release(l, o, detail, 0, 0, usage{})
		return stepRetry, nil, detail
	}
	ttfb := time.Since(start)
	code := resp.StatusCode
	if code >= 500 || code == http.StatusTooManyRequests {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxHeldBody))
		resp.Body.Close()
		o := outFailure
		if code == http.StatusTooManyRequests {
			o = outOverload
		}
		detail := fmt.Sprintf("status %d", code)
		g.pool.release(l, o, detail, code, ttfb, usage{})
		return stepRetry, &held{code: code, header: resp.Header, body: b}, detail
	}
	defer resp.Body.Close()
	if isEventStream(resp.Header) {
		o, detail, u := g.stream(w, resp)
		g.pool.release(l, o, detail, code, ttfb, u)
		return stepDone, nil, ""
	}
	// Hold back the answer until it is complete (or large): a replica dying mid-body is then retried.
	limit := g.o.MaxBufferedResponse
	if resp.ContentLength >= 0 && resp.ContentLength <= limit {
		limit = resp.ContentLength
	}
	var buf bytes.Buffer
	if resp.ContentLength > 0 && resp.ContentLength <= g.o.MaxBufferedResponse {
		buf.Grow(int(resp.ContentLength))
	}
	_, err = io.Copy(&buf, io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			g.pool.release(l, outCanceled, "", code, ttfb, usage{})
			return stepDone, nil, ""
		}
		detail := "reading the answer: " + err.Error()
		g.pool.release(l, outFailure, detail, code, ttfb, usage{})
		return stepRetry, nil, detail
	}
	complete := int64(buf.Len()) <= limit
	if complete {
		// The replica is done: free its slot before the client is answered, so that the client's next request
		// finds it free.
		var u usage
		if code == http.StatusOK {
			u = parseUsage(buf.Bytes())
		}
		g.pool.release(l, outSuccess, "", code, ttfb, u)
	}
	copyHeader(w.Header(), resp.Header)
	if complete {
		w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	} else {
		w.Header().Del("Content-Length")
	}
	w.WriteHeader(code)
	if _, err := w.Write(buf.Bytes()); err != nil {
		if !complete {
			g.pool.release(l, outCanceled, "", code, ttfb, usage{})
		}
		return stepDone, nil, ""
	}
	if complete {
		return stepDone, nil, ""
	}
	_, err = io.Copy(w, resp.Body)
	switch {
	case err == nil:
		g.pool.release(l, outSuccess, "", code, ttfb, usage{})
	case ctx.Err() != nil:
		g.pool.release(l, outCanceled, "", code, ttfb, usage{})
	default:
		g.pool.release(l, outFailure, "reading the answer: "+err.Error(), code, ttfb, usage{})
		panic(http.ErrAbortHandler) // bytes were sent: the client must see a broken answer, not a short one
	}
	return stepDone, nil, ""
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// stream relays Server-Sent Events as they arrive, flushing after every read, and collects the usage the
// replica reports in them.
func (g *Gateway) stream(w http.ResponseWriter, resp *http.Response) (outcome, string, usage) {
	copyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var tail [2]byte // the last two bytes sent, to know whether we are between events
	var su sseUsage
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			su.write(buf[:n])
			if _, err := w.Write(buf[:n]); err != nil {
				return outCanceled, "", usage{}
			}
			if err := rc.Flush(); err != nil {
				return outCanceled, "", usage{}
			}
			if n >= 2 {
				tail = [2]byte{buf[n-2], buf[n-1]}
			} else {
				tail = [2]byte{tail[1], buf[0]}
			}
		}
		if rerr == io.EOF {
			su.endLine()
			return outSuccess, "", su.u
		}
		if rerr != nil {
			if resp.Request != nil && resp.Request.Context().Err() != nil {
				return outCanceled, "", usage{}
			}
			detail := "stream broke: " + rerr.Error()
			if tail == [2]byte{'\n', '\n'} {
				// Between events: end with an OpenAI-shaped error event that clients surface.
				b, _ := json.Marshal(httpx.ErrorBody(httpx.NewError(http.StatusBadGateway, httpx.TypeServer, "upstream_failed", "",
					"The replica serving this stream failed; the answer is incomplete.")))
				_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
				_ = rc.Flush()
				return outFailure, detail, usage{}
			}
			return outFailure, detail, usage{}
		}
	}
}

// upstreamRequest builds the request to rep: same method, path, query and headers, minus hop-by-hop headers
// and the client's credentials (replaced by the replica's key).
func (g *Gateway) upstreamRequest(ctx context.Context, r *http.Request, rep *replica, body []byte) (*http.Request, error) {
	u := *rep.base
	u.Path = rep.base.Path + r.URL.Path
	u.RawPath = ""
	if r.URL.RawPath != "" {
		u.RawPath = rep.base.EscapedPath() + r.URL.RawPath
	}
	u.RawQuery = r.URL.RawQuery
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	copyHeader(req.Header, r.Header)
	req.Header.Del("Authorization")
	if rep.conf().APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+rep.conf().APIKey)
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		req.Header.Set("X-Forwarded-For", ip)
	}
	return req, nil
}

// hopHeaders are meaningful for one connection only (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = append(dst[k][:0:0], vv...)
	}
	for _, f := range src.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			if k = strings.TrimSpace(k); k != "" {
				dst.Del(k)
			}
		}
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
}

func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// requestModel returns the "model" field of a JSON body, or "".
func requestModel(body []byte) string {
	var m struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	return m.Model
}

func writeHeld(w http.ResponseWriter, h *held) {
	for _, k := range []string{"Content-Type", "Retry-After"} {
		if v := h.header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(h.body)))
	w.WriteHeader(h.code)
	_, _ = w.Write(h.body)
}

// unwrapURLError drops net/url's "Post \"http://...\":" prefix, which would repeat the URL in every message.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
