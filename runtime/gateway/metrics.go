package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
)

// latencyBuckets (seconds) span a loopback round trip to a 7k-token prefill on a phone.
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// replicaStats are per-replica counters, guarded by pool.mu.
type replicaStats struct {
	requests     map[int]uint64 // by upstream status; 0 = no HTTP answer
	failures     uint64
	ejections    uint64
	probesOK     uint64
	probesFailed uint64
	ttfb         httpx.Histogram
	hits, misses uint64 // answers that reported their prompt tokens: reused at least half of it, or not
	promptTokens uint64
	cachedTokens uint64
}

func newReplicaStats() replicaStats {
	return replicaStats{requests: map[int]uint64{}, ttfb: httpx.Histogram{Bounds: latencyBuckets}}
}

// metrics are the gateway-wide counters.
type metrics struct {
	start    time.Time
	mu       sync.Mutex
	requests map[int]uint64
	latency  httpx.Histogram
	retries  uint64
	rejected uint64
	limited  uint64
}

func newMetrics() *metrics {
	return &metrics{start: time.Now(), requests: map[int]uint64{}, latency: httpx.Histogram{Bounds: latencyBuckets}}
}

func (m *metrics) request(code int, d time.Duration) {
	if code == 0 {
		code = 499 // the client left before an answer
	}
	m.mu.Lock()
	m.requests[code]++
	m.latency.Observe(d.Seconds())
	m.mu.Unlock()
}

func (m *metrics) retry() {
	m.mu.Lock()
	m.retries++
	m.mu.Unlock()
}

func (m *metrics) reject() {
	m.mu.Lock()
	m.rejected++
	m.mu.Unlock()
}

func (m *metrics) rateLimited() {
	m.mu.Lock()
	m.limited++
	m.mu.Unlock()
}

func replicaLabel(r *replica) string { return httpx.Label("replica", r.conf().Name) }

