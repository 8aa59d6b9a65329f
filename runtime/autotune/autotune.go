package autotune

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
)

// Candidate is one setting to try.
type Candidate struct {
	Threads   int `json:"threads"`
	BatchSize int `json:"batch_size"`
}

func (c Candidate) String() string { return fmt.Sprintf("threads=%d batch=%d", c.Threads, c.BatchSize) }

// Workload is the request shape a setting is scored for.
type Workload struct {
	PromptTokens   int `json:"prompt_tokens"`
	GenerateTokens int `json:"generate_tokens"`
}

// FraudReview is the default Workload: a 7,000-token prompt and an 8-token
// answer, the prompt-heavy shape the fleet serves.
var FraudReview = Workload{PromptTokens: 7000, GenerateTokens: 8}

// Options configure Tune. Model and Load are required.
type Options struct {
	// Model is the model file; its fingerprint is part of the cache key.
	Model string
	// Candidates to measure; default DefaultCandidates(engine.NumCPU()).
	Candidates []Candidate
	// Load loads the model with a candidate's setting. Tune closes every
	// engine it loads before trying the next candidate.
	Load func(ctx context.Context, c Candidate) (engine.Engine, error)
	// CacheDir holds the cached results; "" disables the cache.
	CacheDir string
	// Log receives the table and the decision, one line per call; nil
	// discards them.
	Log func(string)

	// PromptTokens is the measured prompt length; default: the largest
	// candidate batch size, at least 128 (a prompt shorter than the batch
	// size cannot show the batch size's effect). GenerateTokens is the
	// measured decode length; default 16.
	PromptTokens, GenerateTokens int
	// Repeats of the measurement per candidate, keeping the fastest of each
	// rate; default 1. One short warm-up request always precedes them.
	Repeats int
	// Workload is the shape of the score; default FraudReview.
	Workload Workload
	// Version is the phonellm version in the cache key; default the main
	// module's version from the build info.
	Version string
	// HashModel fingerprints the model by its SHA-256 instead of its size
	// and modification time (reads the whole file once per start-up).
	HashModel bool
	// Force measures even when the cache has a result (and refreshes it).
	Force bool
	// Slower abandons a candidate once it has taken this many times as long as the fastest candidate so far
	// (plus Grace): its warm-up against the fastest warm-up, then each measured request against the fastest
	// one. Such a candidate cannot win, and an oversubscribed setting (more threads than free cores) can spin
	// for minutes: on a busy 2-core machine a 2-thread candidate took 40.9 s where 1 thread took 0.06 s. The
	// first candidate is the calibration and is never abandoned. Default 4; negative: never abandon.
	Slower float64
	// Grace is added to every such deadline, so that timer and scheduling noise on a fast candidate does not
	// abandon it; default 250 ms.
	Grace time.Duration
}

// Measurement is one candidate's row of the table.
type Measurement struct {
	Candidate
	// PromptPerSecond and GeneratePerSecond are the measured rates.
	PromptPerSecond   float64 `json:"prompt_per_second"`
	GeneratePerSecond float64 `json:"generate_per_second"`
	// Seconds is the score: Workload.PromptTokens / PromptPerSecond +
	// (Workload.GenerateTokens - 1) / GeneratePerSecond (the first token
	// comes from the prompt pass). Lower is better.
	Seconds float64 `json:"seconds"`
	// Error is set when the candidate failed to load or run, or was abandoned
	// as too slow; it then has no score.
	Error string `json:"error,omitempty"`
	// Abandoned is set when the candidate was stopped for taking Options.Slower
	// times as long as the fastest one.
	Abandoned bool `json:"abandoned,omitempty"`
}

// Result is the outcome of Tune.
type Result struct {
	Best     Candidate     `json:"best"`
	Table    []Measurement `json:"table"`
	Workload Workload      `json:"workload"`
	Key      Key           `json:"key"`
	// Cached is true when the result came from the cache; CachePath is the
	// cache file ("" without a cache dir).
	Cached    bool      `json:"-"`
	CachePath string    `json:"-"`
	Measured  time.Time `json:"measured"`
}

// DefaultCandidates are threads {1, n/2, n} (deduplicated) times batch sizes
// {128, 512}.
func DefaultCandidates(numCPU int) []Candidate {
	threads := []int{1}
	for _, t := range []int{numCPU / 2, numCPU} {
		if t > 0 && !slices.Contains(threads, t) {
			threads = append(threads, t)
		}
	}
	var cs []Candidate
	for _, t := range threads {
		for _, b := range []int{128, 512} {
			cs = append(cs, Candidate{Threads: t, BatchSize: b})
		}
	}
	return cs
}

