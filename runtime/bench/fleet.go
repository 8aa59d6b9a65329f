package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/phonellm/phonellm/runtime/gateway"
)

// FleetOptions configure RunFleet. URL and Workload are required; the zero value of the rest is usable.
type FleetOptions struct {
	// URL is the gateway's base URL (the OpenAI API is under URL + "/v1").
	URL string
	// APIKey is sent as "Authorization: Bearer <key>" (to the API and to /metrics).
	APIKey string
	// Model is the model name requests ask for ("" lets the gateway's replicas answer with theirs).
	Model    string
	Workload Workload
	// Concurrency is the number of clients, each sending one request at a time (default 6, at most 256).
	Concurrency int
	// Duration is how long each phase sends new requests (default 2 min); the requests in flight when it ends
	// are waited for and counted. Requests, when positive, also ends a phase after that many answers.
	Duration time.Duration
	Requests int
	// Compare alternates phases routed by the gateway's affinity with phases routed by load only (the
	// Phonellm-Routing: load header), Rounds of each (default 2), the same request sequences in both.
	Compare bool
	Rounds  int
	// Seed makes the clients' choices of rubric and case reproducible.
	Seed uint64
	// Timeout bounds one request (default 10 min).
	Timeout time.Duration
	// CPU, when set, returns the CPU seconds the serving processes have used so far (a local fleet): each phase
	// reports its CPU seconds and throughput per CPU-hour.
	CPU func() (float64, error)
	// HTTP sends the requests (default: no proxy, keep-alive, Concurrency connections).
	HTTP *http.Client
}

// Routing modes of a phase.
const (
	ModeAffinity = "affinity" // the gateway's own routing (prefix-affine by default)
	ModeLoad     = "load"     // load only, by the Phonellm-Routing header
)

// FleetRun is the outcome of RunFleet (FleetResult is the single-engine fleet figure of Run).
type FleetRun struct {
	URL         string  `json:"url"`
	Concurrency int     `json:"concurrency"`
	Rubrics     int     `json:"rubrics"`
	Cases       int     `json:"cases"`
	MaxTokens   int     `json:"max_tokens"`
	Phases      []Phase `json:"phases"`
	// Modes aggregates the phases of each routing mode: affinity first, load second when comparing.
	Modes []ModeResult `json:"modes"`
	// Ratio is affinity's requests per hour over load's, and CPURatio the same per CPU-second, when comparing.
	Ratio    float64 `json:"ratio,omitempty"`
	CPURatio float64 `json:"cpu_ratio,omitempty"`
	// LoadAverage is /proc/loadavg (1, 5, 15 minutes) before the first phase and after the last.
	LoadAverage [2][3]float64 `json:"load_average"`
	Notes       []string      `json:"notes,omitempty"`
}

// Phase is one timed run of the workload in one routing mode.
type Phase struct {
	Mode       string  `json:"mode"`
	Round      int     `json:"round"`
	Seconds    float64 `json:"seconds"`
	Requests   int     `json:"requests"` // answered 200
	Errors     int     `json:"errors"`
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// samples of the phase, for aggregation
	lat            []float64
	prompt, cached int64
	hits           int
	replicas       map[string]ReplicaResult
}

// ModeResult is one routing mode over all its phases.
type ModeResult struct {
	Mode            string  `json:"mode"`
	Phases          int     `json:"phases"`
	Requests        int     `json:"requests"`
	Errors          int     `json:"errors"`
	Seconds         float64 `json:"seconds"`
	RequestsPerHour float64 `json:"requests_per_hour"`
	P50             float64 `json:"p50_seconds"`
	P95             float64 `json:"p95_seconds"`
	// PromptTokens and CachedTokens are what the answers reported; HitRate is their ratio, Hits the answers
	// that reused at least half of their prompt.
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
	Hits         int     `json:"hits"`
	// CPUSeconds of the serving processes during the phases (local fleets), and the throughput per CPU-hour.
	CPUSeconds         float64         `json:"cpu_seconds,omitempty"`
	RequestsPerCPUHour float64         `json:"requests_per_cpu_hour,omitempty"`
	Replicas           []ReplicaResult `json:"replicas,omitempty"`
}

