package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/runtime/engine"
)

// Options configure a Server. The zero value is usable.
type Options struct {
	// APIKey, when set, is required as "Authorization: Bearer KEY" on every
	// endpoint except /health.
	APIKey string
	// Parallel is the number of requests generating at once; 0 means the
	// engine's Info().Parallel.
	Parallel int
	// QueueSize is how many requests may wait for a slot; more get 429 with
	// Retry-After. 0 means 4×Parallel; negative means no queue.
	QueueSize int
	// RequestTimeout bounds a request from arrival to its last byte: reading
	// its body, templating and tokenizing, queueing and generating. 0 means
	// 10 minutes.
	RequestTimeout time.Duration
	// RetryAfter is the Retry-After sent with 429; 0 means 1 s.
	RetryAfter time.Duration
	// Limits bound what one request may make the server do before it takes
	// a slot; zero fields follow the model's context length.
	Limits Limits
	// HTTP holds the connection-level limits Serve applies (timeouts,
	// header size, connection cap); zero fields take httpx's defaults.
	HTTP httpx.ServerOptions
	// Sampling holds the defaults for fields a request leaves out; nil
	// means engine.DefaultSampling().
	Sampling *engine.SamplingParams
	// EnableThinking, when not nil, is the chat template's enable_thinking
	// for requests whose chat_template_kwargs do not set it (Qwen3 and
	// Qwen3.5 templates read it).
	EnableThinking *bool
	// Aliases are extra model names accepted besides the engine's ID.
	Aliases []string
	// Logger receives one line per request; nil discards.
	Logger *slog.Logger
}

// Server serves an Engine over OpenAI's HTTP API. Create it with New, make
// it ready with SetEngine (GET /health says "loading" until then) and serve
// Handler() (or call Serve, which adds the connection-level limits).
type Server struct {
	o       Options
	engine  atomic.Pointer[engineBox]
	created int64
	m       *metrics
	keys    *httpx.Keys
	budget  *httpx.Budget
	prep    chan struct{} // one token per request decoding, templating or tokenizing
	cache   *constraintCache

	mu       sync.Mutex
	slots    chan struct{}
	queued   int // waiting for a slot
	busy     int // holding a slot
	limit    int // slots + queue
	nslots   int
	handler  http.Handler
	inflight int // generation requests anywhere between arrival and their answer (for tests and checks)
}

type engineBox struct {
	e   engine.Engine
	lim Limits // o.Limits with the engine's defaults filled in

	formMu    sync.Mutex
	form      callForm // how the model's template writes tool calls
	formKnown bool
}

// callForm returns how the model's template writes tool calls, finding
// out on first use (detectCallForm).
func (b *engineBox) callForm(ctx context.Context) (callForm, error) {
	b.formMu.Lock()
	defer b.formMu.Unlock()
	if b.formKnown {
		return b.form, nil
	}
	f, err := detectCallForm(ctx, b.e)
	if err != nil {
		return f, err
	}
	b.form, b.formKnown = f, true
	return f, nil
}

// New returns a Server without an engine.
func New(o Options) *Server {
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 10 * time.Minute
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.Sampling == nil {
		d := engine.DefaultSampling()
		o.Sampling = &d
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Limits.PrepWorkers <= 0 {
		o.Limits.PrepWorkers = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if o.Limits.BodyBudget <= 0 {
		o.Limits.BodyBudget = DefaultBodyBudget
	}
	s := &Server{o: o, created: time.Now().Unix(), m: newMetrics(),
		budget: httpx.NewBudget(o.Limits.BodyBudget), prep: make(chan struct{}, o.Limits.PrepWorkers),
		cache: newConstraintCache()}
	if o.APIKey != "" {
		k, err := httpx.NewKeys(o.APIKey)
		if err != nil {
			k = httpx.DenyAll() // a key nobody can send (surrounding spaces): refuse everyone, never no one
		}
		s.keys = k
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("GET /metrics", s.metrics)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /v1/models/{id}", s.model)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.Reject(w, r, httpx.NotFound(r))
	})
	s.handler = s.wrap(mux)
	return s
}

// SetEngine makes the server ready to serve e.
func (s *Server) SetEngine(e engine.Engine) {
	info := e.Info()
	n := s.o.Parallel
	if n <= 0 {
		n = max(info.Parallel, 1)
	}
	q := s.o.QueueSize
	switch {
	case q == 0:
		q = 4 * n
	case q < 0:
		q = 0
	}
	s.mu.Lock()
	s.slots = make(chan struct{}, n)
	s.nslots = n
	s.limit = n + q
	s.mu.Unlock()
	s.engine.Store(&engineBox{e: e, lim: s.o.Limits.forContext(info.ContextLength)})
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx ends, then shuts down gracefully (requests
// in flight get Options.HTTP.ShutdownTimeout, 10 s by default), with the
// connection-level limits of Options.HTTP: header, body, idle and per-write
// timeouts, a header size cap and a cap on open connections.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	o := s.o.HTTP
	if o.ErrorLog == nil {
		o.ErrorLog = slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelWarn) // net/http's own complaints
	}
	return httpx.Serve(ctx, ln, s.handler, o)
}

// wrap adds authentication, metrics and logging.
func (s *Server) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &httpx.StatusWriter{ResponseWriter: w}
		endpoint := r.URL.Path
		if strings.HasPrefix(endpoint, "/v1/models/") {
			endpoint = "/v1/models/{id}"
		}
		defer func() {
			if endpoint == "/health" || endpoint == "/metrics" || endpoint == "/v1/health" {
				return
			}
			if !knownEndpoint(endpoint) {
				endpoint = "other"
			}
			code := sw.Code
			if code == 0 {
				code = 499 // the client left before an answer
			}
			s.m.request(endpoint, code, time.Since(start))
			s.o.Logger.Info("request", "method", r.Method, "path", endpoint, "status", code,
				"duration", time.Since(start).Round(time.Millisecond))
		}()
		if s.keys.Enabled() && endpoint != "/health" && endpoint != "/v1/health" && !s.keys.Authorized(r) {
			httpx.Reject(sw, r, httpx.Unauthorized())
			return
		}
		next.ServeHTTP(sw, r)
	})
}

