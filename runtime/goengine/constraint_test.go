package goengine

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// TestChoicesOnTinyModel: greedy and temperature sampling through the
// engine with a choices constraint produce only the allowed answers, and
// stop at the answer without sampling an end-of-generation token.
func TestChoicesOnTinyModel(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 18}, Options{ContextLength: 512})
	levels := []string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"}
	g, err := grammar.Choices(levels)
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := e.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "user", Content: "Transaction: 900 EUR at 3am. Risk?"}},
		engine.TemplateOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	params := []engine.SamplingParams{engine.Greedy()}
	for seed := range uint64(24) {
		params = append(params, engine.SamplingParams{Temperature: 1.5, TopK: 40, Seed: &seed})
	}
	for _, p := range params {
		r, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, Sampling: p, Constraint: g}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(levels, r.Text) || r.FinishReason != engine.FinishStop {
			t.Fatalf("%+v: %q (%s)", p, r.Text, r.FinishReason)
		}
		if r.Timings.GeneratedTokens != len(r.Tokens) {
			t.Fatalf("%d tokens sampled for %d generated: an end-of-generation token was sampled after the answer", r.Timings.GeneratedTokens, len(r.Tokens))
		}
		seen[r.Text] = true
	}
	if len(seen) < 2 {
		t.Fatalf("temperature 1.5 gave only %v", seen)
	}
}

// TestLogprobsAgreeWithLogits: the recorded log-probabilities (model
// source) are the log-softmax of the logits the engine computes for the
// same context (Logits), to 1e-4 in probability.
func TestLogprobsAgreeWithLogits(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 19}, Options{ContextLength: 512})
	prompt, _ := e.Tokenize(context.Background(), "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n", false)
	seed := uint64(5)
	r, err := e.Generate(context.Background(), engine.Request{Tokens: prompt, MaxTokens: 8, IgnoreEOG: true,
		Sampling: engine.SamplingParams{Temperature: 1, Seed: &seed, RepeatPenalty: 1.3},
		Logprobs: &engine.LogprobOptions{Top: 5}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Logprobs) != len(r.Tokens) || len(r.Tokens) != 8 {
		t.Fatalf("%d records for %d tokens", len(r.Logprobs), len(r.Tokens))
	}
	all := append(slices.Clone(prompt), r.Tokens...)
	err = e.Logits(context.Background(), all[:len(all)-1], func(pos int, logits []float32) error {
		step := pos - (len(prompt) - 1)
		if step < 0 {
			return nil
		}
		maxl := math.Inf(-1)
		for _, v := range logits {
			maxl = math.Max(maxl, float64(v))
		}
		var sum float64
		for _, v := range logits {
			sum += math.Exp(float64(v) - maxl)
		}
		lp := func(id int32) float64 { return float64(logits[id]) - maxl - math.Log(sum) }
		rec := r.Logprobs[step]
		check := func(x engine.TokenLogprob) {
			if d := math.Abs(math.Exp(x.Logprob) - math.Exp(lp(x.ID))); d > 1e-4 {
				t.Fatalf("step %d token %d: recorded p=%v, logits give %v", step, x.ID, math.Exp(x.Logprob), math.Exp(lp(x.ID)))
			}
		}
		check(rec.Token)
		for _, x := range rec.Top {
			check(x)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
