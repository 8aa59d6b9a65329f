package hubtest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"
)

// Op names a kind of request the fake serves.
type Op string

// The operations, in the order a publish meets them.
const (
	OpWhoAmI    Op = "whoami"
	OpCreate    Op = "create"
	OpBranch    Op = "branch"
	OpPreupload Op = "preupload"
	OpBatch     Op = "batch"
	OpPutBasic  Op = "put-basic"
	OpPutPart   Op = "put-part"
	OpComplete  Op = "complete"
	OpVerify    Op = "verify"
	OpCommit    Op = "commit"
	OpRevision  Op = "revision"
	OpTree      Op = "tree"
	OpResolve   Op = "resolve"
	OpCDN       Op = "cdn"
	OpUnknown   Op = "unknown"
)

// FaultKind is what an injected fault does.
type FaultKind int

const (
	// FaultStatus answers Status (default 503) without doing anything,
	// with Retry-After when RetryAfter > 0.
	FaultStatus FaultKind = iota
	// FaultRateLimit answers 429 with `RateLimit: "api";r=0;t=N` and
	// RateLimit-Policy headers (docs hub/rate-limits.md).
	FaultRateLimit
	// FaultHang holds the request without answering until the client gives
	// up (or Config.HangMax); nothing takes effect.
	FaultHang
	// FaultDrop closes the connection before the request takes effect.
	FaultDrop
	// FaultDropAfter lets the request take effect, then closes the
	// connection instead of answering (a commit that landed while the client
	// timed out; a part stored whose ETag never arrived).
	FaultDropAfter
	// FaultExpired answers 403 "Request has expired" on a presigned URL.
	FaultExpired
	// FaultTruncate (downloads) sends the headers and half the body, then
	// closes the connection.
	FaultTruncate
	// FaultIgnoreRange (downloads) answers 200 with the whole body to a
	// Range request.
	FaultIgnoreRange
	// FaultCorrupt (downloads) flips one byte of the body.
	FaultCorrupt
	// FaultStall (downloads) sends the headers and half the body, then
	// holds the connection open without sending more until the client gives
	// up (or Config.HangMax).
	FaultStall
	// FaultRedirect answers Status (default 307, which keeps the method and
	// the body) with Location: Fault.Location + the request's path and query,
	// doing nothing itself. Location may be another origin (Hub.AltURL, or a
	// host name the client resolves to it) to test that credentials do not
	// follow, or the Hub's own URL.
	FaultRedirect
)

var faultNames = map[FaultKind]string{
	FaultStatus: "status", FaultRateLimit: "ratelimit", FaultHang: "hang", FaultDrop: "drop",
	FaultDropAfter: "drop-after", FaultExpired: "expired", FaultTruncate: "truncate",
	FaultIgnoreRange: "ignore-range", FaultCorrupt: "corrupt", FaultStall: "stall", FaultRedirect: "redirect",
}

func (k FaultKind) String() string {
	if s, ok := faultNames[k]; ok {
		return s
	}
	return "fault(" + strconv.Itoa(int(k)) + ")"
}

// Fault is an injected failure for requests of one Op.
type Fault struct {
	Op   Op
	Kind FaultKind
	// Part selects part PUTs: 0 any part, n > 0 part n, -1 the last part.
	Part       int
	Status     int           // for FaultStatus (default 503) and FaultRedirect (default 307)
	Location   string        // for FaultRedirect: the base URL redirected to
	RetryAfter time.Duration // Retry-After / RateLimit t= to announce
	Skip       int           // let this many matching requests pass first
	Times      int           // fire this many times (0 means 1; -1 forever)
	fired      int
}

func (f *Fault) String() string {
	s := fmt.Sprintf("%s@%s", f.Kind, f.Op)
	if f.Part != 0 {
		s += fmt.Sprintf("#part%d", f.Part)
	}
	return s
}

// Inject adds a fault; faults are matched in the order injected.
func (h *Hub) Inject(f Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.Times == 0 {
		f.Times = 1
	}
	h.faults = append(h.faults, &f)
}

// ClearFaults removes all pending faults.
func (h *Hub) ClearFaults() {
	h.mu.Lock()
	h.faults = nil
	h.mu.Unlock()
}

// PendingFaults returns how many injected faults have not fired fully.
func (h *Hub) PendingFaults() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, f := range h.faults {
		if f.Times < 0 || f.fired < f.Times {
			n++
		}
	}
	return n
}

// takeFault returns the fault to apply to a request, if any.
func (h *Hub) takeFault(op Op, part, lastPart int) *Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.faults {
		if f.Op != op || (f.Times >= 0 && f.fired >= f.Times) {
			continue
		}
		if f.Part > 0 && f.Part != part || f.Part == -1 && (part == 0 || part != lastPart) {
			continue
		}
		if f.Skip > 0 {
			f.Skip--
			continue
		}
		f.fired++
		return f
	}
	return nil
}

// applyFault runs handler under fault f. It reports whether the request was
// fully handled (true) or whether the caller should run handler normally
// (false, for download faults the handler applies itself).
func (h *Hub) applyFault(f *Fault, w http.ResponseWriter, r *http.Request, handler http.HandlerFunc) bool {
	switch f.Kind {
	case FaultStatus:
		st := f.Status
		if st == 0 {
			st = http.StatusServiceUnavailable
		}
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((f.RetryAfter+time.Second-1)/time.Second)))
		}
		hubError(w, st, "", fmt.Sprintf("injected %d", st))
	case FaultRateLimit:
		t := int((f.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("RateLimit", fmt.Sprintf(`"api";r=0;t=%d`, t))
		w.Header().Set("RateLimit-Policy", `"fixed window";"api";q=1000;w=300`)
		hubError(w, http.StatusTooManyRequests, "", "You have exceeded our rate limit (injected)")
	case FaultHang:
		// Drain the body so the server notices when the client hangs up.
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<30))
		select {
		case <-r.Context().Done():
		case <-h.done:
		case <-time.After(h.cfg.HangMax):
		}
		panic(http.ErrAbortHandler)
	case FaultDrop:
		panic(http.ErrAbortHandler)
	case FaultDropAfter:
		rec := httptest.NewRecorder()
		handler(rec, r)
		panic(http.ErrAbortHandler)
	case FaultExpired:
		s3Error(w, http.StatusForbidden, "AccessDenied", "Request has expired")
	case FaultRedirect:
		st := f.Status
		if st == 0 {
			st = http.StatusTemporaryRedirect
		}
		w.Header().Set("Location", strings.TrimRight(f.Location, "/")+r.URL.RequestURI())
		w.WriteHeader(st)
	default:
		return false
	}
	return true
}

// statusWriter records the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