func (o *Options) defaults() error {
	if o.Model == "" {
		return errors.New("autotune: no model path")
	}
	if o.Load == nil {
		return errors.New("autotune: no model loader")
	}
	if len(o.Candidates) == 0 {
		o.Candidates = DefaultCandidates(runtime.NumCPU())
	}
	for _, c := range o.Candidates {
		if c.Threads <= 0 || c.BatchSize <= 0 {
			return fmt.Errorf("autotune: candidate %s: threads and batch size must be positive", c)
		}
	}
	if o.PromptTokens < 0 || o.GenerateTokens < 0 || o.Repeats < 0 {
		return fmt.Errorf("autotune: negative prompt/generate tokens or repeats: %d/%d/%d", o.PromptTokens, o.GenerateTokens, o.Repeats)
	}
	if o.PromptTokens == 0 {
		o.PromptTokens = 128
		for _, c := range o.Candidates {
			o.PromptTokens = max(o.PromptTokens, c.BatchSize)
		}
	}
	if o.GenerateTokens == 0 {
		o.GenerateTokens = 16
	}
	if o.GenerateTokens < 2 {
		return fmt.Errorf("autotune: %d generated tokens cannot measure decoding (need at least 2)", o.GenerateTokens)
	}
	if o.Repeats == 0 {
		o.Repeats = 1
	}
	if o.Workload == (Workload{}) {
		o.Workload = FraudReview
	}
	if o.Workload.PromptTokens <= 0 || o.Workload.GenerateTokens <= 0 {
		return fmt.Errorf("autotune: workload %+v: prompt and generate tokens must be positive", o.Workload)
	}
	if o.Version == "" {
		o.Version = buildVersion()
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	if o.Slower == 0 {
		o.Slower = 4
	}
	if o.Slower > 0 && o.Slower < 1 {
		return fmt.Errorf("autotune: slower factor %g below 1 would abandon the fastest candidate", o.Slower)
	}
	if o.Grace == 0 {
		o.Grace = 250 * time.Millisecond
	}
	if o.Grace < 0 {
		return fmt.Errorf("autotune: negative grace %s", o.Grace)
	}
	return nil
}

// Tune returns the fastest candidate for o.Model on this machine, from the
// cache when it holds a result for the same key, else by measuring every
// candidate (and storing the result). A candidate that fails is reported in
// the table and skipped; Tune fails only when every candidate fails, the
// context ends, or the model cannot be fingerprinted. A cache that cannot be
// read or written is logged and otherwise ignored.
func Tune(ctx context.Context, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	key, err := makeKey(o)
	if err != nil {
		return Result{}, err
	}
	path := ""
	if o.CacheDir != "" {
		path = cachePath(o.CacheDir, key)
		if !o.Force {
			r, err := loadCache(path, key)
			switch {
			case err == nil:
				r.Cached, r.CachePath = true, path
				o.Log(fmt.Sprintf("autotune: cached result %s (measured %s): %s", path, r.Measured.Format(time.RFC3339), r.Best))
				return r, nil
			case !errors.Is(err, errNoCache):
				o.Log(fmt.Sprintf("autotune: ignoring cache: %v", err))
			}
		}
	}

	res := Result{Workload: o.Workload, Key: key, CachePath: path}
	o.Log(fmt.Sprintf("autotune: %s, %d candidates, %d-token prompt + %d tokens each, scored for %d in / %d out",
		o.Model, len(o.Candidates), o.PromptTokens, o.GenerateTokens, o.Workload.PromptTokens, o.Workload.GenerateTokens))
	best := -1
	var fastest pace
	for _, c := range o.Candidates {
		m, err := measure(ctx, o, c, &fastest)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return res, ctxErr
		}
		var slow *slowError
		switch {
		case errors.As(err, &slow):
			m = Measurement{Candidate: c, Error: err.Error(), Abandoned: true}
			o.Log(fmt.Sprintf("autotune: %s abandoned: %v", c, err))
		case err != nil:
			m = Measurement{Candidate: c, Error: err.Error()}
		}
		res.Table = append(res.Table, m)
		if m.Error == "" && (best < 0 || m.Seconds < res.Table[best].Seconds) {
			best = len(res.Table) - 1
		}
	}
	if best >= 0 {
		res.Best = res.Table[best].Candidate
	}
	for _, line := range strings.Split(strings.TrimRight(res.FormatTable(), "\n"), "\n") {
		o.Log("autotune: " + line)
	}
	if best < 0 {
		return res, fmt.Errorf("autotune: %s: every candidate failed (first: %s: %s)", o.Model, res.Table[0].Candidate, res.Table[0].Error)
	}
	res.Measured = time.Now().UTC()
	o.Log(fmt.Sprintf("autotune: best %s (%.3g s per %d-in/%d-out request)", res.Best, res.Table[best].Seconds,
		o.Workload.PromptTokens, o.Workload.GenerateTokens))
	if path != "" {
		if err := storeCache(path, res); err != nil {
			o.Log(fmt.Sprintf("autotune: cannot cache the result: %v", err))
		}
	}
	return res, nil
}

// pace is the fastest warm-up and request seen so far: the calibration the next candidates' deadlines scale.
type pace struct{ warm, request time.Duration }

// slowError is a candidate abandoned for being Options.Slower times slower than the fastest.
type slowError struct {
	what           string
	limit, fastest time.Duration
}

func (e *slowError) Error() string {
	return fmt.Sprintf("%s took more than %s, %s being the fastest candidate's: slower, so not waited for",
		e.what, e.limit.Round(time.Millisecond), e.fastest.Round(time.Millisecond))
}

