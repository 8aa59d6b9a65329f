package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
)

// DefaultAddr is where ListenAndServe binds when given no address: loopback only.
const DefaultAddr = "127.0.0.1:8090"

// Replica is one upstream server.
type Replica struct {
	// URL is the base URL (http or https); the OpenAI API is under URL + "/v1".
	URL string `json:"url"`
	// Slots is how many requests the replica serves at once; 0 learns it from the replica.
	Slots int `json:"slots,omitempty"`
	// APIKey is sent to the replica as "Authorization: Bearer <key>" (never logged, never in metrics).
	APIKey string `json:"-"`
	// Name labels the replica in metrics and logs; default: the URL's host.
	Name string `json:"name,omitempty"`
}

// Options configure a Gateway. The zero value is usable: no client auth, defaults below.
type Options struct {
	// APIKeys are the client keys accepted as "Authorization: Bearer <key>" on every endpoint but /health.
	// Empty means no authentication.
	APIKeys []string
	// HealthInterval is the time between probes of one replica (default 2 s); HealthTimeout bounds a probe
	// (default 2 s).
	HealthInterval, HealthTimeout time.Duration
	// ModelsInterval is how often a live replica's /v1/models is refreshed (default 30 s).
	ModelsInterval time.Duration
	// FailureThreshold is the number of consecutive failures that eject a replica (default 3).
	FailureThreshold int
	// EjectBase is the first ejection period (default 5 s); it doubles per consecutive ejection up to
	// EjectMax (default 2 min).
	EjectBase, EjectMax time.Duration
	// MaxAttempts bounds the replicas one request is tried on (default 3).
	MaxAttempts int
	// MaxBodyBytes bounds request bodies, which are buffered for replay (default 16 MiB).
	MaxBodyBytes int64
	// BodyBudget bounds the request bodies buffered at once over all requests (default 256 MiB); a request
	// that would exceed it gets 429.
	BodyBudget int64
	// RateLimit is how many requests per second one client may send, sustained: a token bucket per API key,
	// or per client address (IPv6: per /64) when the gateway has no keys. 0 means DefaultRateLimit; negative
	// switches rate limiting off. Requests over the limit get 429 with Retry-After.
	RateLimit float64
	// RateBurst is the bucket size, the requests a client may send at once after a pause (default
	// DefaultRateBurst, at least 1).
	RateBurst int
	// MaxClients bounds the clients whose buckets are kept (default 10,000): the least recently seen is
	// forgotten first, so rotating addresses cannot exhaust memory.
	MaxClients int
	// HTTP holds the connection-level limits Serve applies (header, body, idle and per-write timeouts, header
	// size, connection cap); zero fields take httpx's defaults.
	HTTP httpx.ServerOptions
	// MaxBufferedResponse is how much of a non-streaming response is held back so that a replica failing
	// mid-body can still be retried (default 1 MiB); larger responses are streamed after that point.
	MaxBufferedResponse int64
	// QueueSize bounds the requests waiting for a free slot (default 1024); QueueTimeout bounds the wait
	// (default 60 s). Either limit answers 429 with Retry-After.
	QueueSize    int
	QueueTimeout time.Duration
	// ResponseTimeout bounds the wait for a replica's response headers (the prefill of a non-streaming
	// request included); on expiry the attempt counts as a failure and, since nothing reached the client,
	// the request moves to another replica. Default 10 min (the replicas' own request timeout); negative
	// means none.
	ResponseTimeout time.Duration
	// DefaultSlots is assumed for a replica that neither is configured with nor reports its slots (default 1).
	DefaultSlots int
	// Affinity configures prefix-affine routing (default: on, keyed by the leading system messages or the
	// first 4 KiB of the prompt; see route.go).
	Affinity AffinityOptions
	// Transport carries upstream requests; nil means a tuned http.Transport.
	Transport http.RoundTripper
	// Logger receives replica state changes and failed requests; nil discards.
	Logger *slog.Logger
	// Header is set on every response, /health included: for example the identity a deployment gives its
	// gateway, so the process that started it can tell it from another server on the same port.
	Header http.Header
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.HealthInterval, 2*time.Second)
	def(&o.HealthTimeout, 2*time.Second)
	def(&o.ModelsInterval, 30*time.Second)
	def(&o.EjectBase, 5*time.Second)
	def(&o.EjectMax, 2*time.Minute)
	def(&o.QueueTimeout, 60*time.Second)
	if o.EjectMax < o.EjectBase {
		o.EjectMax = o.EjectBase
	}
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = 3
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.BodyBudget <= 0 {
		o.BodyBudget = 256 << 20
	}
	if o.RateLimit == 0 {
		o.RateLimit = DefaultRateLimit
	}
	if o.RateBurst <= 0 {
		o.RateBurst = DefaultRateBurst
	}
	if o.MaxClients <= 0 {
		o.MaxClients = 10_000
	}
	if o.MaxBufferedResponse <= 0 {
		o.MaxBufferedResponse = 1 << 20
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1024
	}
	if o.ResponseTimeout == 0 {
		o.ResponseTimeout = 10 * time.Minute
	}
	if o.DefaultSlots <= 0 {
		o.DefaultSlots = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Affinity.defaults()
}

