package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
)

// Options configure Run. The zero value gives the defaults documented on
// each field.
type Options struct {
	// PromptLengths to measure prompt processing at; default 512 and 7000.
	// Lengths that do not fit the context are clamped (Result says so).
	PromptLengths []int
	// GenerateTokens per generation measurement; default 128.
	GenerateTokens int
	// Concurrency levels for the aggregate generation rate; default 1 and
	// the engine's Parallel (if larger).
	Concurrency []int
	// Repeats of each measurement; the median is reported. Default 1.
	Repeats int
	// FleetPromptTokens and FleetGenerateTokens shape the fleet request
	// (the fraud-review case); default 7000 in, 8 out.
	FleetPromptTokens, FleetGenerateTokens int
	// SharedPrefix is the share of the fleet prompt two requests have in
	// common in the prefix-cache run; default 0.9.
	SharedPrefix float64
	// Skip lists parts to leave out: "prompt", "generate", "concurrency",
	// "fleet", "prefix".
	Skip []string
}

// Validate checks o.
func (o Options) Validate() error {
	for _, n := range o.PromptLengths {
		if n < 1 {
			return fmt.Errorf("bench: prompt length %d below 1", n)
		}
	}
	for _, c := range o.Concurrency {
		if c < 1 || c > 256 {
			return fmt.Errorf("bench: concurrency %d outside [1, 256]", c)
		}
	}
	if o.GenerateTokens < 0 || o.Repeats < 0 || o.FleetPromptTokens < 0 || o.FleetGenerateTokens < 0 {
		return errors.New("bench: negative count")
	}
	if o.SharedPrefix < 0 || o.SharedPrefix >= 1 {
		return fmt.Errorf("bench: shared prefix %v outside [0, 1)", o.SharedPrefix)
	}
	return nil
}

func (o *Options) defaults(info engine.ModelInfo) {
	if len(o.PromptLengths) == 0 {
		o.PromptLengths = []int{512, 7000}
	}
	if o.GenerateTokens == 0 {
		o.GenerateTokens = 128
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1}
		if info.Parallel > 1 {
			o.Concurrency = append(o.Concurrency, info.Parallel)
		}
	}
	if o.Repeats == 0 {
		o.Repeats = 1
	}
	if o.FleetPromptTokens == 0 {
		o.FleetPromptTokens = 7000
	}
	if o.FleetGenerateTokens == 0 {
		o.FleetGenerateTokens = 8
	}
	if o.SharedPrefix == 0 {
		o.SharedPrefix = 0.9
	}
}

// Result is the outcome of Run. Rates are tokens per second.
type Result struct {
	Model       engine.ModelInfo    `json:"model"`
	Prompt      []PromptResult      `json:"prompt,omitempty"`
	Generate    *GenerateResult     `json:"generate,omitempty"`
	Concurrency []ConcurrencyResult `json:"concurrency,omitempty"`
	Fleet       *FleetResult        `json:"fleet,omitempty"`
	PrefixCache *PrefixResult       `json:"prefix_cache,omitempty"`
	Notes       []string            `json:"notes,omitempty"`
}

// PromptResult is prompt processing at one length (no cache reuse).
type PromptResult struct {
	Requested int     `json:"requested_tokens"`
	Tokens    int     `json:"tokens"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"tokens_per_second"`
}

// GenerateResult is single-stream decoding.
type GenerateResult struct {
	Tokens    int     `json:"tokens"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"tokens_per_second"`
}

// ConcurrencyResult is decoding with Level requests at once.
type ConcurrencyResult struct {
	Level          int     `json:"level"`
	Tokens         int     `json:"tokens"`
	Seconds        float64 `json:"seconds"`
	PerSecond      float64 `json:"tokens_per_second"`
	PerRequest     float64 `json:"tokens_per_second_per_request"`
	MeanLatencySec float64 `json:"mean_latency_seconds"`
}