// timed runs fn under a deadline of Slower × fastest + Grace (none while fastest is unknown or Slower < 0) and
// returns its duration; when the deadline passes, fn's context is cancelled (an engine stops at the end of its
// forward pass) and the error is a *slowError.
func timed(ctx context.Context, o Options, what string, fastest time.Duration, fn func(ctx context.Context) error) (time.Duration, error) {
	limit := time.Duration(0)
	if o.Slower > 0 && fastest > 0 {
		limit = time.Duration(o.Slower*float64(fastest)) + o.Grace
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	start := time.Now()
	err := fn(ctx)
	d := time.Since(start)
	if limit > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return d, &slowError{what: what, limit: limit, fastest: fastest}
	}
	return d, err
}

// measure loads the model with c, warms it up and times Repeats requests of
// PromptTokens + GenerateTokens, keeping the fastest rate of each kind. The
// warm-up and each request are abandoned past Options.Slower times the
// fastest so far (fastest is updated with this candidate's times).
func measure(ctx context.Context, o Options, c Candidate, fastest *pace) (m Measurement, err error) {
	m.Candidate = c
	e, err := o.Load(ctx, c)
	if err != nil {
		return m, fmt.Errorf("load: %w", err)
	}
	defer func() {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	n := o.PromptTokens
	if limit := e.Info().ContextLength - o.GenerateTokens; limit > 0 && n > limit {
		n = limit
	}
	filler, err := e.Tokenize(ctx, fillerText, false)
	if err != nil || len(filler) == 0 {
		return m, fmt.Errorf("tokenize the filler text: %v", err)
	}
	warm := filler[:min(8, len(filler))]
	dw, err := timed(ctx, o, "the warm-up", fastest.warm, func(ctx context.Context) error {
		_, err := e.Generate(ctx, engine.Request{Tokens: warm, MaxTokens: 2, NoCache: true, IgnoreEOG: true}, nil)
		return err
	})
	if err != nil {
		return m, fmt.Errorf("warm-up: %w", err)
	}
	if fastest.warm == 0 || dw < fastest.warm {
		fastest.warm = dw
	}
	for i := range o.Repeats {
		// A distinct first token per request keeps a prefix cache out of it.
		toks := make([]int32, 0, n+len(filler))
		toks = append(toks, filler[i%len(filler)])
		for len(toks) < n {
			toks = append(toks, filler...)
		}
		var r engine.Response
		dr, err := timed(ctx, o, "the request", fastest.request, func(ctx context.Context) error {
			var err error
			r, err = e.Generate(ctx, engine.Request{Tokens: toks[:n], MaxTokens: o.GenerateTokens, NoCache: true, IgnoreEOG: true}, nil)
			return err
		})
		if err != nil {
			return m, fmt.Errorf("generate: %w", err)
		}
		if fastest.request == 0 || dr < fastest.request {
			fastest.request = dr
		}
		m.PromptPerSecond = max(m.PromptPerSecond, r.Timings.PromptPerSecond())
		m.GeneratePerSecond = max(m.GeneratePerSecond, r.Timings.GeneratePerSecond())
	}
	if m.PromptPerSecond <= 0 || m.GeneratePerSecond <= 0 {
		return m, fmt.Errorf("engine reported no timings (prompt %.3g tok/s, generation %.3g tok/s)", m.PromptPerSecond, m.GeneratePerSecond)
	}
	m.Seconds = Score(o.Workload, m.PromptPerSecond, m.GeneratePerSecond)
	return m, nil
}

// Score is the estimated seconds of one request of shape w at the given
// rates: prompt evaluation plus w.GenerateTokens-1 decode steps.
func Score(w Workload, promptPerSecond, generatePerSecond float64) float64 {
	if promptPerSecond <= 0 || generatePerSecond <= 0 {
		return math.Inf(1)
	}
	return float64(w.PromptTokens)/promptPerSecond + float64(w.GenerateTokens-1)/generatePerSecond
}

const fillerText = "Transaction review. The customer paid with a card issued abroad, shipping and billing " +
	"addresses differ, the device was first seen today, and the amount is well above the account's usual range. " +
	"Previous orders were delivered without disputes. Assess the fraud risk on a scale from 1 to 5. "

// FormatTable renders the measurements, the best marked with "*".
func (r Result) FormatTable() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "  %7s %6s %13s %13s %14s\n", "threads", "batch", "prompt tok/s", "gen tok/s",
		fmt.Sprintf("s/%d+%d", r.Workload.PromptTokens, r.Workload.GenerateTokens))
	for _, m := range r.Table {
		mark := " "
		if m.Error == "" && m.Candidate == r.Best && r.Best != (Candidate{}) {
			mark = "*"
		}
		if m.Error != "" {
			fmt.Fprintf(&sb, "%s %7d %6d  failed: %s\n", mark, m.Threads, m.BatchSize, m.Error)
			continue
		}
		fmt.Fprintf(&sb, "%s %7d %6d %13.1f %13.1f %14.3f\n", mark, m.Threads, m.BatchSize, m.PromptPerSecond, m.GeneratePerSecond, m.Seconds)
	}
	return sb.String()
}
