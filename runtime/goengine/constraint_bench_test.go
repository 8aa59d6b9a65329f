package goengine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/benchdata"
	"github.com/phonellm/phonellm/internal/testkit/realvocab"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// BenchmarkConstraintOverhead measures what constrained decoding costs per
// generated token (issue 18: RISK_LEVEL choices at most 10 % more than
// unconstrained, a 10-property JSON schema at most 25 %). Each round
// generates under the constraint, then the same number of tokens without
// one from the same cached prompt (and the next round in the other order),
// so both sides share the machine's load; it reports the ratios of CPU
// time (getrusage, all threads) and of wall time per token, and the load
// average before and after.
//
// The "model" part runs PHONELLM_BENCH_GGUF, else the Qwen3-0.6B-shaped
// files that `phonellm bench quantize` generates into $PHONELLM_HOME/bench
// (Q4_K_M if quantized, else F16; see docs/benchmarks.md), else a random
// 93 M qwen3. Those files carry a padded stand-in vocabulary, so the
// grammar's own work (the vocabulary trie, the masks) is far smaller than
// over Qwen's real one: the "realvocab" part runs the same rounds on a tiny
// model with Qwen3's real 151,936-row vocabulary (internal/testkit/realvocab;
// skipped without its npm package), where the forward pass is negligible,
// so the difference between its two sides is the constraint's whole cost
// per token over the real vocabulary (a random model's picks are refused
// at most steps: the sampler's slow path, the worst case). The benchmark
// then adds that cost to the model's unconstrained CPU time per token and
// reports the resulting ratios (projected-*-cpu-ratio): what the model
// with Qwen's real vocabulary pays.
//
// PHONELLM_BENCH_THREADS sets the threads (default 2), PHONELLM_BENCH_ROUNDS
// the rounds (default 6).
//
//	go test -run '^$' -bench ConstraintOverhead -benchtime 1x ./runtime/goengine/
func BenchmarkConstraintOverhead(b *testing.B) {
	threads := 2
	if n, err := strconv.Atoi(os.Getenv("PHONELLM_BENCH_THREADS")); err == nil && n > 0 {
		threads = n
	}
	rounds := 6
	if n, err := strconv.Atoi(os.Getenv("PHONELLM_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	// The real vocabulary's part first (its model is tiny: more rounds, for
	// a steadier figure), so that the model's part can report the projection.
	var real map[string][2]overheadSide
	b.Run("realvocab", func(b *testing.B) {
		real = constraintOverhead(b, realvocab.GGUF(b), threads, max(rounds, 24))
	})
	b.Run("model", func(b *testing.B) {
		path := os.Getenv("PHONELLM_BENCH_GGUF")
		for _, name := range []string{"qwen3-0.6b-shape-Q4_K_M.gguf", "qwen3-0.6b-shape-F16.gguf"} {
			if p := filepath.Join(benchdata.Dir(), name); path == "" && fileExists(p) {
				path = p
			}
		}
		if path == "" {
			b.Log("no 0.6B-shaped model in", benchdata.Dir(), "(run `phonellm bench quantize`): using a random 93 M qwen3")
			path = writeTinyGGUF(b, b.TempDir(), tinySpec{arch: "qwen3", layers: 8, f16: true, seed: 1,
				embd: 1024, heads: 16, kvHeads: 8, headDim: 128, ff: 2816})
		}
		model := constraintOverhead(b, path, threads, rounds)
		if real == nil {
			return
		}
		for _, name := range []string{"risk", "json10"} {
			m, r := model[name], real[name]
			cost := r[0].cpuPerToken() - r[1].cpuPerToken()
			ratio := (m[1].cpuPerToken() + cost) / m[1].cpuPerToken()
			b.Logf("%s: over the real vocabulary the constraint costs %+.3f ms CPU/token (%.3f constrained, %.3f not); with the model's unconstrained %.2f ms/token: projected CPU ratio %.3f",
				name, cost/1e6, r[0].cpuPerToken()/1e6, r[1].cpuPerToken()/1e6, m[1].cpuPerToken()/1e6, ratio)
			b.ReportMetric(ratio, "projected-"+name+"-cpu-ratio")
		}
	})
}

// overheadSide sums one side (constrained or not) of the rounds.
type overheadSide struct {
	cpu, wall time.Duration
	tokens    int
}

func (s overheadSide) cpuPerToken() float64  { return float64(s.cpu) / float64(max(s.tokens, 1)) }
func (s overheadSide) wallPerToken() float64 { return float64(s.wall) / float64(max(s.tokens, 1)) }

// constraintOverhead runs the alternating rounds on the model at path for
// RISK_LEVEL choices ("risk") and the 10-property schema ("json10"),
// reports the ratios, and returns each constraint's sides (constrained,
// unconstrained).
func constraintOverhead(b *testing.B, path string, threads, rounds int) map[string][2]overheadSide {
	e, err := Load(context.Background(), Options{Path: path, Threads: threads, ContextLength: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	prompt, err := e.Tokenize(context.Background(), "<|im_start|>user\nA card payment of 900 EUR at 3am from a new device. Rate the fraud risk.<|im_end|>\n<|im_start|>assistant\n", false)
	if err != nil {
		b.Fatal(err)
	}
	levels := []string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"}
	risk, err := grammar.Choices(levels)
	if err != nil {
		b.Fatal(err)
	}
	schema, err := grammar.FromJSONSchema([]byte(tenPropertySchema))
	if err != nil {
		b.Fatal(err)
	}
	// Warm up: the vocabulary's trie and the first forward passes.
	if _, err := e.Generate(context.Background(), engine.Request{Tokens: prompt, MaxTokens: 4, Constraint: risk}, nil); err != nil {
		b.Fatal(err)
	}
	out := map[string][2]overheadSide{}
	for b.Loop() {
		load0 := loadAverage()
		for _, c := range []struct {
			name string
			g    *grammar.Grammar
		}{{"risk", risk}, {"json10", schema}} {
			var side [2]overheadSide
			k := 0
			for r := range rounds {
				seed := uint64(r)
				p := engine.SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, Seed: &seed}
				con := engine.Request{Tokens: prompt, MaxTokens: 256, Constraint: c.g, Sampling: p}
				free := engine.Request{Tokens: prompt, IgnoreEOG: true, Sampling: p}
				run := func(i int, req engine.Request) int {
					cpu0, t0 := cpuTime(), time.Now()
					resp, err := e.Generate(context.Background(), req, nil)
					if err != nil {
						b.Fatal(err)
					}
					side[i].cpu += cpuTime() - cpu0
					side[i].wall += time.Since(t0)
					side[i].tokens += resp.Timings.GeneratedTokens
					fmt.Fprintf(os.Stderr, "%s %s round %d: %d tokens in %v\n", time.Now().Format(time.TimeOnly), c.name, r, resp.Timings.GeneratedTokens, time.Since(t0).Round(time.Millisecond))
					return resp.Timings.GeneratedTokens
				}
				if r%2 == 0 {
					k = run(0, con)
					free.MaxTokens = k
					run(1, free)
				} else {
					// The unconstrained side first, as long as the last constrained run.
					free.MaxTokens = k
					run(1, free)
					k = run(0, con)
				}
			}
			cpuRatio := side[0].cpuPerToken() / side[1].cpuPerToken()
			wallRatio := side[0].wallPerToken() / side[1].wallPerToken()
			b.Logf("%s: constrained %d tokens, %.2f ms CPU/token, %.2f ms wall/token; unconstrained %d tokens, %.2f ms CPU/token, %.2f ms wall/token; ratio CPU %.3f, wall %.3f",
				c.name, side[0].tokens, side[0].cpuPerToken()/1e6, side[0].wallPerToken()/1e6,
				side[1].tokens, side[1].cpuPerToken()/1e6, side[1].wallPerToken()/1e6, cpuRatio, wallRatio)
			b.ReportMetric(cpuRatio, c.name+"-cpu-ratio")
			b.ReportMetric(wallRatio, c.name+"-wall-ratio")
			out[c.name] = side
		}
		b.Logf("model %s, %d threads; load average before %s, after %s", filepath.Base(path), threads, load0, loadAverage())
	}
	return out
}

// tenPropertySchema is a 10-property object whose values are all bounded,
// so a random model finishes it.
const tenPropertySchema = `{"type":"object","properties":{
	"risk_level":{"type":"integer","minimum":1,"maximum":5},
	"flagged":{"type":"boolean"},
	"channel":{"enum":["card","wire","wallet"]},
	"country":{"type":"string","maxLength":3},
	"amount":{"type":"integer","minimum":0,"maximum":99999},
	"night":{"type":"boolean"},
	"new_device":{"type":"boolean"},
	"velocity":{"type":"integer","minimum":0,"maximum":99},
	"reason":{"type":"string","maxLength":12},
	"action":{"enum":["allow","review","block"]}},
	"required":["risk_level","flagged","channel","country","amount","night","new_device","velocity","reason","action"]}`

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return fmt.Sprintf("%s %s %s", f[0], f[1], f[2])
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