// FleetResult is the fleet-style figure: one request of PromptTokens in and
// GenerateTokens out, end to end, and the requests per hour one replica
// serves back to back (every prompt evaluated in full).
type FleetResult struct {
	PromptTokens    int     `json:"prompt_tokens"`
	GenerateTokens  int     `json:"generate_tokens"`
	Seconds         float64 `json:"seconds_per_request"`
	PromptSeconds   float64 `json:"prompt_seconds"`
	RequestsPerHour float64 `json:"requests_per_hour"`
}

// PrefixResult compares two requests sharing SharedTokens of their prompt:
// the first evaluates everything, the second reuses the cached prefix.
type PrefixResult struct {
	PromptTokens        int     `json:"prompt_tokens"`
	SharedTokens        int     `json:"shared_tokens"`
	FirstPromptSeconds  float64 `json:"first_prompt_seconds"`
	SecondPromptSeconds float64 `json:"second_prompt_seconds"`
	SecondCachedTokens  int     `json:"second_cached_tokens"`
	// Speedup is first/second prompt time; the ideal is
	// PromptTokens/(PromptTokens-SharedTokens).
	Speedup float64 `json:"speedup"`
	// RequestsPerHour with the shared prefix cached (fleet shape).
	RequestsPerHour float64 `json:"requests_per_hour"`
}

// Run benchmarks e. progress, when not nil, receives one line per step.
func Run(ctx context.Context, e engine.Engine, o Options, progress func(string)) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	info := e.Info()
	o.defaults(info)
	say := func(format string, args ...any) {
		if progress != nil {
			progress(fmt.Sprintf(format, args...))
		}
	}
	skip := func(part string) bool { return slices.Contains(o.Skip, part) }
	res := Result{Model: info}
	p := &prompts{ctx: ctx, e: e}
	limit := info.ContextLength - 1
	clamp := func(n, gen int, what string) int {
		if n+gen > limit {
			c := max(limit-gen, 1)
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %d prompt tokens clamped to %d (context %d)", what, n, c, info.ContextLength))
			return c
		}
		return n
	}

	if !skip("prompt") {
		for _, want := range o.PromptLengths {
			n := clamp(want, 1, "prompt")
			say("prompt processing, %d tokens", n)
			var secs []float64
			for range o.Repeats {
				toks, err := p.unique(n)
				if err != nil {
					return res, err
				}
				r, err := e.Generate(ctx, engine.Request{Tokens: toks, MaxTokens: 1, NoCache: true, IgnoreEOG: true}, nil)
				if err != nil {
					return res, fmt.Errorf("bench: prompt %d: %w", n, err)
				}
				secs = append(secs, r.Timings.PromptDuration.Seconds())
			}
			s := median(secs)
			res.Prompt = append(res.Prompt, PromptResult{Requested: want, Tokens: n, Seconds: s, PerSecond: rate(n, s)})
		}
	}

	if !skip("generate") {
		say("generation, %d tokens", o.GenerateTokens)
		var secs []float64
		for range o.Repeats {
			toks, err := p.unique(clamp(32, o.GenerateTokens, "generate"))
			if err != nil {
				return res, err
			}
			r, err := e.Generate(ctx, engine.Request{Tokens: toks, MaxTokens: o.GenerateTokens, NoCache: true, IgnoreEOG: true}, nil)
			if err != nil {
				return res, fmt.Errorf("bench: generate: %w", err)
			}
			secs = append(secs, r.Timings.GenerateDuration.Seconds())
		}
		s := median(secs)
		// The first token comes from the prompt pass.
		res.Generate = &GenerateResult{Tokens: o.GenerateTokens, Seconds: s, PerSecond: rate(o.GenerateTokens-1, s)}
	}

	if !skip("concurrency") {
		for _, level := range o.Concurrency {
			say("concurrency %d", level)
			cr, err := concurrent(ctx, e, p, level, clamp(32, o.GenerateTokens, "concurrency"), o.GenerateTokens)
			if err != nil {
				return res, err
			}
			res.Concurrency = append(res.Concurrency, cr)
		}
	}

	fleetIn := clamp(o.FleetPromptTokens, o.FleetGenerateTokens, "fleet")
	if !skip("fleet") {
		say("fleet request, %d in / %d out", fleetIn, o.FleetGenerateTokens)
		var secs, psecs []float64
		for range o.Repeats {
			toks, err := p.unique(fleetIn)
			if err != nil {
				return res, err
			}
			start := time.Now()
			r, err := e.Generate(ctx, engine.Request{Tokens: toks, MaxTokens: o.FleetGenerateTokens, NoCache: true, IgnoreEOG: true}, nil)
			if err != nil {
				return res, fmt.Errorf("bench: fleet: %w", err)
			}
			secs = append(secs, time.Since(start).Seconds())
			psecs = append(psecs, r.Timings.PromptDuration.Seconds())
		}
		s := median(secs)
		res.Fleet = &FleetResult{PromptTokens: fleetIn, GenerateTokens: o.FleetGenerateTokens, Seconds: s,
			PromptSeconds: median(psecs), RequestsPerHour: perHour(s)}
	}

	if !skip("prefix") {
		shared := int(math.Round(float64(fleetIn) * o.SharedPrefix))
		say("prefix cache, %d of %d tokens shared", shared, fleetIn)
		pr, err := prefix(ctx, e, p, fleetIn, shared, o.FleetGenerateTokens)
		if err != nil {
			return res, err
		}
		res.PrefixCache = &pr
	}
	return res, nil
}

