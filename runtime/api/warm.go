package api

import (
	"context"
	"fmt"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
)

// WarmUser is the user message of a warm-up request: short, so that almost all of the evaluation is the
// shared prefix.
const WarmUser = "Hello."

// WarmResult is one warm-up request.
type WarmResult struct {
	// Tokens is the prompt length and Boundary the shared prefix in it (the rendered system message).
	Tokens   int     `json:"tokens"`
	Boundary int     `json:"boundary"`
	Cached   int     `json:"cached"`
	Seconds  float64 `json:"seconds"`
}

// Warm evaluates each prefix as a deployment's requests will send it — a system message, here followed by a
// short user message — generating one token, so that the first real request sharing the prefix finds it in a
// slot's cache (and, on an engine that resumes only at checkpoints, finds a checkpoint at its end). Call it
// before SetEngine: /health says "loading" until the server is ready, so a gateway sends nothing before the
// cache is warm. A slot keeps one prefix: with more prefixes than slots, the last ones stay.
func Warm(ctx context.Context, e engine.Engine, prefixes []string, enableThinking *bool) ([]WarmResult, error) {
	var out []WarmResult
	for i, p := range prefixes {
		if p == "" {
			return out, fmt.Errorf("api: warm-up prefix %d is empty", i)
		}
		msgs := []engine.Message{{Role: "system", Content: p}, {Role: "user", Content: WarmUser}}
		opts := engine.TemplateOptions{AddGenerationPrompt: true, EnableThinking: enableThinking}
		text, err := e.ApplyChatTemplate(ctx, msgs, opts)
		if err != nil {
			return out, fmt.Errorf("api: warm-up prefix %d: chat template: %w", i, err)
		}
		toks, err := e.Tokenize(ctx, text, true)
		if err != nil {
			return out, fmt.Errorf("api: warm-up prefix %d: %w", i, err)
		}
		if len(toks) >= e.Info().ContextLength {
			return out, fmt.Errorf("api: warm-up prefix %d: %w", i, &engine.ContextLengthError{PromptTokens: len(toks), ContextLength: e.Info().ContextLength})
		}
		req := engine.Request{Tokens: toks, MaxTokens: 1, Sampling: engine.DefaultSampling(),
			CacheBoundary: cacheBoundary(ctx, e, msgs, opts, toks)}
		start := time.Now()
		r, err := e.Generate(ctx, req, nil)
		if err != nil {
			return out, fmt.Errorf("api: warm-up prefix %d: %w", i, err)
		}
		out = append(out, WarmResult{Tokens: len(toks), Boundary: req.CacheBoundary, Cached: r.Timings.CachedTokens,
			Seconds: time.Since(start).Seconds()})
	}
	return out, nil
}