func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	family := func(name, typ, help string) { httpx.WriteFamily(&b, name, typ, help) }
	m := g.m
	m.mu.Lock()
	family("phonellm_gateway_requests_total", "counter", "Client requests by status code (499: client left first).")
	codes := make([]int, 0, len(m.requests))
	for c := range m.requests {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		fmt.Fprintf(&b, "phonellm_gateway_requests_total{code=\"%d\"} %d\n", c, m.requests[c])
	}
	family("phonellm_gateway_request_duration_seconds", "histogram", "Client request latency, queueing and retries included.")
	m.latency.Write(&b, "phonellm_gateway_request_duration_seconds", "")
	family("phonellm_gateway_retries_total", "counter", "Attempts after the first, on another replica.")
	fmt.Fprintf(&b, "phonellm_gateway_retries_total %d\n", m.retries)
	family("phonellm_gateway_rejected_total", "counter", "Requests answered 429 because every slot stayed busy.")
	fmt.Fprintf(&b, "phonellm_gateway_rejected_total %d\n", m.rejected)
	family("phonellm_gateway_rate_limited_total", "counter", "Requests answered 429 because their client exceeded its rate limit.")
	fmt.Fprintf(&b, "phonellm_gateway_rate_limited_total %d\n", m.limited)
	m.mu.Unlock()

	now := time.Now()
	p := g.pool
	p.mu.Lock()
	family("phonellm_gateway_queue_depth", "gauge", "Requests waiting for a free slot.")
	fmt.Fprintf(&b, "phonellm_gateway_queue_depth %d\n", len(p.waiters))
	type gauge struct {
		name, help string
		val        func(*replica) float64
	}
	b2f := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	gauges := []gauge{
		{"phonellm_gateway_replica_up", "1 when the replica receives requests (healthy, not ejected).", func(r *replica) float64 { return b2f(r.live(now)) }},
		{"phonellm_gateway_replica_healthy", "1 when the last health probe succeeded.", func(r *replica) float64 { return b2f(r.healthy) }},
		{"phonellm_gateway_replica_ejected", "1 while the circuit breaker holds the replica out.", func(r *replica) float64 { return b2f(now.Before(r.ejectedUntil)) }},
		{"phonellm_gateway_replica_in_flight", "Requests the gateway has on the replica.", func(r *replica) float64 { return float64(r.inflight) }},
		{"phonellm_gateway_replica_slots", "Requests the replica serves at once.", func(r *replica) float64 { return float64(r.slots(p.o.DefaultSlots)) }},
	}
	for _, gg := range gauges {
		family(gg.name, "gauge", gg.help)
		for _, rep := range p.reps {
			fmt.Fprintf(&b, "%s{%s} %s\n", gg.name, replicaLabel(rep), httpx.FormatFloat(gg.val(rep)))
		}
	}
	family("phonellm_gateway_replica_requests_total", "counter", "Attempts by replica and upstream status (code=\"error\": no answer).")
	for _, rep := range p.reps {
		codes := make([]int, 0, len(rep.stats.requests))
		for c := range rep.stats.requests {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		for _, c := range codes {
			cs := strconv.Itoa(c)
			if c == 0 {
				cs = "error"
			}
			fmt.Fprintf(&b, "phonellm_gateway_replica_requests_total{%s,%s} %d\n", replicaLabel(rep), httpx.Label("code", cs), rep.stats.requests[c])
		}
	}
	counters := []struct {
		name, help string
		val        func(*replicaStats) uint64
	}{
		{"phonellm_gateway_replica_failures_total", "Failed attempts (transport errors, 5xx, broken bodies).", func(s *replicaStats) uint64 { return s.failures }},
		{"phonellm_gateway_replica_ejections_total", "Times the circuit breaker ejected the replica.", func(s *replicaStats) uint64 { return s.ejections }},
	}
	for _, c := range counters {
		family(c.name, "counter", c.help)
		for _, rep := range p.reps {
			fmt.Fprintf(&b, "%s{%s} %d\n", c.name, replicaLabel(rep), c.val(&rep.stats))
		}
	}
	family("phonellm_gateway_replica_probes_total", "counter", "Health probes by result.")
	for _, rep := range p.reps {
		n := replicaLabel(rep)
		fmt.Fprintf(&b, "phonellm_gateway_replica_probes_total{%s,result=\"ok\"} %d\n", n, rep.stats.probesOK)
		fmt.Fprintf(&b, "phonellm_gateway_replica_probes_total{%s,result=\"failed\"} %d\n", n, rep.stats.probesFailed)
	}
	family("phonellm_gateway_replica_time_to_first_byte_seconds", "histogram", "Time from sending a request to the replica's response headers.")
	for _, rep := range p.reps {
		rep.stats.ttfb.Write(&b, "phonellm_gateway_replica_time_to_first_byte_seconds", replicaLabel(rep))
	}
	g.writeCacheMetrics(&b, p)
	p.mu.Unlock()
	family("phonellm_gateway_uptime_seconds", "gauge", "Seconds since the gateway started.")
	fmt.Fprintf(&b, "phonellm_gateway_uptime_seconds %s\n", strconv.FormatFloat(time.Since(m.start).Seconds(), 'f', 3, 64))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}

