package autotune

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// closeCounter counts Close calls of the engines it loaded.
type closeCounter struct {
	*enginetest.Fake
	closed *int
	mu     *sync.Mutex
}

func (c closeCounter) Close() error {
	c.mu.Lock()
	*c.closed++
	c.mu.Unlock()
	return c.Fake.Close()
}

// fakeLab loads fakes whose per-token delays depend on the candidate.
type fakeLab struct {
	delays        map[Candidate][2]time.Duration // prompt, token
	fail          map[Candidate]error
	mu            sync.Mutex
	loads, closed int
}

func (l *fakeLab) load(ctx context.Context, c Candidate) (engine.Engine, error) {
	l.mu.Lock()
	l.loads++
	l.mu.Unlock()
	if err := l.fail[c]; err != nil {
		return nil, err
	}
	d, ok := l.delays[c]
	if !ok {
		return nil, errors.New("no delays for candidate")
	}
	f := enginetest.NewFake(enginetest.Options{PromptDelay: d[0], TokenDelay: d[1], ContextLength: 4096})
	return closeCounter{Fake: f, closed: &l.closed, mu: &l.mu}, nil
}

var (
	slowAll    = Candidate{Threads: 1, BatchSize: 128}
	fastPrompt = Candidate{Threads: 2, BatchSize: 512}
	fastDecode = Candidate{Threads: 2, BatchSize: 128}
)

// newLab: fastPrompt wins the prompt-heavy score although fastDecode
// generates 20 times faster.
func newLab() *fakeLab {
	return &fakeLab{delays: map[Candidate][2]time.Duration{
		slowAll:    {100 * time.Microsecond, 2 * time.Millisecond},
		fastPrompt: {25 * time.Microsecond, 4 * time.Millisecond},
		fastDecode: {200 * time.Microsecond, 200 * time.Microsecond},
	}}
}

