package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
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
	// RequestTimeout bounds a request from arrival to its last byte,
	// queueing included; 0 means 10 minutes.
	RequestTimeout time.Duration
	// RetryAfter is the Retry-After sent with 429; 0 means 1 s.
	RetryAfter time.Duration
	// MaxBodyBytes bounds request bodies; 0 means 16 MiB.
	MaxBodyBytes int64
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
// Handler().
type Server struct {
	o       Options
	engine  atomic.Pointer[engineBox]
	created int64
	m       *metrics
	apiKey  [32]byte

	mu      sync.Mutex
	slots   chan struct{}
	queued  int
	busy    int
	limit   int // slots + queue
	nslots  int
	handler http.Handler
}

type engineBox struct{ e engine.Engine }

// New returns a Server without an engine.
func New(o Options) *Server {
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 10 * time.Minute
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.Sampling == nil {
		d := engine.DefaultSampling()
		o.Sampling = &d
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, created: time.Now().Unix(), m: newMetrics()}
	if o.APIKey != "" {
		s.apiKey = sha256.Sum256([]byte(o.APIKey))
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
		writeError(w, &APIError{Status: http.StatusNotFound, Type: "invalid_request_error",
			Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	s.handler = s.wrap(mux)
	return s
}

// SetEngine makes the server ready to serve e.
func (s *Server) SetEngine(e engine.Engine) {
	n := s.o.Parallel
	if n <= 0 {
		n = max(e.Info().Parallel, 1)
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
	s.engine.Store(&engineBox{e})
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx ends, then shuts down gracefully (waiting up
// to 10 s for running requests).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: 30 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

// wrap adds authentication, body limits, metrics and logging.
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
			s.m.request(endpoint, sw.Code, time.Since(start))
			s.o.Logger.Info("request", "method", r.Method, "path", r.URL.Path, "status", sw.Code,
				"duration", time.Since(start).Round(time.Millisecond))
		}()
		if s.o.APIKey != "" && endpoint != "/health" && endpoint != "/v1/health" && !s.authorized(r) {
			writeError(sw, &APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error",
				Code: strp("invalid_api_key"), Message: "Incorrect or missing API key: send Authorization: Bearer <key>."})
			return
		}
		r.Body = http.MaxBytesReader(sw, r.Body, s.o.MaxBodyBytes)
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

// authorized compares the bearer token in constant time (hashes of equal
// length, so the key's length does not leak either).
func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(h[len(prefix):])))
	return subtle.ConstantTimeCompare(got[:], s.apiKey[:]) == 1
}

func (s *Server) currentEngine() engine.Engine {
	if b := s.engine.Load(); b != nil {
		return b.e
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
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

type modelObject struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	OwnedBy string            `json:"owned_by"`
	Meta    *engine.ModelInfo `json:"meta,omitempty"`
}

func (s *Server) modelObjects() []modelObject {
	e := s.currentEngine()
	if e == nil {
		return []modelObject{}
	}
	info := e.Info()
	out := []modelObject{{ID: info.ID, Object: "model", Created: s.created, OwnedBy: "phonellm", Meta: &info}}
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
	writeError(w, modelNotFound(id))
}

func modelNotFound(id string) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found"),
		Message: fmt.Sprintf("The model %q does not exist.", id)}
}

// checkModel returns the engine serving name, or an error.
func (s *Server) checkModel(name string) (engine.Engine, *APIError) {
	e := s.currentEngine()
	if e == nil {
		return nil, &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: strp("model_loading"),
			Message: "The model is still loading."}
	}
	if name == "" || name == e.Info().ID {
		return e, nil
	}
	for _, a := range s.o.Aliases {
		if a == name {
			return e, nil
		}
	}
	return nil, modelNotFound(name)
}

// acquire admits a request: a free slot, or a place in the queue until one
// frees up. It returns a release function, or an error (429 when the queue
// is full, the context's error when it ends first).
func (s *Server) acquire(ctx context.Context) (func(), time.Duration, *APIError) {
	start := time.Now()
	s.mu.Lock()
	if s.busy+s.queued >= s.limit {
		s.mu.Unlock()
		return nil, 0, &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: strp("queue_full"),
			Message: fmt.Sprintf("All %d slots are busy and the queue is full; retry later.", s.nslots)}
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

func contextError(ctx context.Context) *APIError {
	if errors.Is(context.Cause(ctx), errRequestTimeout) {
		return &APIError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: strp("timeout"),
			Message: "The request timed out."}
	}
	// The client went away; nobody reads this.
	return &APIError{Status: 499, Type: "server_error", Code: strp("cancelled"), Message: "The request was cancelled."}
}

var errRequestTimeout = errors.New("request timeout")

func (s *Server) writeRetryAfter(w http.ResponseWriter) {
	secs := int(s.o.RetryAfter.Round(time.Second) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
}

func decodeBody(r *http.Request, v any) *APIError {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &APIError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
				Message: fmt.Sprintf("request body larger than %d bytes", mbe.Limit)}
		}
		return badRequest("", "invalid_json", "We could not parse the JSON body of your request: %v", err)
	}
	if dec.More() {
		return badRequest("", "invalid_json", "unexpected data after the JSON body")
	}
	return nil
}