// writeCacheMetrics writes the prompt-cache counters and the routing estimates. Called with p.mu held.
func (g *Gateway) writeCacheMetrics(b *strings.Builder, p *pool) {
	family := func(name, typ, help string) { httpx.WriteFamily(b, name, typ, help) }
	family("phonellm_gateway_routed_total", "counter", "Slots given to requests, by routing decision (holder: a replica holding the request's prefix; spill: every holder busy and waiting was expected to cost more than a miss elsewhere; new: a key without a live holder; load: unkeyed or load-only).")
	for _, d := range routeDecisions {
		fmt.Fprintf(b, "phonellm_gateway_routed_total{%s} %d\n", httpx.Label("decision", d), p.routed[d])
	}
	family("phonellm_gateway_affinity_keys", "gauge", "Routing keys remembered.")
	fmt.Fprintf(b, "phonellm_gateway_affinity_keys %d\n", len(p.keys.m))
	type counter struct {
		name, help string
		val        func(*replica) uint64
	}
	for _, c := range []counter{
		{"phonellm_gateway_replica_cache_hits_total", "Answers that reported reusing at least half of their prompt from the replica's cache.", func(r *replica) uint64 { return r.stats.hits }},
		{"phonellm_gateway_replica_cache_misses_total", "Answers that reported their prompt tokens and reused less than half of them.", func(r *replica) uint64 { return r.stats.misses }},
		{"phonellm_gateway_replica_prompt_tokens_total", "Prompt tokens of the answers that reported them.", func(r *replica) uint64 { return r.stats.promptTokens }},
		{"phonellm_gateway_replica_cached_tokens_total", "Of those, the tokens the replica reused from its cache.", func(r *replica) uint64 { return r.stats.cachedTokens }},
	} {
		family(c.name, "counter", c.help)
		for _, rep := range p.reps {
			fmt.Fprintf(b, "%s{%s} %d\n", c.name, replicaLabel(rep), c.val(rep))
		}
	}
	type gauge struct {
		name, help string
		val        func(*replica) (float64, bool)
	}
	e := func(v ewma) (float64, bool) { return v.v, v.n > 0 }
	for _, gg := range []gauge{
		{"phonellm_gateway_replica_cache_hit_rate", "Cached prompt tokens / prompt tokens of the answers that reported them (token-level prompt-cache hit rate).", func(r *replica) (float64, bool) {
			if r.stats.promptTokens == 0 {
				return 0, false
			}
			return float64(r.stats.cachedTokens) / float64(r.stats.promptTokens), true
		}},
		{"phonellm_gateway_replica_prefill_hit_seconds", "Moving average of the prompt evaluation time the replica reported for hits.", func(r *replica) (float64, bool) { return e(r.est.prefillHit) }},
		{"phonellm_gateway_replica_prefill_miss_seconds", "Moving average of the prompt evaluation time the replica reported for misses.", func(r *replica) (float64, bool) { return e(r.est.prefillMiss) }},
		{"phonellm_gateway_replica_prompt_token_seconds", "Seconds per evaluated prompt token (slope of the line through the moving averages of the reported prompt time of hits and of misses).", func(r *replica) (float64, bool) {
			_, b := r.est.prefill.coef()
			return b, r.est.prefill.n > 0
		}},
		{"phonellm_gateway_replica_queue_wait_seconds", "Moving average of the time requests routed to the replica waited in the gateway's queue.", func(r *replica) (float64, bool) { return e(r.est.queue) }},
		{"phonellm_gateway_replica_cached_keys", "Routing keys whose prefix the replica is taken to hold.", func(r *replica) (float64, bool) { return float64(len(r.recent)), true }},
	} {
		family(gg.name, "gauge", gg.help)
		for _, rep := range p.reps {
			if v, ok := gg.val(rep); ok {
				fmt.Fprintf(b, "%s{%s} %s\n", gg.name, replicaLabel(rep), httpx.FormatFloat(v))
			}
		}
	}
}

// ReplicaCounters are a replica's counters on a phonellm gateway's /metrics.
type ReplicaCounters struct {
	Requests     int64 // attempts answered 200
	Hits, Misses int64 // answers that reported their prompt: reused at least half of it, or not
	PromptTokens int64
	CachedTokens int64
}

// HitRate is CachedTokens/PromptTokens (0 before any answer).
func (c ReplicaCounters) HitRate() float64 {
	if c.PromptTokens <= 0 {
		return 0
	}
	return float64(c.CachedTokens) / float64(c.PromptTokens)
}

// ParseReplicaMetrics reads the per-replica counters of a phonellm gateway's /metrics (Prometheus text), by
// replica name; lines it does not know are skipped. Callers bound the reader.
func ParseReplicaMetrics(r io.Reader) map[string]ReplicaCounters {
	out := map[string]ReplicaCounters{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasPrefix(name, "phonellm_gateway_replica_") {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		rep := label(labels, "replica")
		if rep == "" {
			continue
		}
		rr := out[rep]
		switch name {
		case "phonellm_gateway_replica_requests_total":
			if label(labels, "code") == "200" {
				rr.Requests += int64(v)
			}
		case "phonellm_gateway_replica_cache_hits_total":
			rr.Hits = int64(v)
		case "phonellm_gateway_replica_cache_misses_total":
			rr.Misses = int64(v)
		case "phonellm_gateway_replica_prompt_tokens_total":
			rr.PromptTokens = int64(v)
		case "phonellm_gateway_replica_cached_tokens_total":
			rr.CachedTokens = int64(v)
		default:
			continue
		}
		out[rep] = rr
	}
	return out
}

// label returns a label's value from `a="x",b="y"` (values as httpx.Label escapes them).
func label(labels, name string) string {
	for labels != "" {
		k, rest, ok := strings.Cut(labels, "=\"")
		if !ok {
			return ""
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(rest[i])
				}
				continue
			}
			v.WriteByte(rest[i])
		}
		if strings.TrimSpace(k) == name {
			return v.String()
		}
		if i >= len(rest) {
			return ""
		}
		labels = strings.TrimPrefix(rest[i+1:], ",")
	}
	return ""
}
