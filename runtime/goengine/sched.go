package goengine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/model"
	"github.com/ollama/ollama/model/input"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/goengine/internal/cmem"
)

// ggmlMu serializes all work on ggml (loading, cache operations, forward
// passes) across the Engines of a process: ggml's CPU backend as Ollama
// builds it shares state between backends, and two models computing at once
// corrupt each other's results (Ollama runs one model per runner process).
// An Engine batches its own sequences, so this costs nothing with one Engine.
var ggmlMu sync.Mutex

// slot is one KV-cache sequence. tokens are the inputs whose keys and
// values are in the cache, in position order.
type slot struct {
	id       int
	tokens   []int32
	seq      *sequence
	lastUsed time.Time
}

// sequence is one request inside the decode loop.
type sequence struct {
	req     engine.Request
	prompt  []int32
	sampler *engine.Sampler
	matcher engine.Matcher // req.Constraint's, or nil
	stream  *engine.TextStream

	// Loop-owned state.
	slot      *slot
	pending   []int32 // inputs still to evaluate
	cuts      []int   // slot lengths at which a prompt chunk must end (recurrent cache)
	history   []int32 // prompt and generated tokens, for the penalties
	generated []int32
	logprobs  []engine.StepLogprobs // per generated token, when requested
	admitted  time.Time
	firstOut  time.Time
	timings   engine.Timings

	cancel atomic.Bool

	// Output, guarded by mu; notify has capacity 1.
	mu       sync.Mutex
	out      []engine.Token
	done     bool
	reason   engine.FinishReason
	err      error
	notify   chan struct{}
	enqueued time.Time
}

func (s *sequence) push(t engine.Token) {
	s.mu.Lock()
	s.out = append(s.out, t)
	s.mu.Unlock()
	s.wake()
}

func (s *sequence) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Generate implements engine.Engine.
func (e *Engine) Generate(ctx context.Context, req engine.Request, emit func(engine.Token) error) (engine.Response, error) {
	sampler, matcher, err := engine.RequestSampler(req, e.vocabulary)
	if err != nil {
		return engine.Response{}, fmt.Errorf("goengine: %w", err)
	}
	prompt := req.Tokens
	if prompt == nil {
		if prompt, err = e.Tokenize(ctx, req.Prompt, req.AddSpecial); err != nil {
			return engine.Response{}, err
		}
	}
	if len(prompt) == 0 {
		return engine.Response{}, engine.ErrEmptyPrompt
	}
	for _, t := range prompt {
		if t < 0 || int(t) >= len(e.vocab.Values) {
			return engine.Response{}, fmt.Errorf("goengine: prompt token %d outside vocabulary of %d", t, len(e.vocab.Values))
		}
	}
	if len(prompt) >= e.numCtx {
		return engine.Response{}, &engine.ContextLengthError{PromptTokens: len(prompt), ContextLength: e.numCtx}
	}
	s := &sequence{
		req: req, prompt: prompt,
		sampler:  sampler,
		matcher:  matcher,
		stream:   engine.NewTextStream(req.Stop),
		notify:   make(chan struct{}, 1),
		enqueued: time.Now(),
	}

	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return engine.Response{FinishReason: engine.FinishCancelled}, ctx.Err()
	}
	defer func() { <-e.sem }()

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return engine.Response{}, engine.ErrClosed
	}
	e.incoming = append(e.incoming, s)
	e.cond.Broadcast()
	e.mu.Unlock()

	var emitErr error
	cancelled := false
	for {
		select {
		case <-s.notify:
		case <-ctx.Done():
			if !cancelled {
				cancelled = true
				e.stop(s)
			}
			<-s.notify
		}
		s.mu.Lock()
		out := s.out
		s.out = nil
		done := s.done
		s.mu.Unlock()
		for _, t := range out {
			if !cancelled && ctx.Err() != nil {
				cancelled = true
				e.stop(s)
			}
			if emit != nil && emitErr == nil && !cancelled {
				if emitErr = emit(t); emitErr != nil {
					cancelled = true
					e.stop(s)
				}
			}
		}
		if done {
			break
		}
	}
	resp := engine.Response{Text: s.stream.Text(), Tokens: s.generated, FinishReason: s.reason, Timings: s.timings, Logprobs: s.logprobs}
	switch {
	case emitErr != nil:
		resp.FinishReason = engine.FinishCancelled
		return resp, emitErr
	case s.err != nil:
		return resp, s.err
	case ctx.Err() != nil && s.reason == engine.FinishCancelled:
		return resp, ctx.Err()
	}
	return resp, nil
}

