package goengine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/goengine/internal/observe"
)

// TestObserveKeepsResults: with the observation hook installed the engine computes the same logits, bit for
// bit (the graph only runs in more pieces), and Observe reports every weight product of every pass: each
// layer's projections once per pass, each with all of the pass's tokens.
func TestObserveKeepsResults(t *testing.T) {
	for _, spec := range []tinySpec{{arch: "qwen3", seed: 21}, {arch: "qwen35", layers: 4, seed: 22}} {
		t.Run(spec.arch, func(t *testing.T) {
			e := load(t, spec, Options{ContextLength: 64, BatchSize: 16})
			toks := testTokens(40, 256)
			plain := collectLogits(t, e, toks)

			seen := map[string]int{}
			forwardMu.Lock()
			h, err := observe.Install(e.m.Backend(), nil, func(p observe.Product) error {
				seen[p.Weight]++
				return nil
			})
			forwardMu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			hooked := collectLogits(t, e, toks)
			forwardMu.Lock()
			err = h.Remove()
			forwardMu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			for p := range plain {
				if !slices.Equal(plain[p], hooked[p]) {
					t.Fatalf("position %d: logits differ with the hook installed", p)
				}
			}
			if seen["blk.0.ffn_down.weight"] == 0 || seen["output.weight"] == 0 {
				t.Fatalf("products seen: %v", seen)
			}

			// Observe: passes of 16, 16 and 8 tokens; every product sees F32 rows of its weight's width.
			var passes []int
			rows := map[string]int{}
			err = e.Observe(context.Background(), toks, ObserveOptions{
				Batch: 16,
				Want:  func(w string, experts bool) bool { return strings.HasPrefix(w, "blk.") },
				Matmul: func(m Matmul) error {
					if !m.F32 || m.Indirect || m.Matrices != 1 {
						t.Errorf("%s: %+v", m.Weight, m)
					}
					if m.Weight == "blk.0.attn_norm.weight" || !strings.HasPrefix(m.Weight, "blk.") {
						t.Errorf("unwanted product %s", m.Weight)
					}
					n := 0
					for mat, x := range m.Rows {
						if mat != 0 || len(x) != m.Cols {
							t.Fatalf("%s: row of %d for matrix %d", m.Weight, len(x), mat)
						}
						n++
					}
					if m.Weight == "blk.0.attn_q.weight" || m.Weight == "blk.0.attn_qkv.weight" {
						passes = append(passes, n)
					}
					rows[m.Weight] += n
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(passes, []int{16, 16, 8}) {
				t.Errorf("first projection saw passes of %v tokens, want [16 16 8]", passes)
			}
			for w, n := range rows {
				if n != len(toks) {
					t.Errorf("%s saw %d rows, want %d", w, n, len(toks))
				}
			}
			// The engine is unchanged afterwards.
			again := collectLogits(t, e, toks)
			for p := range plain {
				if !slices.Equal(plain[p], again[p]) {
					t.Fatalf("position %d: logits differ after Observe", p)
				}
			}
		})
	}
}

// TestObserveStops: an error from the callback, or a cancelled context, stops the evaluation and is returned;
// the engine still answers afterwards.
func TestObserveStops(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 23}, Options{ContextLength: 64, BatchSize: 16})
	toks := testTokens(40, 256)
	boom := errors.New("boom")
	calls := 0
	err := e.Observe(context.Background(), toks, ObserveOptions{Want: func(string, bool) bool { return true },
		Matmul: func(Matmul) error { calls++; return boom }})
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("error %v after %d calls, want boom after 1", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = e.Observe(ctx, toks, ObserveOptions{Want: func(string, bool) bool { return true },
		Matmul: func(Matmul) error {
			if calls++; calls == 3 {
				cancel()
			}
			return nil
		}})
	if !errors.Is(err, context.Canceled) || calls != 3 {
		t.Fatalf("error %v after %d calls, want context.Canceled after 3", err, calls)
	}
	if err := e.Observe(context.Background(), toks, ObserveOptions{}); err != nil {
		t.Fatalf("plain evaluation: %v", err)
	}
	if err := e.Observe(context.Background(), nil, ObserveOptions{}); !errors.Is(err, engine.ErrEmptyPrompt) {
		t.Errorf("empty: %v", err)
	}
	var cl *engine.ContextLengthError
	if err := e.Observe(context.Background(), testTokens(65, 256), ObserveOptions{}); !errors.As(err, &cl) {
		t.Errorf("too long: %v", err)
	}
	if err := e.Observe(context.Background(), []int32{1, 9999}, ObserveOptions{}); err == nil {
		t.Error("token outside the vocabulary accepted")
	}
	collectLogits(t, e, toks)
}
