package api

import (
	"context"

	"github.com/phonellm/phonellm/runtime/engine"
)

// cacheBoundary returns how many leading tokens of a chat prompt are its rendered system messages: the part
// later requests of the same task share (a review rubric), where an engine that resumes only at checkpoints
// (engine.ModelInfo.ResumesAtCheckpoints) keeps one (engine.Request.CacheBoundary). 0 when the conversation does
// not start with a system message or the boundary cannot be found.
//
// The system messages are rendered alone, without the generation prompt; the boundary is where that
// rendering's tokens stop agreeing with the prompt's (so it never runs past what the prompt really holds).
// Templates that refuse a conversation without a user message (Qwen3.5's "No user query found") get the
// system messages followed by a one-letter user message instead, rendered twice with different letters: their
// common text ends where the user's content begins, and the boundary stops one token short of that, in case the
// template's separator and the content tokenize together.
func cacheBoundary(ctx context.Context, e engine.Engine, msgs []engine.Message, opts engine.TemplateOptions, full []int32) int {
	k := 0
	for k < len(msgs) && msgs[k].Role == "system" {
		k++
	}
	if k == 0 {
		return 0
	}
	opts.AddGenerationPrompt = false
	text, err := e.ApplyChatTemplate(ctx, msgs[:k], opts)
	short := 0
	if err != nil || text == "" {
		a, errA := e.ApplyChatTemplate(ctx, append(msgs[:k:k], engine.Message{Role: "user", Content: "a"}), opts)
		b, errB := e.ApplyChatTemplate(ctx, append(msgs[:k:k], engine.Message{Role: "user", Content: "b"}), opts)
		if errA != nil || errB != nil {
			return 0
		}
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		text, short = a[:n], 1
	}
	toks, err := e.Tokenize(ctx, text, true)
	if err != nil || len(toks) == 0 {
		return 0
	}
	n := 0
	for n < len(toks) && n < len(full) && toks[n] == full[n] {
		n++
	}
	if n == len(toks) {
		n -= short
	}
	if n >= len(full) {
		n = len(full) - 1
	}
	return max(n, 0)
}