// stop asks the loop to drop s at its next step.
func (e *Engine) stop(s *sequence) {
	s.cancel.Store(true)
	e.mu.Lock()
	e.cond.Broadcast()
	e.mu.Unlock()
}

// loop is the single goroutine that owns the model, the KV cache and the
// slots: it admits new sequences, builds one batch over every active slot
// (prompt chunks and single decode tokens, at most e.batch tokens), runs
// the forward pass and samples.
func (e *Engine) loop() {
	// Every pass's C allocations then come from one thread, so glibc serves them from one malloc arena: a
	// goroutine that moves between threads spreads them over up to 8 × cores arenas, each keeping buffers
	// (see package cmem).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(e.loopDone)
	for {
		e.mu.Lock()
		for len(e.incoming) == 0 && !e.anyActive() && !e.closed {
			e.cond.Wait()
		}
		if e.closed {
			in := e.incoming
			e.incoming = nil
			e.mu.Unlock()
			for _, s := range in {
				e.finish(s, engine.FinishCancelled, engine.ErrClosed)
			}
			for _, sl := range e.slots {
				if sl.seq != nil {
					e.finish(sl.seq, engine.FinishCancelled, engine.ErrClosed)
				}
			}
			return
		}
		in := e.incoming
		e.incoming = nil
		e.mu.Unlock()

		ggmlMu.Lock()
		for _, s := range in {
			e.admit(s)
		}
		for _, sl := range e.slots {
			if sl.seq != nil && sl.seq.cancel.Load() {
				e.finish(sl.seq, engine.FinishCancelled, nil)
			}
		}
		if e.anyActive() {
			e.step()
		}
		ggmlMu.Unlock()
	}
}

func (e *Engine) anyActive() bool {
	for _, sl := range e.slots {
		if sl.seq != nil {
			return true
		}
	}
	return false
}

// admit gives s the free slot holding the longest prefix of its prompt and
// drops the rest of that slot's cache (ollamarunner's LoadCacheSlot).
func (e *Engine) admit(s *sequence) {
	var best *slot
	bestN := -1
	for _, sl := range e.slots {
		if sl.seq != nil {
			continue
		}
		n := commonPrefix(sl.tokens, s.prompt)
		if n > bestN || (n == bestN && sl.lastUsed.Before(best.lastUsed)) {
			best, bestN = sl, n
		}
	}
	if best == nil { // cannot happen: the semaphore bounds active sequences
		e.finish(s, engine.FinishCancelled, fmt.Errorf("goengine: no free slot"))
		return
	}
	if !e.recurrent && !s.req.NoCache {
		best, bestN = e.borrow(s, best, bestN)
	}
	n := int32(bestN)
	if s.req.NoCache {
		n = 0
	}
	if int(n) == len(s.prompt) {
		n-- // evaluate at least one token to get logits
	}
	if n > 0 {
		if cc, ok := e.cache.(kvcache.CheckpointCache); ok {
			if restored, ok := cc.PrepareRestore(best.id, n); ok {
				n = restored
			} else {
				n = 0
			}
		} else if !e.cache.CanResume(best.id, n) {
			n = 0
		}
	}
	if err := e.cache.Remove(best.id, n, math.MaxInt32); err != nil {
		n = 0
		if err := e.cache.Remove(best.id, 0, math.MaxInt32); err != nil {
			best.tokens = nil
			e.finish(s, engine.FinishCancelled, fmt.Errorf("goengine: clear slot %d: %w", best.id, err))
			return
		}
	}
	if e.recurrent {
		// A recurrent cache can resume only where a batch ended (Ollama's
		// checkpoints, kvcache/recurrent_checkpoints.go). End a chunk where
		// this prompt left the slot's previous one (the next prompt likely
		// shares that prefix too) and before the last prompt token (so a
		// repeated prompt resumes), as llama-server does for hybrid models.
		if bestN > int(n) && bestN < len(s.prompt)-1 {
			s.cuts = append(s.cuts, bestN)
		}
		s.cuts = append(s.cuts, len(s.prompt)-1)
	}
	best.tokens = append(best.tokens[:0], s.prompt[:n]...)
	best.seq = s
	best.lastUsed = time.Now()
	s.slot = best
	s.pending = s.prompt[n:]
	s.history = append([]int32(nil), s.prompt...)
	s.admitted = time.Now()
	s.timings = engine.Timings{PromptTokens: len(s.prompt), CachedTokens: int(n), QueueDuration: s.admitted.Sub(s.enqueued)}
}