// Gateway is an http.Handler that routes OpenAI API requests over replicas. Create it with New, give it
// replicas with SetReplicas (at any time, from any goroutine) and release it with Close.
type Gateway struct {
	o       Options
	keys    *httpx.Keys
	limiter *limiter // nil when rate limiting is off
	budget  *httpx.Budget
	rt      http.RoundTripper
	ownRT   *http.Transport
	health  *http.Client
	pool    *pool
	m       *metrics
	handler http.Handler

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Gateway without replicas.
func New(o Options) (*Gateway, error) {
	o.defaults()
	if _, err := ParseAffinityMode(string(o.Affinity.Mode)); err != nil {
		return nil, err
	}
	g := &Gateway{o: o, m: newMetrics(), budget: httpx.NewBudget(o.BodyBudget)}
	keys, err := httpx.NewKeys(o.APIKeys...)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.keys = keys
	if o.RateLimit > 0 {
		g.limiter = newLimiter(o.RateLimit, o.RateBurst, o.MaxClients, time.Now)
	}
	g.rt = o.Transport
	if g.rt == nil {
		g.ownRT = newTransport()
		g.rt = g.ownRT
	}
	g.health = &http.Client{Transport: g.rt, Timeout: o.HealthTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.pool = newPool(&g.o)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", g.serveHealth)
	mux.HandleFunc("GET /v1/health", g.serveHealth)
	mux.HandleFunc("GET /metrics", g.serveMetrics)
	mux.HandleFunc("GET /v1/models", g.serveModels)
	mux.HandleFunc("GET /v1/models/{id...}", g.serveModel)
	mux.HandleFunc("/v1/", g.proxy)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { httpx.Reject(w, r, httpx.NotFound(r)) })
	g.handler = g.wrap(mux)
	return g, nil
}

func newTransport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               nil, // replicas are addressed directly, never through HTTP_PROXY
		DialContext:         d.DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		// Below the replicas' own idle timeout (phonellm serve: 60 s), so the gateway drops an idle connection
		// before the replica does and never sends a request into one being closed.
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Bodies pass through as the replica sent them; the client's Accept-Encoding is forwarded.
		DisableCompression: true,
	}
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// wrap adds client authentication, rate limiting and request metrics.
func (g *Gateway) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		for k, v := range g.o.Header {
			w.Header()[k] = v
		}
		sw := &httpx.StatusWriter{ResponseWriter: w}
		open := r.URL.Path == "/health" || r.URL.Path == "/v1/health"
		defer func() {
			if !open && r.URL.Path != "/metrics" {
				g.m.request(sw.Code, time.Since(start))
			}
		}()
		if open {
			next.ServeHTTP(sw, r)
			return
		}
		client := ""
		if g.keys.Enabled() {
			i := g.keys.Match(r)
			if i < 0 {
				httpx.Reject(sw, r, httpx.Unauthorized())
				return
			}
			client = "key " + strconv.Itoa(i)
		} else {
			client = "address " + clientAddress(r)
		}
		if r.URL.Path != "/metrics" && g.limiter != nil {
			if ok, wait := g.limiter.allow(client); !ok {
				g.m.rateLimited()
				what := "API key"
				if !g.keys.Enabled() {
					what = "client address"
				}
				e := httpx.NewError(http.StatusTooManyRequests, httpx.TypeRateLimit, "rate_limited", "",
					"Rate limit reached for this %s: %s requests per second (bursts of %d); retry after %s s.",
					what, strconv.FormatFloat(g.o.RateLimit, 'g', -1, 64), g.o.RateBurst, httpx.RetryAfterSeconds(wait))
				e.RetryAfter = wait
				httpx.Reject(sw, r, e)
				return
			}
		}
		next.ServeHTTP(sw, r)
	})
}