func concurrent(ctx context.Context, e engine.Engine, p *prompts, level, promptLen, gen int) (ConcurrencyResult, error) {
	reqs := make([][]int32, level)
	for i := range reqs {
		toks, err := p.unique(promptLen)
		if err != nil {
			return ConcurrencyResult{}, err
		}
		reqs[i] = toks
	}
	var wg sync.WaitGroup
	errs := make([]error, level)
	lat := make([]float64, level)
	ntok := make([]int, level)
	start := time.Now()
	for i := range reqs {
		wg.Go(func() {
			t0 := time.Now()
			r, err := e.Generate(ctx, engine.Request{Tokens: reqs[i], MaxTokens: gen, NoCache: true, IgnoreEOG: true}, nil)
			errs[i], lat[i], ntok[i] = err, time.Since(t0).Seconds(), len(r.Tokens)
		})
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return ConcurrencyResult{}, fmt.Errorf("bench: concurrency %d: %w", level, err)
	}
	total := 0
	for _, n := range ntok {
		total += n
	}
	var mean float64
	for _, l := range lat {
		mean += l / float64(level)
	}
	return ConcurrencyResult{Level: level, Tokens: total, Seconds: wall, PerSecond: rate(total, wall),
		PerRequest: rate(total, wall) / float64(level), MeanLatencySec: mean}, nil
}

func prefix(ctx context.Context, e engine.Engine, p *prompts, n, shared, gen int) (PrefixResult, error) {
	head, err := p.unique(shared)
	if err != nil {
		return PrefixResult{}, err
	}
	tailA, err := p.unique(n - shared)
	if err != nil {
		return PrefixResult{}, err
	}
	tailB, err := p.unique(n - shared)
	if err != nil {
		return PrefixResult{}, err
	}
	a, err := e.Generate(ctx, engine.Request{Tokens: slices.Concat(head, tailA), MaxTokens: gen, NoCache: true, IgnoreEOG: true}, nil)
	if err != nil {
		return PrefixResult{}, fmt.Errorf("bench: prefix, first request: %w", err)
	}
	start := time.Now()
	b, err := e.Generate(ctx, engine.Request{Tokens: slices.Concat(head, tailB), MaxTokens: gen, IgnoreEOG: true}, nil)
	if err != nil {
		return PrefixResult{}, fmt.Errorf("bench: prefix, second request: %w", err)
	}
	whole := time.Since(start).Seconds()
	r := PrefixResult{PromptTokens: n, SharedTokens: shared,
		FirstPromptSeconds: a.Timings.PromptDuration.Seconds(), SecondPromptSeconds: b.Timings.PromptDuration.Seconds(),
		SecondCachedTokens: b.Timings.CachedTokens, RequestsPerHour: perHour(whole)}
	if r.SecondPromptSeconds > 0 {
		r.Speedup = r.FirstPromptSeconds / r.SecondPromptSeconds
	}
	return r, nil
}

