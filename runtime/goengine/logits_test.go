package goengine

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/runtime/engine"
)

func collectLogits(t *testing.T, e *Engine, toks []int32) [][]float32 {
	t.Helper()
	var rows [][]float32
	err := e.Logits(context.Background(), toks, func(pos int, l []float32) error {
		if pos != len(rows) {
			t.Fatalf("position %d after %d rows", pos, len(rows))
		}
		rows = append(rows, slices.Clone(l))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func testTokens(n, vocab int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32((i*37 + 11) % vocab)
	}
	return toks
}

// TestLogitsMatchesOracle: every position's logits, evaluated in several forward passes (batch 16 for 45
// tokens), equal upstream llama.cpp's for the same file and tokens, within the F16 KV cache's error, and the
// most likely token agrees wherever llama.cpp's top-1 margin is clear.
func TestLogitsMatchesOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp")
	}
	o := oracle.Shared(t)
	for _, spec := range []tinySpec{{arch: "qwen3", seed: 7}, {arch: "qwen35", layers: 4, seed: 8}} {
		t.Run(spec.arch, func(t *testing.T) {
			e := load(t, spec, Options{ContextLength: 128, BatchSize: 16})
			toks := testTokens(45, 256)
			rows := collectLogits(t, e, toks)
			ints := make([]int, len(toks))
			for i, v := range toks {
				ints[i] = int(v)
			}
			want, err := o.LogitsAll(e.info.Path, ints)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(want) {
				t.Fatalf("%d rows, llama.cpp %d", len(rows), len(want))
			}
			var worst float64
			for p := range rows {
				if len(rows[p]) != len(want[p]) {
					t.Fatalf("position %d: %d logits, llama.cpp %d", p, len(rows[p]), len(want[p]))
				}
				for i := range rows[p] {
					worst = max(worst, math.Abs(float64(rows[p][i]-want[p][i])))
				}
				best, second := top2(want[p])
				if want[p][best]-want[p][second] > 0.05 && argmaxF(rows[p]) != best {
					t.Errorf("position %d: top-1 %d, llama.cpp %d", p, argmaxF(rows[p]), best)
				}
			}
			t.Logf("max |Δlogit| vs llama.cpp over %d positions: %.4g", len(rows), worst)
			if worst > 1e-2 {
				t.Errorf("max |Δlogit| %.4g above 1e-2", worst)
			}
		})
	}
}

func argmaxF(v []float32) int {
	b := 0
	for i, x := range v {
		if x > v[b] {
			b = i
		}
	}
	return b
}

func top2(v []float32) (int, int) {
	b, s := 0, 1
	if v[s] > v[b] {
		b, s = s, b
	}
	for i := 2; i < len(v); i++ {
		switch {
		case v[i] > v[b]:
			b, s = i, b
		case v[i] > v[s]:
			s = i
		}
	}
	return b, s
}

// TestLogitsChunking: the rows do not depend on where forward passes split the sequence (batch 7 against one
// pass), and the last row agrees with what Generate samples greedily from the same prompt.
func TestLogitsChunking(t *testing.T) {
	for _, spec := range []tinySpec{{arch: "qwen3", seed: 9}, {arch: "qwen35", layers: 4, seed: 10}} {
		t.Run(spec.arch, func(t *testing.T) {
			path := writeTinyGGUF(t, t.TempDir(), spec)
			one, err := Load(context.Background(), Options{Path: path, Threads: 1, ContextLength: 64, BatchSize: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			split, err := Load(context.Background(), Options{Path: path, Threads: 1, ContextLength: 64, BatchSize: 7})
			if err != nil {
				t.Fatal(err)
			}
			defer split.Close()
			toks := testTokens(30, 256)
			a, b := collectLogits(t, one, toks), collectLogits(t, split, toks)
			var worst float64
			for p := range a {
				for i := range a[p] {
					worst = max(worst, math.Abs(float64(a[p][i]-b[p][i])))
				}
			}
			if worst > 1e-2 {
				t.Errorf("max |Δlogit| between batch 64 and batch 7: %.4g", worst)
			}
			resp, err := one.Generate(context.Background(), engine.Request{Tokens: toks, MaxTokens: 1, IgnoreEOG: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Tokens) != 1 || int(resp.Tokens[0]) != argmaxF(a[len(a)-1]) {
				t.Errorf("Generate after Logits sampled %v, argmax of the last row is %d", resp.Tokens, argmaxF(a[len(a)-1]))
			}
			// A second Logits call after Generate (which left its prompt in the slot) starts from scratch.
			c := collectLogits(t, one, toks)
			for p := range a {
				if !slices.Equal(a[p], c[p]) {
					t.Fatalf("position %d differs between two Logits calls", p)
				}
			}
		})
	}
}

func TestLogitsErrors(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 11}, Options{ContextLength: 32, BatchSize: 8, Parallel: 2})
	ctx := context.Background()
	noop := func(int, []float32) error { return nil }
	if err := e.Logits(ctx, nil, noop); !errors.Is(err, engine.ErrEmptyPrompt) {
		t.Errorf("empty: %v", err)
	}
	var cl *engine.ContextLengthError
	if err := e.Logits(ctx, testTokens(33, 256), noop); !errors.As(err, &cl) {
		t.Errorf("33 tokens in a 32-token context: %v", err)
	}
	if err := e.Logits(ctx, []int32{1, 1 << 20}, noop); err == nil {
		t.Error("token outside the vocabulary accepted")
	}
	stop := errors.New("stop")
	calls := 0
	err := e.Logits(ctx, testTokens(20, 256), func(pos int, _ []float32) error {
		calls++
		if pos == 9 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 10 {
		t.Errorf("callback error: got %v after %d calls, want stop after 10", err, calls)
	}
	// Logits waits for running generations and blocks new ones while it runs; both finish.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Generate(ctx, engine.Request{Tokens: testTokens(6, 256), MaxTokens: 8, IgnoreEOG: true}, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	n := 0
	if err := e.Logits(ctx, testTokens(32, 256), func(int, []float32) error { n++; return nil }); err != nil || n != 32 {
		t.Errorf("Logits alongside Generate: %v, %d rows", err, n)
	}
	wg.Wait()
	cctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	<-cctx.Done()
	if err := e.Logits(cctx, testTokens(4, 256), noop); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled: %v", err)
	}
}