// SetReplicas replaces the replica set. Replicas are matched by URL: a kept replica keeps its state
// (in-flight requests, health, breaker), a new one is probed at once and serves after its first successful
// probe, a removed one receives no new requests (requests in flight finish). Invalid URLs make SetReplicas
// fail without changing anything.
func (g *Gateway) SetReplicas(rs []Replica) error {
	norm := make([]Replica, 0, len(rs))
	seen := map[string]bool{}
	for i, r := range rs {
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("gateway: replica %d: URL %q: want http(s)://host[:port][/path]", i, redact(r.URL))
		}
		if r.Slots < 0 {
			return fmt.Errorf("gateway: replica %d (%s): slots = %d, want >= 0", i, u.Host, r.Slots)
		}
		u.User = nil
		u.Path = strings.TrimRight(u.Path, "/")
		key := u.String()
		if seen[key] {
			continue
		}
		seen[key] = true
		r.URL = key
		if r.Name == "" {
			r.Name = u.Host
		}
		norm = append(norm, r)
	}
	added, removed := g.pool.set(norm)
	for _, rep := range removed {
		close(rep.stop)
		g.o.Logger.Info("replica removed", "replica", rep.conf().Name)
	}
	for _, rep := range added {
		g.o.Logger.Info("replica added", "replica", rep.conf().Name)
		g.wg.Add(1)
		go g.healthLoop(rep)
	}
	return nil
}

// Follow keeps the replica set in step with a changing source (a fleet's endpoints): it calls list now and
// every interval (default 10 s) and applies the result with SetReplicas, until ctx ends or the gateway
// closes. A failing list, or an empty answer after a non-empty one, keeps the last set (a source that
// hiccups must not empty the gateway); errors go to the logger.
func (g *Gateway) Follow(ctx context.Context, interval time.Duration, list func(context.Context) ([]Replica, error)) {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	had := false
	for {
		rs, err := list(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				g.o.Logger.Warn("replica list failed; keeping the current replicas", "error", err)
			}
		case len(rs) == 0 && had:
			g.o.Logger.Warn("replica list is empty; keeping the current replicas")
		default:
			if err := g.SetReplicas(rs); err != nil {
				g.o.Logger.Warn("replica list rejected", "error", err)
			} else {
				had = had || len(rs) > 0
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// redact drops userinfo from a URL for error messages.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	return raw
}

// ReplicaStatus is a snapshot of one replica as the gateway sees it.
type ReplicaStatus struct {
	Name         string     `json:"name"`
	URL          string     `json:"url"`
	Live         bool       `json:"live"` // receives requests
	Healthy      bool       `json:"healthy"`
	EjectedUntil time.Time  `json:"ejected_until,omitzero"`
	InFlight     int        `json:"in_flight"`
	Slots        int        `json:"slots"`
	Models       []string   `json:"models,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	Cache        CacheStats `json:"cache"`
}

// CacheStats is what a replica reported about reusing prompts, as the gateway counted it.
type CacheStats struct {
	// Hits and Misses count the answers that reported their prompt tokens: a hit reused at least half of its
	// prompt from the replica's cache.
	Hits   uint64 `json:"hits"`
	Misses uint64 `json:"misses"`
	// PromptTokens and CachedTokens sum those answers' prompt tokens and the cached part of them; HitRate is
	// CachedTokens/PromptTokens (0 before any answer).
	PromptTokens uint64  `json:"prompt_tokens"`
	CachedTokens uint64  `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
	// Keys is how many routing keys the replica is taken to hold the prefix of.
	Keys int `json:"keys"`
}

// Replicas returns the current replicas in the order given to SetReplicas.
func (g *Gateway) Replicas() []ReplicaStatus { return g.pool.snapshot(time.Now()) }

// Close stops the health checks, answers queued requests with 503 and drops idle upstream connections.
// Requests in flight are not interrupted. Close is idempotent.
func (g *Gateway) Close() error {
	g.cancel()
	g.pool.close()
	g.wg.Wait()
	if g.ownRT != nil {
		g.ownRT.CloseIdleConnections()
	}
	return nil
}

// Serve serves the gateway on ln until ctx ends, then shuts down, giving requests in flight
// Options.HTTP.ShutdownTimeout (10 s by default). Connections get the limits of Options.HTTP: header, body,
// idle and per-write timeouts, a header size cap and a cap on open connections.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	o := g.o.HTTP
	if o.ErrorLog == nil {
		o.ErrorLog = slog.NewLogLogger(g.o.Logger.Handler(), slog.LevelWarn) // net/http's own complaints
	}
	if err := httpx.Serve(ctx, ln, g, o); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// ListenAndServe listens on addr (DefaultAddr, loopback, when empty) and serves until ctx ends.
func (g *Gateway) ListenAndServe(ctx context.Context, addr string) error {
	if addr == "" {
		addr = DefaultAddr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	return g.Serve(ctx, ln)
}

// modelIDs lists the model IDs of the live replicas, deduplicated, sorted.
func (g *Gateway) liveModels() []modelEntry {
	ms := g.pool.liveModels(time.Now())
	slices.SortFunc(ms, func(a, b modelEntry) int { return strings.Compare(a.id, b.id) })
	return slices.CompactFunc(ms, func(a, b modelEntry) bool { return a.id == b.id })
}