// prompts makes token sequences that share no prefix with each other: a
// distinct numbered header, then filler text, cut to the length.
type prompts struct {
	ctx    context.Context
	e      engine.Engine
	n      int
	filler []int32
}

const fillerText = "Transaction review. The customer paid with a card issued abroad, shipping and billing " +
	"addresses differ, the device was first seen today, and the amount is well above the account's usual range. " +
	"Previous orders were delivered without disputes. Assess the fraud risk on a scale from 1 to 5. "

func (p *prompts) unique(n int) ([]int32, error) {
	if p.filler == nil {
		f, err := p.e.Tokenize(p.ctx, fillerText, false)
		if err != nil || len(f) == 0 {
			return nil, fmt.Errorf("bench: tokenize filler text: %v", err)
		}
		p.filler = f
	}
	p.n++
	head, err := p.e.Tokenize(p.ctx, fmt.Sprintf("Case %d-%d: ", p.n, time.Now().UnixNano()%100000), false)
	if err != nil {
		return nil, fmt.Errorf("bench: tokenize header: %w", err)
	}
	out := make([]int32, 0, n)
	out = append(out, head...)
	for len(out) < n {
		out = append(out, p.filler...)
	}
	return out[:n], nil
}

func rate(n int, secs float64) float64 {
	if n <= 0 || secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

func perHour(secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return 3600 / secs
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteTable writes r as an aligned text table.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	m := r.Model
	fmt.Fprintf(tw, "model\t%s (%s, %s, ctx %d, parallel %d, threads %d)\n", m.ID, m.Architecture, m.Engine, m.ContextLength, m.Parallel, m.Threads)
	for _, p := range r.Prompt {
		fmt.Fprintf(tw, "prompt %d tokens\t%.1f tok/s\t(%.3f s)\n", p.Tokens, p.PerSecond, p.Seconds)
	}
	if g := r.Generate; g != nil {
		fmt.Fprintf(tw, "generate %d tokens\t%.1f tok/s\t(%.3f s)\n", g.Tokens, g.PerSecond, g.Seconds)
	}
	for _, c := range r.Concurrency {
		fmt.Fprintf(tw, "concurrency %d\t%.1f tok/s total\t%.1f tok/s per request, mean latency %.3f s\n", c.Level, c.PerSecond, c.PerRequest, c.MeanLatencySec)
	}
	if f := r.Fleet; f != nil {
		fmt.Fprintf(tw, "fleet %d in / %d out\t%.0f requests/hour\t(%.3f s per request, prompt %.3f s)\n", f.PromptTokens, f.GenerateTokens, f.RequestsPerHour, f.Seconds, f.PromptSeconds)
	}
	if p := r.PrefixCache; p != nil {
		fmt.Fprintf(tw, "prefix cache %d/%d shared\t%.2fx prompt speedup\t(%.3f s -> %.3f s, %d cached; %.0f requests/hour)\n",
			p.SharedTokens, p.PromptTokens, p.Speedup, p.FirstPromptSeconds, p.SecondPromptSeconds, p.SecondCachedTokens, p.RequestsPerHour)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(tw, "note\t%s\n", strings.TrimSpace(n))
	}
	return tw.Flush()
}