func knownEndpoint(p string) bool {
	switch p {
	case "/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/{id}":
		return true
	}
	return false
}

func (s *Server) current() *engineBox { return s.engine.Load() }

func (s *Server) currentEngine() engine.Engine {
	if b := s.current(); b != nil {
		return b.e
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if s.currentEngine() == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"loading"}` + "\n"))
		return
	}
	s.mu.Lock()
	busy, queued, n := s.busy, s.queued, s.nslots
	s.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "slots_idle": n - busy, "slots_processing": busy, "queued": queued})
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	queued, busy, n := s.queued, s.busy, s.nslots
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.m.write(w, queued, busy, n, s.currentEngine() != nil)
}

// modelObject is OpenAI's model object. It says nothing about the machine:
// no file path, no engine settings.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) modelObjects() []modelObject {
	e := s.currentEngine()
	if e == nil {
		return []modelObject{}
	}
	out := []modelObject{{ID: e.Info().ID, Object: "model", Created: s.created, OwnedBy: "phonellm"}}
	for _, a := range s.o.Aliases {
		out = append(out, modelObject{ID: a, Object: "model", Created: s.created, OwnedBy: "phonellm"})
	}
	return out
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": s.modelObjects()})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, m := range s.modelObjects() {
		if m.ID == id {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(m)
			return
		}
	}
	httpx.WriteError(w, modelNotFound(id))
}

func modelNotFound(id string) *httpx.Error {
	return httpx.NewError(http.StatusNotFound, httpx.TypeInvalidRequest, "model_not_found", "model",
		"The model %q does not exist.", httpx.CapText(id, 256))
}

func modelLoading() *httpx.Error {
	return httpx.NewError(http.StatusServiceUnavailable, httpx.TypeServer, "model_loading", "", "The model is still loading.")
}

// checkModel checks that name is served by b.
func (s *Server) checkModel(b *engineBox, name string) *httpx.Error {
	if name == "" || name == b.e.Info().ID {
		return nil
	}
	for _, a := range s.o.Aliases {
		if a == name {
			return nil
		}
	}
	return modelNotFound(name)
}

// enter refuses a generation request at once, before its body is read or
// tokenized, when every slot and the queue are taken, and otherwise counts
// it until leave. Requests still reading their body or waiting to be
// prepared do not take a queue place (a few slow clients must not lock the
// others out); they are bounded by the body budget, the connection cap and
// the timeouts, and take their place in acquire.
func (s *Server) enter() (leave func(), apiErr *httpx.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy+s.queued >= s.limit {
		return nil, s.queueFull()
	}
	s.inflight++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.inflight--
			s.mu.Unlock()
		})
	}, nil
}

func (s *Server) queueFull() *httpx.Error {
	e := httpx.NewError(http.StatusTooManyRequests, httpx.TypeRateLimit, "queue_full", "",
		"All %d slots are busy and the queue is full; retry later.", s.nslots)
	e.RetryAfter = s.o.RetryAfter
	return e
}

// acquire admits a request: a free slot, or a place in the queue until one
// frees up. It returns a release function, or an error (429 when the queue
// is full, the context's error when it ends first).
func (s *Server) acquire(ctx context.Context) (func(), time.Duration, *httpx.Error) {
	start := time.Now()
	s.mu.Lock()
	if s.busy+s.queued >= s.limit {
		s.mu.Unlock()
		return nil, 0, s.queueFull()
	}
	s.queued++
	slots := s.slots
	s.mu.Unlock()
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		s.mu.Lock()
		s.queued--
		s.mu.Unlock()
		return nil, 0, contextError(ctx)
	}
	s.mu.Lock()
	s.queued--
	s.busy++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.busy--
			s.mu.Unlock()
			<-slots
		})
	}, time.Since(start), nil
}

// contextError is the answer for a request whose context ended: its timeout
// (504), or the client leaving (nobody reads that one).
func contextError(ctx context.Context) *httpx.Error {
	if errors.Is(context.Cause(ctx), errRequestTimeout) {
		return httpx.NewError(http.StatusGatewayTimeout, httpx.TypeServer, "timeout", "", "The request timed out.")
	}
	return httpx.NewError(499, httpx.TypeServer, "cancelled", "", "The request was cancelled.")
}

var errRequestTimeout = errors.New("request timeout")

func serverError(code, format string, args ...any) *httpx.Error {
	return httpx.NewError(http.StatusInternalServerError, httpx.TypeServer, code, "", format, args...)
}

// String renders the limits for logs.
func (l Limits) String() string {
	return fmt.Sprintf("body %d B, prompt %d B, %d messages, %d prep workers", l.MaxBodyBytes, l.MaxPromptBytes, l.MaxMessages, l.PrepWorkers)
}
