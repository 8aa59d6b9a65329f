package goengine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"runtime/debug"

	"github.com/ollama/ollama/model"
	"github.com/ollama/ollama/model/input"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/goengine/internal/cmem"
	"github.com/phonellm/phonellm/runtime/goengine/internal/observe"
)

// Matmul is one matrix product of a model weight with activations during Observe (see package observe for how
// it is reached). The fields mirror what llama.cpp's llama-imatrix reads from the node.
type Matmul struct {
	// Weight is the weight's tensor name in the GGUF. A model without output.weight (tied embeddings)
	// computes its logits with a copy of token_embd.weight that Ollama names output.weight.
	Weight string
	// Indirect is true for MUL_MAT_ID (mixture-of-experts layers): each input row multiplies the expert
	// matrix the router chose for it.
	Indirect bool
	// Matrices is the number of matrices the weight holds (its ne[2]·ne[3]: the experts of an expert stack).
	Matrices int
	// Cols is the weight's row length, the length of every input row.
	Cols int
	// Tokens is the input's ne[1]: the tokens of a MUL_MAT input, the expert slots of a MUL_MAT_ID input.
	Tokens int
	// F32 is true when the input is F32; otherwise Rows yields nothing.
	F32 bool
	// Rows yields every input row with the index of the weight matrix it multiplies (the expert for
	// MUL_MAT_ID). The slices point into the engine's memory and are valid only during the iteration.
	Rows iter.Seq2[int, []float32]
}

// ObserveOptions configure Observe.
type ObserveOptions struct {
	// Want selects the weights whose products are reported (experts: the weight holds more than one matrix).
	// nil evaluates without reporting anything, for comparison with the cost of observing.
	Want func(weight string, experts bool) bool
	// Matmul receives each product after it is computed, in graph order. An error stops the evaluation and
	// is returned by Observe.
	Matmul func(Matmul) error
	// Batch is the number of tokens per forward pass; 0 means the engine's batch size.
	Batch int
}

// Observe evaluates tokens from an empty context on slot 0, every position through every layer (all of them
// are outputs, as llama-imatrix asks), and reports the input of every product with a wanted weight to
// o.Matmul. The logits are computed but not read. Like Logits it takes the engine for itself while it runs
// and must not run concurrently with Close.
func (e *Engine) Observe(ctx context.Context, tokens []int32, o ObserveOptions) error {
	if len(tokens) == 0 {
		return engine.ErrEmptyPrompt
	}
	if len(tokens) > e.numCtx {
		return &engine.ContextLengthError{PromptTokens: len(tokens), ContextLength: e.numCtx}
	}
	if o.Want != nil && o.Matmul == nil {
		return errors.New("goengine: observe: no Matmul function")
	}
	if o.Batch < 0 {
		return fmt.Errorf("goengine: observe: negative batch %d", o.Batch)
	}
	vocab := len(e.vocab.Values)
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("goengine: observe: token %d at %d outside vocabulary of %d", t, i, vocab)
		}
	}
	release, err := e.exclusive(ctx)
	if err != nil {
		return err
	}
	defer release()

	sl := e.slots[0]
	sl.tokens = nil
	if err := e.cache.Remove(sl.id, 0, math.MaxInt32); err != nil {
		return fmt.Errorf("goengine: observe: clear slot %d: %w", sl.id, err)
	}
	defer func() { _ = e.cache.Remove(sl.id, 0, math.MaxInt32) }()

	var hook *observe.Hook
	if o.Want != nil {
		forwardMu.Lock() // no graph of this engine computes while the callback changes
		hook, err = observe.Install(e.m.Backend(), o.Want, func(p observe.Product) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return o.Matmul(Matmul(p))
		})
		forwardMu.Unlock()
		if err != nil {
			return fmt.Errorf("goengine: observe: %w", err)
		}
		defer func() {
			forwardMu.Lock()
			hook.Remove()
			forwardMu.Unlock()
		}()
	}

	chunk := o.Batch
	if chunk == 0 {
		chunk = e.batch
	}
	chunk = min(chunk, e.batch)
	var b batch
	for start := 0; start < len(tokens); start += chunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(chunk, len(tokens)-start)
		b.fill(tokens, start, n, sl.id)
		forwardMu.Lock()
		_, err := e.compute(b.toks, b.pos, b.seqs, b.outs, false)
		forwardMu.Unlock()
		if hook != nil && hook.Err() != nil {
			err = hook.Err()
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			return fmt.Errorf("goengine: observe: positions %d-%d: %w", start, start+n, err)
		}
	}
	return nil
}

// compute evaluates one batch on the model and, when read is set, returns the logits of the output rows.
func (e *Engine) compute(toks, pos []int32, seqs []int, outputs []int32, read bool) (logits []float32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("goengine: forward pass: %v", r)
		}
	}()
	ctx := e.m.Backend().NewContext()
	defer func() {
		ctx.Close()
		// A prompt pass's mask (tokens × cells float32, built as a Go slice and copied into a C buffer) and other
		// inputs are garbage now. Give both copies back to the system: the C one instead of leaving it in
		// malloc's arenas (package cmem), the Go one instead of letting the next passes' masks pile up until the
		// collector runs, which it does later the busier the machine is. serve's peak is then one pass's
		// buffers on top of the loaded model, the same on every machine (pipeline/fit/rsscheck). Decode passes
		// are too small to matter; a collection costs a few milliseconds against a pass of hundreds of tokens.
		if int64(len(toks))*int64(e.numCtx)*int64(max(1, len(e.slots)))*4 >= 1<<20 {
			debug.FreeOSMemory()
			cmem.Trim()
		}
	}()
	b := input.Batch{
		Inputs:    ctx.Input().FromInts(toks, len(toks)),
		Outputs:   ctx.Input().FromInts(outputs, len(outputs)),
		Positions: pos,
		Sequences: seqs,
	}
	ctx.SetBatchSize(len(toks))
	out, err := model.Forward(ctx, e.m, b)
	if err != nil {
		return nil, fmt.Errorf("goengine: build graph: %w", err)
	}
	ctx.Compute(out)
	if !read {
		return nil, nil
	}
	return out.Floats(), nil
}
