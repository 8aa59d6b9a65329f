package goengine

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/phonellm/phonellm/runtime/engine"
)

// maxLogitChunk bounds the logits of one forward pass of Logits (floats): for Qwen's 151,936-token vocabulary
// that is 55 positions and 32 MiB per pass; small vocabularies use the engine's batch size.
const maxLogitChunk = 8 << 20

// forwardMu serialises the forward passes of Logits across engines. Ollama's ggml backend creates one
// ggml_backend_t per device for the whole process (ml/backend/ggml/ggml.go, the package-level backends map
// filled by initDevices), so every model shares the CPU backend and its work buffer: two engines computing at
// the same time corrupt each other's results (seen as NaN logits, and an F32 model disagreeing with itself,
// when a reference and a candidate ran in lock-step). A process comparing two models therefore computes one
// pass at a time.
var forwardMu sync.Mutex

// Logits evaluates tokens from an empty context and calls fn in position order with the full-vocabulary raw
// logits after each position (row i predicts token i+1), for quality checks such as KL divergence against a
// reference model. It evaluates in forward passes of at most the engine's batch size (fewer for a large
// vocabulary, see maxLogitChunk) and keeps only one pass's logits; the row passed to fn is valid only during
// the call. An error from fn stops the evaluation and is returned.
//
// Logits takes the engine for itself: it waits until every slot is free (holding off new Generate calls
// until it returns), evaluates on slot 0 and leaves that slot's cache empty. It must not run concurrently
// with Close.
func (e *Engine) Logits(ctx context.Context, tokens []int32, fn func(pos int, logits []float32) error) error {
	if len(tokens) == 0 {
		return engine.ErrEmptyPrompt
	}
	if len(tokens) > e.numCtx {
		return &engine.ContextLengthError{PromptTokens: len(tokens), ContextLength: e.numCtx}
	}
	vocab := len(e.vocab.Values)
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("goengine: logits: token %d at %d outside vocabulary of %d", t, i, vocab)
		}
	}

	release, err := e.exclusive(ctx)
	if err != nil {
		return err
	}
	defer release()

	sl := e.slots[0]
	// The slot's cache is overwritten: forget what it held, whatever happens below.
	sl.tokens = nil
	if err := e.cache.Remove(sl.id, 0, math.MaxInt32); err != nil {
		return fmt.Errorf("goengine: logits: clear slot %d: %w", sl.id, err)
	}
	chunk := max(1, min(e.batch, maxLogitChunk/max(vocab, 1)))
	var b batch
	for start := 0; start < len(tokens); start += chunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(chunk, len(tokens)-start)
		b.fill(tokens, start, n, sl.id)
		forwardMu.Lock()
		logits, err := e.forward(b.toks, b.pos, b.seqs, b.outs)
		forwardMu.Unlock()
		if err != nil {
			_ = e.cache.Remove(sl.id, 0, math.MaxInt32)
			return fmt.Errorf("goengine: logits at positions %d-%d: %w", start, start+n, err)
		}
		width := len(logits) / n
		if width < vocab || width*n != len(logits) {
			return fmt.Errorf("goengine: logits: forward pass gave %d floats for %d positions and a %d-token vocabulary", len(logits), n, vocab)
		}
		for i := range n {
			if err := fn(start+i, logits[i*width:][:vocab]); err != nil {
				return err
			}
		}
	}
	return nil
}

// exclusive takes the engine for one caller: it waits until every slot is free, holding off new Generate calls
// until release is called. Every running sequence holds a semaphore token until its Generate has returned,
// which happens after the loop finished with it; holding them all leaves the model, the cache and the slots to
// the caller.
func (e *Engine) exclusive(ctx context.Context) (release func(), err error) {
	held := 0
	release = func() {
		for range held {
			<-e.sem
		}
		held = 0
	}
	for held < cap(e.sem) {
		select {
		case e.sem <- struct{}{}:
			held++
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		release()
		return nil, engine.ErrClosed
	}
	return release, nil
}

// batch is one forward pass over consecutive tokens of a single sequence, every position an output row (the
// scoring and observing passes; serving builds its mixed batches in the scheduler).
type batch struct {
	toks, pos, outs []int32
	seqs            []int
}

// fill makes b the n tokens of tokens from start, at their own positions, in sequence seq.
func (b *batch) fill(tokens []int32, start, n, seq int) {
	b.toks, b.pos, b.seqs, b.outs = b.toks[:0], b.pos[:0], b.seqs[:0], b.outs[:0]
	for i := range n {
		b.toks = append(b.toks, tokens[start+i])
		b.pos = append(b.pos, int32(start+i))
		b.seqs = append(b.seqs, seq)
		b.outs = append(b.outs, int32(i))
	}
}
