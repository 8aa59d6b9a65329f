package api

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
)

// latencyBuckets are the histogram bounds in seconds (10 ms to 10 min).
var latencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// metrics holds the server's Prometheus metrics. Labels are the endpoint
// path and, for requests, the status code.
type metrics struct {
	mu        sync.Mutex
	requests  map[[2]string]uint64 // {endpoint, code}
	rejected  uint64
	prompt    uint64
	cached    uint64
	generated uint64
	latency   map[string]*httpx.Histogram // by endpoint
	ttft      httpx.Histogram
	queueWait httpx.Histogram
	start     time.Time
}

func newMetrics() *metrics {
	return &metrics{requests: map[[2]string]uint64{}, latency: map[string]*httpx.Histogram{}, start: time.Now(),
		ttft: httpx.Histogram{Bounds: latencyBuckets}, queueWait: httpx.Histogram{Bounds: latencyBuckets}}
}

func (m *metrics) request(endpoint string, code int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[[2]string{endpoint, strconv.Itoa(code)}]++
	h := m.latency[endpoint]
	if h == nil {
		h = &httpx.Histogram{Bounds: latencyBuckets}
		m.latency[endpoint] = h
	}
	h.Observe(d.Seconds())
}

// reject counts a request refused with 429 because the slots and the queue
// were full.
func (m *metrics) reject() {
	m.mu.Lock()
	m.rejected++
	m.mu.Unlock()
}

func (m *metrics) tokens(prompt, cached, generated int, ttft, queue time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prompt += uint64(prompt)
	m.cached += uint64(cached)
	m.generated += uint64(generated)
	if ttft > 0 {
		m.ttft.Observe(ttft.Seconds())
	}
	m.queueWait.Observe(queue.Seconds())
}

// write renders the Prometheus text exposition format (version 0.0.4).
func (m *metrics) write(w io.Writer, queued, busy, slots int, ready bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	family := func(name, typ, help string) { httpx.WriteFamily(&b, name, typ, help) }
	family("phonellm_requests_total", "counter", "HTTP requests by endpoint and status code.")
	keys := make([][2]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "phonellm_requests_total{%s,%s} %d\n", httpx.Label("endpoint", k[0]), httpx.Label("code", k[1]), m.requests[k])
	}
	family("phonellm_requests_rejected_total", "counter", "Requests rejected with 429 because the queue was full.")
	fmt.Fprintf(&b, "phonellm_requests_rejected_total %d\n", m.rejected)
	family("phonellm_prompt_tokens_total", "counter", "Prompt tokens received.")
	fmt.Fprintf(&b, "phonellm_prompt_tokens_total %d\n", m.prompt)
	family("phonellm_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.")
	fmt.Fprintf(&b, "phonellm_prompt_tokens_cached_total %d\n", m.cached)
	family("phonellm_generated_tokens_total", "counter", "Tokens generated.")
	fmt.Fprintf(&b, "phonellm_generated_tokens_total %d\n", m.generated)

	family("phonellm_request_duration_seconds", "histogram", "Request latency by endpoint.")
	eps := make([]string, 0, len(m.latency))
	for k := range m.latency {
		eps = append(eps, k)
	}
	sort.Strings(eps)
	for _, ep := range eps {
		m.latency[ep].Write(&b, "phonellm_request_duration_seconds", httpx.Label("endpoint", ep))
	}
	family("phonellm_time_to_first_token_seconds", "histogram", "Time from admission to the first generated token.")
	m.ttft.Write(&b, "phonellm_time_to_first_token_seconds", "")
	family("phonellm_queue_wait_seconds", "histogram", "Time requests waited for a free slot.")
	m.queueWait.Write(&b, "phonellm_queue_wait_seconds", "")

	family("phonellm_queue_depth", "gauge", "Requests waiting for a slot.")
	fmt.Fprintf(&b, "phonellm_queue_depth %d\n", queued)
	family("phonellm_slots_busy", "gauge", "Slots generating.")
	fmt.Fprintf(&b, "phonellm_slots_busy %d\n", busy)
	family("phonellm_slots_total", "gauge", "Parallel slots.")
	fmt.Fprintf(&b, "phonellm_slots_total %d\n", slots)
	family("phonellm_ready", "gauge", "1 when the model is loaded.")
	r := 0
	if ready {
		r = 1
	}
	fmt.Fprintf(&b, "phonellm_ready %d\n", r)
	family("phonellm_uptime_seconds", "gauge", "Seconds since the server started.")
	fmt.Fprintf(&b, "phonellm_uptime_seconds %s\n", httpx.FormatFloat(time.Since(m.start).Seconds()))
	_, _ = io.WriteString(w, b.String())
}