func testOptions(t *testing.T, lab *fakeLab, log *[]string) Options {
	t.Helper()
	model := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(model, []byte("GGUF not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	return Options{
		Model: model, Candidates: []Candidate{slowAll, fastPrompt, fastDecode}, Load: lab.load,
		PromptTokens: 200, GenerateTokens: 4, Version: "v-test",
		Log: func(s string) { *log = append(*log, s) },
	}
}

func TestTunePicksFastestForPromptHeavyShape(t *testing.T) {
	lab := newLab()
	var log []string
	o := testOptions(t, lab, &log)
	r, err := Tune(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Best != fastPrompt {
		t.Fatalf("best %s, want %s\n%s", r.Best, fastPrompt, r.FormatTable())
	}
	if len(r.Table) != 3 || r.Cached || r.CachePath != "" {
		t.Fatalf("result %+v", r)
	}
	byC := map[Candidate]Measurement{}
	for _, m := range r.Table {
		if m.Error != "" || m.PromptPerSecond <= 0 || m.GeneratePerSecond <= 0 {
			t.Fatalf("measurement %+v", m)
		}
		if want := Score(FraudReview, m.PromptPerSecond, m.GeneratePerSecond); m.Seconds != want {
			t.Fatalf("%s: score %v, want %v", m.Candidate, m.Seconds, want)
		}
		byC[m.Candidate] = m
	}
	// The shape matters: the decode-fast candidate really is the fastest
	// generator, and the prompt-fast one the fastest prompt evaluator.
	if byC[fastDecode].GeneratePerSecond <= byC[fastPrompt].GeneratePerSecond {
		t.Fatalf("fake delays not reflected: %+v", byC)
	}
	if byC[fastPrompt].PromptPerSecond <= byC[slowAll].PromptPerSecond {
		t.Fatalf("fake delays not reflected: %+v", byC)
	}
	// 200 prompt tokens at 25 µs each: at most 40,000 tok/s.
	if pp := byC[fastPrompt].PromptPerSecond; pp > 40000*1.01 {
		t.Fatalf("prompt rate %.0f tok/s faster than the fake's delay allows", pp)
	}
	if lab.loads != 3 || lab.closed != 3 {
		t.Fatalf("loads %d closes %d, want 3 and 3", lab.loads, lab.closed)
	}
	all := strings.Join(log, "\n")
	t.Log("\n" + all)
	for _, want := range []string{"prompt tok/s", "s/7000+8", "best threads=2 batch=512", "*       2    512"} {
		if !strings.Contains(all, want) {
			t.Fatalf("log lacks %q:\n%s", want, all)
		}
	}
}

func TestTuneCache(t *testing.T) {
	lab := newLab()
	var log []string
	o := testOptions(t, lab, &log)
	o.CacheDir = filepath.Join(t.TempDir(), "cache")
	ctx := context.Background()

	first, err := Tune(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if first.Cached || first.CachePath == "" {
		t.Fatalf("first run: cached=%v path=%q", first.Cached, first.CachePath)
	}
	if _, err := os.Stat(first.CachePath); err != nil {
		t.Fatalf("no cache file: %v", err)
	}
	if first.Key.CPU == "" || first.Key.NumCPU <= 0 || first.Key.Version != "v-test" || first.Key.ModelSize != int64(len("GGUF not really")) {
		t.Fatalf("key %+v", first.Key)
	}

	t.Run("hit", func(t *testing.T) {
		loads := lab.loads
		r, err := Tune(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Cached || r.Best != first.Best || lab.loads != loads || len(r.Table) != 3 || !r.Measured.Equal(first.Measured) {
			t.Fatalf("cached=%v best=%s loads %d->%d", r.Cached, r.Best, loads, lab.loads)
		}
	})

	miss := func(t *testing.T, o Options) Result {
		t.Helper()
		loads := lab.loads
		r, err := Tune(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if r.Cached || lab.loads != loads+3 {
			t.Fatalf("cached=%v loads %d->%d, want a new measurement", r.Cached, loads, lab.loads)
		}
		return r
	}
	t.Run("other version", func(t *testing.T) {
		o := o
		o.Version = "v-other"
		if r := miss(t, o); r.CachePath == first.CachePath {
			t.Fatal("same cache file for another version")
		}
	})
	t.Run("other candidates", func(t *testing.T) {
		o := o
		o.Candidates = []Candidate{fastDecode, fastPrompt, slowAll}
		miss(t, o)
	})
	t.Run("force", func(t *testing.T) {
		o := o
		o.Force = true
		miss(t, o)
	})
	t.Run("corrupt", func(t *testing.T) {
		if err := os.WriteFile(first.CachePath, []byte(`{"best": {"threads": 1`), 0o644); err != nil {
			t.Fatal(err)
		}
		log = nil
		miss(t, o)
		if !strings.Contains(strings.Join(log, "\n"), "ignoring cache") {
			t.Fatalf("corrupt cache not reported:\n%s", strings.Join(log, "\n"))
		}
		// Re-measuring rewrote it.
		if r, err := Tune(ctx, o); err != nil || !r.Cached {
			t.Fatalf("after rewrite: cached=%v err=%v", r.Cached, err)
		}
	})
	t.Run("tampered best", func(t *testing.T) {
		b, err := os.ReadFile(first.CachePath)
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), `"best": {
    "threads": 2,
    "batch_size": 512`, `"best": {
    "threads": 64,
    "batch_size": 512`, 1))
		if !strings.Contains(string(b), `"threads": 64`) {
			t.Fatalf("cache layout changed:\n%s", b)
		}
		if err := os.WriteFile(first.CachePath, b, 0o644); err != nil {
			t.Fatal(err)
		}
		miss(t, o)
	})
	t.Run("model changed", func(t *testing.T) {
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(o.Model, later, later); err != nil {
			t.Fatal(err)
		}
		miss(t, o)
	})
	t.Run("sha256 key", func(t *testing.T) {
		o := o
		o.HashModel = true
		r := miss(t, o)
		// sha256("GGUF not really")
		if len(r.Key.ModelSHA256) != 64 || !r.Key.ModelModTime.IsZero() {
			t.Fatalf("key %+v", r.Key)
		}
		// Touching the file does not invalidate a content-hashed key.
		later := time.Now().Add(2 * time.Hour)
		if err := os.Chtimes(o.Model, later, later); err != nil {
			t.Fatal(err)
		}
		if r, err := Tune(ctx, o); err != nil || !r.Cached {
			t.Fatalf("cached=%v err=%v", r.Cached, err)
		}
	})
}

func TestTuneFailingCandidates(t *testing.T) {
	lab := newLab()
	lab.fail = map[Candidate]error{fastPrompt: errors.New("out of memory")}
	var log []string
	o := testOptions(t, lab, &log)
	r, err := Tune(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Best == fastPrompt || r.Best == (Candidate{}) {
		t.Fatalf("best %s", r.Best)
	}
	i := slices.IndexFunc(r.Table, func(m Measurement) bool { return m.Candidate == fastPrompt })
	if i < 0 || !strings.Contains(r.Table[i].Error, "out of memory") {
		t.Fatalf("table %+v", r.Table)
	}
	if !strings.Contains(strings.Join(log, "\n"), "failed: load: out of memory") {
		t.Fatalf("failure not in the logged table:\n%s", strings.Join(log, "\n"))
	}

	lab.fail = map[Candidate]error{slowAll: errors.New("a"), fastPrompt: errors.New("b"), fastDecode: errors.New("c")}
	if _, err := Tune(context.Background(), o); err == nil || !strings.Contains(err.Error(), "every candidate failed") {
		t.Fatalf("all failing: err %v", err)
	}
}

func TestTuneCancelled(t *testing.T) {
	lab := newLab()
	var log []string
	o := testOptions(t, lab, &log)
	ctx, cancel := context.WithCancel(context.Background())
	o.Load = func(ctx context.Context, c Candidate) (engine.Engine, error) {
		cancel()
		return lab.load(ctx, c)
	}
	if _, err := Tune(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if lab.loads != 1 || lab.closed != 1 {
		t.Fatalf("loads %d closes %d after cancel", lab.loads, lab.closed)
	}
}

func TestOptionsValidation(t *testing.T) {
	lab := newLab()
	var log []string
	base := testOptions(t, lab, &log)
	for name, mod := range map[string]func(*Options){
		"no model":        func(o *Options) { o.Model = "" },
		"missing model":   func(o *Options) { o.Model += ".missing" },
		"no loader":       func(o *Options) { o.Load = nil },
		"zero threads":    func(o *Options) { o.Candidates = []Candidate{{Threads: 0, BatchSize: 128}} },
		"one token":       func(o *Options) { o.GenerateTokens = 1 },
		"negative repeat": func(o *Options) { o.Repeats = -1 },
	} {
		o := base
		mod(&o)
		if _, err := Tune(context.Background(), o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if lab.loads != 0 {
		t.Fatalf("invalid options loaded %d engines", lab.loads)
	}
}

func TestDefaults(t *testing.T) {
	for n, want := range map[int][]int{1: {1}, 2: {1, 2}, 3: {1, 3}, 8: {1, 4, 8}} {
		cs := DefaultCandidates(n)
		var threads []int
		for i, c := range cs {
			if c.BatchSize != []int{128, 512}[i%2] {
				t.Fatalf("n=%d: %v", n, cs)
			}
			if i%2 == 0 {
				threads = append(threads, c.Threads)
			}
		}
		if !slices.Equal(threads, want) {
			t.Errorf("n=%d: threads %v, want %v", n, threads, want)
		}
	}
	o := Options{Model: "m", Load: newLab().load, Candidates: []Candidate{{1, 128}, {2, 1024}}}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.PromptTokens != 1024 || o.GenerateTokens != 16 || o.Repeats != 1 || o.Workload != FraudReview || o.Version == "" {
		t.Fatalf("defaults %+v", o)
	}
}

func TestScore(t *testing.T) {
	// 7000 tokens at 1000 tok/s plus 7 decode steps at 10 tok/s.
	if got := Score(FraudReview, 1000, 10); math.Abs(got-7.7) > 1e-12 {
		t.Fatalf("score %v, want 7.7", got)
	}
	if !math.IsInf(Score(FraudReview, 0, 10), 1) {
		t.Fatal("zero rate must score +Inf")
	}
}

func TestCPUModel(t *testing.T) {
	cpuInfoPath := filepath.Join(t.TempDir(), "cpuinfo")
	if got := cpuModel(cpuInfoPath); got != "unknown" {
		t.Fatalf("missing file: %q", got)
	}
	info := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n\nprocessor\t: 1\nmodel name\t: other\n"
	if err := os.WriteFile(cpuInfoPath, []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cpuModel(cpuInfoPath); got != "Intel(R) Xeon(R) CPU @ 2.20GHz" {
		t.Fatalf("cpu model %q", got)
	}
}
