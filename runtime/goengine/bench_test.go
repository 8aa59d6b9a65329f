package goengine

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/runtime/bench"
	"github.com/phonellm/phonellm/runtime/engine"
)

// TestQwen35PrefixCheckpoints: with a recurrent cache a prompt can resume
// only at a checkpoint. The second prompt sharing a long prefix ends a chunk
// where the two diverge, so the third resumes there; outputs always equal
// uncached ones.
func TestQwen35PrefixCheckpoints(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen35", layers: 4, seed: 21}, Options{ContextLength: 4096})
	// A second engine on the same file gives the uncached reference.
	ref, err := Load(context.Background(), Options{Path: e.Info().Path, Threads: 1, ContextLength: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	shared := slices.Repeat([]int32{104, 101, 108, 108, 111, 32}, 420) // 2520 tokens of "hello "
	var cached []int
	for i, b := range []int32{65, 70, 75} {
		req := engine.Request{Tokens: slices.Concat(shared, []int32{b, b + 1, b + 2, 10}), MaxTokens: 6}
		got, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.NoCache = true
		fresh, err := ref.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Tokens, fresh.Tokens) {
			t.Fatalf("request %d: cached %v, fresh %v", i, got.Tokens, fresh.Tokens)
		}
		cached = append(cached, got.Timings.CachedTokens)
	}
	// First: nothing cached. Second: the checkpoint after the first 512-token
	// batch. Third: the checkpoint the second placed where they diverge.
	if !slices.Equal(cached, []int{0, 512, len(shared)}) {
		t.Fatalf("cached tokens %v, want [0 512 %d]", cached, len(shared))
	}
}

func TestBenchOnTinyModel(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 31}, Options{Parallel: 2, ContextLength: 2048})
	r, err := bench.Run(context.Background(), e, bench.Options{PromptLengths: []int{256}, GenerateTokens: 16, FleetPromptTokens: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Prompt[0].PerSecond <= 0 || r.Generate.PerSecond <= 0 || len(r.Concurrency) != 2 || r.Fleet.RequestsPerHour <= 0 {
		t.Fatalf("%+v", r)
	}
	if p := r.PrefixCache; p.SecondCachedTokens < p.SharedTokens || p.SecondPromptSeconds >= p.FirstPromptSeconds {
		t.Fatalf("prefix cache %+v", p)
	}
}

// BenchmarkEngine runs bench.Run (PHONELLM_BENCH_THREADS threads, default
// 2; PHONELLM_BENCH_SKIP lists bench parts to leave out;
// PHONELLM_BENCH_FLASH_ATTENTION=1 turns it on, PHONELLM_BENCH_BATCH sets the
// batch size) on PHONELLM_BENCH_GGUF, or on a random
// qwen3 of 93 M parameters (the reference's test shape: 1024 wide, 8
// layers, 16/8 heads, ffn 2816; F16) written to a temp dir.
//
//	go test -run - -bench Engine -benchtime 1x ./runtime/goengine/
func BenchmarkEngine(b *testing.B) {
	path := os.Getenv("PHONELLM_BENCH_GGUF")
	if path == "" {
		path = writeTinyGGUF(b, b.TempDir(), tinySpec{arch: "qwen3", layers: 8, f16: true, seed: 1,
			embd: 1024, heads: 16, kvHeads: 8, headDim: 128, ff: 2816})
	}
	threads := 2
	if n, err := strconv.Atoi(os.Getenv("PHONELLM_BENCH_THREADS")); err == nil && n > 0 {
		threads = n
	}
	fa := os.Getenv("PHONELLM_BENCH_FLASH_ATTENTION") == "1"
	batch, _ := strconv.Atoi(os.Getenv("PHONELLM_BENCH_BATCH"))
	e, err := Load(context.Background(), Options{Path: path, Threads: threads, Parallel: 2, ContextLength: 8192, FlashAttention: fa, BatchSize: batch})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for b.Loop() {
		r, err := bench.Run(context.Background(), e, bench.Options{PromptLengths: []int{512}, GenerateTokens: 64, Concurrency: []int{1, 2},
			Skip: strings.Split(os.Getenv("PHONELLM_BENCH_SKIP"), ",")},
			func(s string) { fmt.Fprintln(os.Stderr, time.Now().Format(time.TimeOnly), s) })
		if err != nil {
			b.Fatal(err)
		}
		var sb strings.Builder
		r.WriteTable(&sb)
		b.Log("\n" + sb.String())
		if len(r.Prompt) > 0 {
			b.ReportMetric(r.Prompt[0].PerSecond, "prompt-tok/s")
		}
		if r.Generate != nil {
			b.ReportMetric(r.Generate.PerSecond, "gen-tok/s")
		}
		if r.Fleet != nil {
			b.ReportMetric(r.Fleet.RequestsPerHour, "fleet-req/h")
		}
		if r.PrefixCache != nil {
			b.ReportMetric(r.PrefixCache.Speedup, "prefix-speedup")
		}
	}
}

// TestCompareWithLlamaCpp runs bench.Compare (the engine against
// node-llama-cpp on the same file: a warm-up each, then three timed runs
// alternating with node-llama-cpp kept loaded) on a tiny model; it needs
// the oracle.
func TestCompareWithLlamaCpp(t *testing.T) {
	dir := oracle.RequireModule(t, oracle.EnvDir, "node-llama-cpp/package.json")
	e := load(t, tinySpec{arch: "qwen3", seed: 51}, Options{ContextLength: 1024})
	r, err := bench.Compare(context.Background(), e, bench.CompareOptions{OracleDir: dir, PromptTokens: 200, GenerateTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	if !r.SameTokens || r.Repeats != 3 || r.EnginePromptPerSec <= 0 || r.LlamaCppPromptPerSec <= 0 || r.PromptRatio <= 0 || r.GenerateRatio <= 0 {
		t.Fatalf("%+v", r)
	}
	t.Logf("engine/llama.cpp: prompt %.2f, generate %.2f", r.PromptRatio, r.GenerateRatio)
}

// BenchmarkCompareWithLlamaCpp: bench.Compare on PHONELLM_BENCH_GGUF (or
// the 93 M-parameter random qwen3), 512 prompt + 64 generated tokens.
func BenchmarkCompareWithLlamaCpp(b *testing.B) {
	path := os.Getenv("PHONELLM_BENCH_GGUF")
	if path == "" {
		path = writeTinyGGUF(b, b.TempDir(), tinySpec{arch: "qwen3", layers: 8, f16: true, seed: 1,
			embd: 1024, heads: 16, kvHeads: 8, headDim: 128, ff: 2816})
	}
	threads := 2
	if n, err := strconv.Atoi(os.Getenv("PHONELLM_BENCH_THREADS")); err == nil && n > 0 {
		threads = n
	}
	e, err := Load(context.Background(), Options{Path: path, Threads: threads, ContextLength: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for b.Loop() {
		r, err := bench.Compare(context.Background(), e, bench.CompareOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%+v", r)
		b.ReportMetric(r.PromptRatio, "prompt-ratio")
		b.ReportMetric(r.GenerateRatio, "gen-ratio")
	}
}