// ReplicaResult is what the gateway's /metrics counted for one replica during a mode's phases.
type ReplicaResult struct {
	Name         string  `json:"name"`
	Requests     int64   `json:"requests"`
	Hits         int64   `json:"hits"`
	Misses       int64   `json:"misses"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
}

// Validate checks o.
func (o FleetOptions) Validate() error {
	switch {
	case o.URL == "":
		return errors.New("bench fleet: no gateway URL")
	case len(o.Workload.Rubrics) == 0 || len(o.Workload.Cases) == 0:
		return &WorkloadError{Msg: "empty: want at least one rubric and one case"}
	case o.Concurrency < 0 || o.Concurrency > 256:
		return &WorkloadError{Msg: fmt.Sprintf("concurrency %d, want 1..256", o.Concurrency)}
	case o.Duration < 0 || o.Requests < 0 || o.Rounds < 0 || o.Rounds > 100:
		return &WorkloadError{Msg: "negative duration or requests, or rounds outside 0..100"}
	}
	return nil
}

func (o *FleetOptions) defaults() {
	if o.Concurrency == 0 {
		o.Concurrency = 6
	}
	if o.Duration == 0 {
		o.Duration = 2 * time.Minute
	}
	if o.Rounds == 0 {
		o.Rounds = 2
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Workload.MaxTokens == 0 {
		o.Workload.MaxTokens = 8
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: o.Concurrency + 4}}
	}
}

// RunFleet drives the gateway at o.URL with o.Concurrency clients sending the workload, phase by phase, and
// reports requests per hour, latency percentiles and the prompt-cache hit rate per routing mode, per replica
// (from the gateway's /metrics) and, with Compare, the ratio of affinity to load-only routing measured in the
// same run, alternating. progress, when not nil, receives one line per phase.
func RunFleet(ctx context.Context, o FleetOptions, progress func(string)) (FleetRun, error) {
	if err := o.Validate(); err != nil {
		return FleetRun{}, err
	}
	o.defaults()
	res := FleetRun{URL: o.URL, Concurrency: o.Concurrency, Rubrics: len(o.Workload.Rubrics), Cases: len(o.Workload.Cases),
		MaxTokens: o.Workload.MaxTokens}
	res.LoadAverage[0] = loadAverage()
	modes := []string{ModeAffinity}
	if o.Compare {
		modes = append(modes, ModeLoad)
	} else {
		o.Rounds = 1
	}
	for round := range o.Rounds {
		for _, mode := range modes {
			ph, err := runPhase(ctx, &o, mode, round)
			if err != nil {
				return res, err
			}
			res.Phases = append(res.Phases, ph)
			if progress != nil {
				progress(fmt.Sprintf("round %d, %s: %d requests in %.1f s (%.0f/hour), %d errors, hit rate %.0f %%",
					round+1, mode, ph.Requests, ph.Seconds, perHourN(ph.Requests, ph.Seconds), ph.Errors, 100*ratio(ph.cached, ph.prompt)))
			}
		}
	}
	res.LoadAverage[1] = loadAverage()
	for _, mode := range modes {
		res.Modes = append(res.Modes, aggregate(mode, res.Phases))
	}
	if o.Compare && len(res.Modes) == 2 {
		a, l := res.Modes[0], res.Modes[1]
		if l.RequestsPerHour > 0 {
			res.Ratio = a.RequestsPerHour / l.RequestsPerHour
		}
		if l.RequestsPerCPUHour > 0 {
			res.CPURatio = a.RequestsPerCPUHour / l.RequestsPerCPUHour
		}
	}
	for _, m := range res.Modes {
		if m.Errors > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %d requests failed", m.Mode, m.Errors))
		}
	}
	return res, nil
}

// runPhase runs one phase: the clients send requests until the duration (or request count) is reached, then
// the phase waits for the requests in flight.
func runPhase(ctx context.Context, o *FleetOptions, mode string, round int) (Phase, error) {
	ph := Phase{Mode: mode, Round: round + 1}
	before, err := scrapeReplicas(ctx, o)
	if err != nil {
		return ph, err
	}
	var cpu0 float64
	if o.CPU != nil {
		if cpu0, err = o.CPU(); err != nil {
			return ph, fmt.Errorf("bench fleet: CPU time: %w", err)
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.Now().Add(o.Duration)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for c := range o.Concurrency {
		wg.Go(func() {
			// The same sequence of rubric and case in every mode of a round.
			rng := rand.New(rand.NewPCG(o.Seed+uint64(round)*7919, uint64(c)))
			for time.Now().Before(deadline) && pctx.Err() == nil {
				mu.Lock()
				done := o.Requests > 0 && ph.Requests+ph.Errors >= o.Requests
				mu.Unlock()
				if done {
					return
				}
				rb := o.Workload.Rubrics[rng.IntN(len(o.Workload.Rubrics))]
				cs := o.Workload.Cases[rng.IntN(len(o.Workload.Cases))]
				t0 := time.Now()
				u, err := send(pctx, o, mode, rb, cs)
				lat := time.Since(t0).Seconds()
				mu.Lock()
				switch {
				case err != nil && pctx.Err() != nil:
				case err != nil:
					ph.Errors++
					if firstErr == nil {
						firstErr = err
					}
				default:
					ph.Requests++
					ph.lat = append(ph.lat, lat)
					ph.prompt += int64(u.prompt)
					ph.cached += int64(u.cached)
					if 2*u.cached >= u.prompt && u.prompt > 0 {
						ph.hits++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	ph.Seconds = time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		return ph, err
	}
	if ph.Requests == 0 && firstErr != nil {
		return ph, fmt.Errorf("bench fleet: no request succeeded: %w", firstErr)
	}
	if o.CPU != nil {
		cpu1, err := o.CPU()
		if err != nil {
			return ph, fmt.Errorf("bench fleet: CPU time: %w", err)
		}
		ph.CPUSeconds = cpu1 - cpu0
	}
	after, err := scrapeReplicas(ctx, o)
	if err != nil {
		return ph, err
	}
	ph.replicas = map[string]ReplicaResult{}
	for name, a := range after {
		b := before[name]
		ph.replicas[name] = ReplicaResult{Name: name, Requests: a.Requests - b.Requests, Hits: a.Hits - b.Hits,
			Misses: a.Misses - b.Misses, PromptTokens: a.PromptTokens - b.PromptTokens, CachedTokens: a.CachedTokens - b.CachedTokens}
	}
	return ph, nil
}

type answerUsage struct{ prompt, cached int }

// send posts one review and returns what the answer reports about its prompt.
func send(ctx context.Context, o *FleetOptions, mode, rubric, c string) (answerUsage, error) {
	body := map[string]any{"messages": []map[string]string{{"role": "system", "content": rubric}, {"role": "user", "content": c}},
		"max_tokens": o.Workload.MaxTokens, "temperature": 0}
	if o.Model != "" {
		body["model"] = o.Model
	}
	b, _ := json.Marshal(body)
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, o.URL+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return answerUsage{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if o.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.APIKey)
	}
	if mode == ModeLoad {
		req.Header.Set("Phonellm-Routing", "load")
	}
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return answerUsage{}, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return answerUsage{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return answerUsage{}, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, rb)
	}
	var r struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		Timings *struct {
			CacheN int `json:"cache_n"`
		} `json:"timings"`
	}
	if err := json.Unmarshal(rb, &r); err != nil {
		return answerUsage{}, fmt.Errorf("answer is not JSON: %w", err)
	}
	u := answerUsage{prompt: r.Usage.PromptTokens}
	switch {
	case r.Usage.Details != nil:
		u.cached = r.Usage.Details.CachedTokens
	case r.Timings != nil:
		u.cached = r.Timings.CacheN
	}
	return u, nil
}

// scrapeReplicas reads the per-replica counters from the gateway's /metrics (an empty map when the gateway
// has none, e.g. it is not phonellm's).
func scrapeReplicas(ctx context.Context, o *FleetOptions) (map[string]ReplicaResult, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, o.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if o.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.APIKey)
	}
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench fleet: gateway metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return map[string]ReplicaResult{}, nil
	}
	out := map[string]ReplicaResult{}
	for name, c := range gateway.ParseReplicaMetrics(io.LimitReader(resp.Body, 16<<20)) {
		out[name] = ReplicaResult{Name: name, Requests: c.Requests, Hits: c.Hits, Misses: c.Misses, PromptTokens: c.PromptTokens,
			CachedTokens: c.CachedTokens}
	}
	return out, nil
}

func aggregate(mode string, phases []Phase) ModeResult {
	m := ModeResult{Mode: mode}
	var lat []float64
	reps := map[string]ReplicaResult{}
	for _, p := range phases {
		if p.Mode != mode {
			continue
		}
		m.Phases++
		m.Requests += p.Requests
		m.Errors += p.Errors
		m.Seconds += p.Seconds
		m.PromptTokens += p.prompt
		m.CachedTokens += p.cached
		m.Hits += p.hits
		m.CPUSeconds += p.CPUSeconds
		lat = append(lat, p.lat...)
		for name, r := range p.replicas {
			a := reps[name]
			a.Name = name
			a.Requests += r.Requests
			a.Hits += r.Hits
			a.Misses += r.Misses
			a.PromptTokens += r.PromptTokens
			a.CachedTokens += r.CachedTokens
			reps[name] = a
		}
	}
	m.RequestsPerHour = perHourN(m.Requests, m.Seconds)
	if m.CPUSeconds > 0 {
		m.RequestsPerCPUHour = perHourN(m.Requests, m.CPUSeconds)
	}
	m.HitRate = ratio(m.CachedTokens, m.PromptTokens)
	slices.Sort(lat)
	m.P50, m.P95 = quantile(lat, 0.5), quantile(lat, 0.95)
	for _, r := range reps {
		r.HitRate = ratio(r.CachedTokens, r.PromptTokens)
		m.Replicas = append(m.Replicas, r)
	}
	slices.SortFunc(m.Replicas, func(a, b ReplicaResult) int { return strings.Compare(a.Name, b.Name) })
	return m
}

// quantile is the nearest-rank quantile of sorted values (0 when empty).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.9999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func perHourN(n int, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) * 3600 / secs
}

// loadAverage reads /proc/loadavg (zeros where there is none).
func loadAverage() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}

// WriteTable writes r for people.
func (r FleetRun) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "gateway %s: %d clients, %d rubrics × %d cases, max %d tokens out\n", r.URL, r.Concurrency, r.Rubrics, r.Cases, r.MaxTokens)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "routing\trequests\tseconds\trequests/hour\tp50 s\tp95 s\thit rate\tCPU s\trequests/CPU-hour")
	for _, m := range r.Modes {
		cpu, per := "-", "-"
		if m.CPUSeconds > 0 {
			cpu, per = fmt.Sprintf("%.1f", m.CPUSeconds), fmt.Sprintf("%.0f", m.RequestsPerCPUHour)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.0f\t%.2f\t%.2f\t%.0f %%\t%s\t%s\n", m.Mode, m.Requests, m.Seconds, m.RequestsPerHour, m.P50, m.P95, 100*m.HitRate, cpu, per)
	}
	tw.Flush()
	for _, m := range r.Modes {
		if len(m.Replicas) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s, per replica:\n", m.Mode)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  replica\trequests\thits\tmisses\thit rate")
		for _, rr := range m.Replicas {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%.0f %%\n", rr.Name, rr.Requests, rr.Hits, rr.Misses, 100*rr.HitRate)
		}
		tw.Flush()
	}
	if r.Ratio > 0 {
		line := fmt.Sprintf("affinity / load: %.2f× requests per hour", r.Ratio)
		if r.CPURatio > 0 {
			line += fmt.Sprintf(", %.2f× per CPU-second", r.CPURatio)
		}
		fmt.Fprintln(w, line+" (same run, alternating phases)")
	}
	fmt.Fprintf(w, "load average %.2f %.2f %.2f before, %.2f %.2f %.2f after\n", r.LoadAverage[0][0], r.LoadAverage[0][1], r.LoadAverage[0][2],
		r.LoadAverage[1][0], r.LoadAverage[1][1], r.LoadAverage[1][2])
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}
