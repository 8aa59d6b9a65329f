package gateway

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// latencyBuckets (seconds) span a loopback round trip to a 7k-token prefill on a phone.
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(latencyBuckets))
	}
	h.n++
	h.sum += v
	if i, _ := slices.BinarySearch(latencyBuckets, v); i < len(latencyBuckets) {
		h.counts[i]++
	}
}

func (h *histogram) write(b *strings.Builder, name, labels string) {
	var cum uint64
	for i, le := range latencyBuckets {
		if h.counts != nil {
			cum += h.counts[i]
		}
		fmt.Fprintf(b, "%s_bucket{%sle=\"%s\"} %d\n", name, labels, strconv.FormatFloat(le, 'g', -1, 64), cum)
	}
	fmt.Fprintf(b, "%s_bucket{%sle=\"+Inf\"} %d\n", name, labels, h.n)
	trim := strings.TrimSuffix(labels, ",")
	if trim != "" {
		trim = "{" + trim + "}"
	}
	fmt.Fprintf(b, "%s_sum%s %s\n%s_count%s %d\n", name, trim, strconv.FormatFloat(h.sum, 'g', -1, 64), name, trim, h.n)
}

// replicaStats are per-replica counters, guarded by pool.mu.
type replicaStats struct {
	requests     map[int]uint64 // by upstream status; 0 = no HTTP answer
	failures     uint64
	ejections    uint64
	probesOK     uint64
	probesFailed uint64
	ttfb         histogram
}

func newReplicaStats() replicaStats { return replicaStats{requests: map[int]uint64{}} }

// metrics are the gateway-wide counters.
type metrics struct {
	start    time.Time
	mu       sync.Mutex
	requests map[int]uint64
	latency  histogram
	retries  uint64
	rejected uint64
}

func newMetrics() *metrics { return &metrics{start: time.Now(), requests: map[int]uint64{}} }

func (m *metrics) request(code int, d time.Duration) {
	if code == 0 {
		code = 499 // the client left before an answer
	}
	m.mu.Lock()
	m.requests[code]++
	m.latency.observe(d.Seconds())
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

// labelValue escapes a Prometheus label value (text format 0.0.4: backslash, double quote, newline).
func labelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
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
	m.latency.write(&b, "phonellm_gateway_request_duration_seconds", "")
	family("phonellm_gateway_retries_total", "counter", "Attempts after the first, on another replica.")
	fmt.Fprintf(&b, "phonellm_gateway_retries_total %d\n", m.retries)
	family("phonellm_gateway_rejected_total", "counter", "Requests answered 429 because every slot stayed busy.")
	fmt.Fprintf(&b, "phonellm_gateway_rejected_total %d\n", m.rejected)
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
			fmt.Fprintf(&b, "%s{replica=\"%s\"} %s\n", gg.name, labelValue(rep.conf().Name), strconv.FormatFloat(gg.val(rep), 'g', -1, 64))
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
			fmt.Fprintf(&b, "phonellm_gateway_replica_requests_total{replica=\"%s\",code=\"%s\"} %d\n", labelValue(rep.conf().Name), cs, rep.stats.requests[c])
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
			fmt.Fprintf(&b, "%s{replica=\"%s\"} %d\n", c.name, labelValue(rep.conf().Name), c.val(&rep.stats))
		}
	}
	family("phonellm_gateway_replica_probes_total", "counter", "Health probes by result.")
	for _, rep := range p.reps {
		n := labelValue(rep.conf().Name)
		fmt.Fprintf(&b, "phonellm_gateway_replica_probes_total{replica=\"%s\",result=\"ok\"} %d\n", n, rep.stats.probesOK)
		fmt.Fprintf(&b, "phonellm_gateway_replica_probes_total{replica=\"%s\",result=\"failed\"} %d\n", n, rep.stats.probesFailed)
	}
	family("phonellm_gateway_replica_time_to_first_byte_seconds", "histogram", "Time from sending a request to the replica's response headers.")
	for _, rep := range p.reps {
		rep.stats.ttfb.write(&b, "phonellm_gateway_replica_time_to_first_byte_seconds", fmt.Sprintf("replica=\"%s\",", labelValue(rep.conf().Name)))
	}
	p.mu.Unlock()
	family("phonellm_gateway_uptime_seconds", "gauge", "Seconds since the gateway started.")
	fmt.Fprintf(&b, "phonellm_gateway_uptime_seconds %s\n", strconv.FormatFloat(time.Since(m.start).Seconds(), 'f', 3, 64))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}