// borrow gives s a longer prompt prefix held by another slot, busy or not
// (Ollama's multi-user cache): the causal cache shares the cells
// (kvcache.Causal.CopyPrefix), so a prompt block common to all clients is
// evaluated once rather than once per slot. The copy goes to the least
// recently used free slot. It returns the slot to use and its prefix length.
func (e *Engine) borrow(s *sequence, best *slot, bestN int) (*slot, int) {
	var src *slot
	m := bestN
	for _, sl := range e.slots {
		if k := commonPrefix(sl.tokens, s.prompt); k > m {
			src, m = sl, k
		}
	}
	m = min(m, len(s.prompt)-1)
	if src == nil || src == best || m <= bestN || !e.cache.CanResume(src.id, int32(m)) {
		return best, bestN
	}
	dst := best
	for _, sl := range e.slots {
		if sl.seq == nil && sl.lastUsed.Before(dst.lastUsed) {
			dst = sl
		}
	}
	e.cache.CopyPrefix(src.id, dst.id, int32(m))
	dst.tokens = append(dst.tokens[:0], s.prompt[:m]...)
	return dst, m
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// finish ends s: flushes held-back text, records the reason and frees its
// slot (the slot keeps its cached tokens for the next prompt).
func (e *Engine) finish(s *sequence, reason engine.FinishReason, err error) {
	if reason != engine.FinishCancelled {
		if rest := s.stream.Flush(); rest != "" {
			s.push(engine.Token{ID: -1, Text: rest})
		}
	}
	if s.slot != nil {
		s.slot.seq = nil
		s.slot.lastUsed = time.Now()
	}
	if !s.firstOut.IsZero() {
		s.timings.GenerateDuration = time.Since(s.firstOut)
	} else if !s.admitted.IsZero() {
		s.timings.PromptDuration = time.Since(s.admitted)
	}
	s.mu.Lock()
	s.done, s.reason, s.err = true, reason, err
	s.mu.Unlock()
	s.wake()
}

// plan picks how many pending inputs of which sequences go into the next
// batch: all active slots, starting one further each step, at most e.batch
// tokens in all. Ollama's qwen3next graph only takes single-sequence batches
// with a recurrent cache (Ollama's scheduler runs those models with one
// slot), so there one sequence's chunk or decode token goes per batch, in
// turn.
func (e *Engine) plan() []batchEntry {
	start := e.next
	e.next = (e.next + 1) % len(e.slots)
	var out []batchEntry
	room := e.batch
	for i := range e.slots {
		s := e.slots[(start+i)%len(e.slots)].seq
		if s == nil || len(s.pending) == 0 {
			continue
		}
		if room <= 0 {
			break
		}
		n := min(len(s.pending), room)
		at := len(s.slot.tokens)
		for _, c := range s.cuts {
			if c > at && c < at+n {
				n = c - at
				break
			}
		}
		out = append(out, batchEntry{seq: s, n: n})
		room -= n
		if e.recurrent {
			break
		}
	}
	return out
}

type batchEntry struct {
	seq    *sequence
	n      int // inputs taken from seq.pending
	output int // row in the logits, or -1
}

// step runs one forward pass over the active slots.
func (e *Engine) step() {
	var toks, pos, outputs []int32
	var seqs []int
	var entries []batchEntry
	for _, pl := range e.plan() {
		s, sl := pl.seq, pl.seq.slot
		for i := range pl.n {
			toks = append(toks, s.pending[i])
			pos = append(pos, int32(len(sl.tokens)+i))
			seqs = append(seqs, sl.id)
		}
		ent := batchEntry{seq: s, n: pl.n, output: -1}
		if pl.n == len(s.pending) {
			ent.output = len(outputs)
			outputs = append(outputs, int32(len(toks)-1))
		}
		entries = append(entries, ent)
	}
	if len(toks) == 0 {
		return
	}
	logits, err := e.forward(toks, pos, seqs, outputs)
	if err != nil {
		for _, ent := range entries {
			// The cache state of these slots is unknown now: drop it.
			_ = e.cache.Remove(ent.seq.slot.id, 0, math.MaxInt32)
			ent.seq.slot.tokens = nil
			e.finish(ent.seq, engine.FinishCancelled, err)
		}
		return
	}
	vocab := len(logits) / max(len(outputs), 1)
	now := time.Now()
	for _, ent := range entries {
		s := ent.seq
		s.slot.tokens = append(s.slot.tokens, s.pending[:ent.n]...)
		s.pending = s.pending[ent.n:]
		if ent.output < 0 {
			continue
		}
		if s.firstOut.IsZero() {
			s.firstOut = now
			s.timings.PromptDuration = now.Sub(s.admitted)
		}
		row := logits[ent.output*vocab : (ent.output+1)*vocab]
		if len(row) > len(e.vocab.Values) {
			row = row[:len(e.vocab.Values)] // padded output rows
		}
		e.sampleNext(s, row)
	}
}

// sampleNext samples the next token of s and decides whether s goes on.
func (e *Engine) sampleNext(s *sequence, logits []float32) {
	if s.matcher != nil && s.matcher.Done() { // complete before any token (an empty choice)
		e.finish(s, engine.FinishStop, nil)
		return
	}
	t, err := s.sampler.Sample(logits, s.history)
	if err != nil && errors.Is(err, engine.ErrNonFiniteLogits) {
		// Non-finite logits: end this request with the error and forget what its slot cached (the state
		// that produced them must not seed another prompt); the other slots go on.
		_ = e.cache.Remove(s.slot.id, 0, math.MaxInt32)
		s.slot.tokens = nil
		e.finish(s, engine.FinishCancelled, fmt.Errorf("goengine: %w", err))
		return
	}
	if err != nil {
		e.finish(s, engine.FinishCancelled, &engine.ConstraintError{Generated: len(s.generated), Err: err})
		return
	}
	s.timings.GeneratedTokens++
	s.timings.GenerateDuration = time.Since(s.firstOut)
	if e.eog[t] && !s.req.IgnoreEOG {
		e.finish(s, engine.FinishStop, nil)
		return
	}
	s.generated = append(s.generated, t)
	s.history = append(s.history, t)
	visible, stopped := s.stream.Push(e.piece(t))
	tok := engine.Token{ID: t, Text: visible}
	if lp, ok := s.sampler.Logprobs(); ok {
		s.logprobs = append(s.logprobs, lp)
		tok.Logprobs = &s.logprobs[len(s.logprobs)-1]
	}
	s.push(tok)
	switch {
	case stopped:
		e.finish(s, engine.FinishStop, nil)
	case s.matcher != nil && s.matcher.Done(): // only an end-of-generation token could follow
		e.finish(s, engine.FinishStop, nil)
	case s.req.MaxTokens > 0 && len(s.generated) >= s.req.MaxTokens:
		e.finish(s, engine.FinishLength, nil)
	case len(s.slot.tokens)+1 > e.numCtx:
		e.finish(s, engine.FinishLength, nil)
	default:
		s.pending = []int32{t}
	}
}

// forward evaluates one batch and returns the logits of the output rows.
func (e *Engine) forward(toks, pos []int32, seqs []int, outputs []int32) (logits []float32, err error) {
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
	return out.Floats(), nil
}
