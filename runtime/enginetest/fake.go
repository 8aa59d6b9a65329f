package enginetest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
)

// Token ids of the fake vocabulary: ids 0-255 are bytes, then the specials.
const (
	TokenIMStart    int32 = 256 // "<|im_start|>"
	TokenIMEnd      int32 = 257 // "<|im_end|>", end of generation
	TokenEndOfText  int32 = 258 // "<|endoftext|>", end of generation
	FakeVocabSize         = 259
	defaultReplyLen       = 48
)

var specials = []struct {
	id   int32
	text string
}{{TokenIMStart, "<|im_start|>"}, {TokenIMEnd, "<|im_end|>"}, {TokenEndOfText, "<|endoftext|>"}}

// Options configure a Fake. The zero value is usable.
type Options struct {
	// ID is the served model name; default "fake".
	ID string
	// Parallel slots; default 1.
	Parallel int
	// ContextLength per slot; default 2048.
	ContextLength int
	// Reply returns the text the model "wants" to answer to a prompt; after
	// it the model emits <|im_end|>. Default: 48 pseudo-random lowercase
	// letters and spaces derived from the prompt.
	Reply func(prompt string) string
	// PromptDelay is spent per evaluated (not cached) prompt token and
	// TokenDelay per generated token, so timings and the prefix cache are
	// observable.
	PromptDelay, TokenDelay time.Duration
	// ChatTemplate overrides the ChatML template.
	ChatTemplate string
	// TokenizeDelay is spent per KiB of text tokenized (at least once per
	// call), checking the context as it goes: a stand-in for a costly
	// tokenizer, so that bounds on concurrent tokenization and its
	// cancellation are observable.
	TokenizeDelay time.Duration
	// Logits, when set, is called with every row of logits before sampling
	// and may change it (tests make it produce NaN or infinities, as a
	// broken model file does).
	Logits func(step int, logits []float32)
}

// Fake is a deterministic in-memory engine.Engine: a byte-level tokenizer
// with Qwen's three special tokens, a "model" whose most likely next token
// follows Options.Reply and whose other logits are pseudo-random functions
// of the context, real sampling (engine.Sampler), stop handling
// (engine.TextStream), parallel slots with a per-slot prefix cache (chosen as
// goengine chooses: the most reuse less what it destroys of another request's
// CacheBoundary), and cancellation between tokens. It passes the same conformance suite
// (Run) as the real engines.
type Fake struct {
	o    Options
	tmpl *engine.ChatTemplate
	sem  chan struct{}

	mu     sync.Mutex
	slots  [][]int32 // tokens "in the KV cache" of each slot
	keep   []int     // the shared prefix (CacheBoundary) of each slot's last request
	used   []uint64  // when each slot was last taken (a counter)
	clock  uint64
	busy   []bool
	closed bool
	calls  int

	tokenizing, peakTokenizing int // Tokenize calls running now, and at most
}

var _ engine.Engine = (*Fake)(nil)

// NewFake returns a Fake.
func NewFake(o Options) *Fake {
	if o.ID == "" {
		o.ID = "fake"
	}
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.ContextLength <= 0 {
		o.ContextLength = 2048
	}
	t, err := engine.NewChatTemplate(o.ChatTemplate, "<|endoftext|>", "<|im_end|>")
	if err != nil {
		panic(fmt.Sprintf("enginetest: chat template: %v", err)) // programmer error: the test's template
	}
	return &Fake{o: o, tmpl: t, sem: make(chan struct{}, o.Parallel),
		slots: make([][]int32, o.Parallel), keep: make([]int, o.Parallel), used: make([]uint64, o.Parallel), busy: make([]bool, o.Parallel)}
}

// Calls is the number of Generate calls that got a slot.
func (f *Fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Info implements engine.Engine.
func (f *Fake) Info() engine.ModelInfo {
	return engine.ModelInfo{ID: f.o.ID, Architecture: "fake", Engine: "fake", ContextLength: f.o.ContextLength,
		Parallel: f.o.Parallel, VocabSize: FakeVocabSize, HasChatTemplate: f.o.ChatTemplate != ""}
}

// PeakTokenize is the largest number of Tokenize calls that ran at once.
func (f *Fake) PeakTokenize() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peakTokenizing
}

// Tokenize implements engine.Engine: special token texts become their ids,
// every other byte its own id. It stops with ctx's error when ctx ends.
func (f *Fake) Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error) {
	f.mu.Lock()
	f.tokenizing++
	f.peakTokenizing = max(f.peakTokenizing, f.tokenizing)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.tokenizing--
		f.mu.Unlock()
	}()
	if f.o.TokenizeDelay > 0 {
		for kib := 0; kib == 0 || kib < (len(text)+1023)/1024; kib++ {
			if err := sleep(ctx, f.o.TokenizeDelay); err != nil {
				return nil, err
			}
		}
	}
	var out []int32
	for i := 0; len(text) > 0; i++ {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		matched := false
		for _, s := range specials {
			if strings.HasPrefix(text, s.text) {
				out = append(out, s.id)
				text = text[len(s.text):]
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, int32(text[0]))
			text = text[1:]
		}
	}
	return out, nil
}

// Detokenize implements engine.Engine.
func (f *Fake) Detokenize(tokens []int32) (string, error) {
	var sb strings.Builder
	for _, t := range tokens {
		switch {
		case t >= 0 && t < 256:
			sb.WriteByte(byte(t))
		case t >= 256 && t < FakeVocabSize:
			sb.WriteString(specials[t-256].text)
		default:
			return "", fmt.Errorf("enginetest: token %d outside vocabulary of %d", t, FakeVocabSize)
		}
	}
	return sb.String(), nil
}

// ApplyChatTemplate implements engine.Engine.
func (f *Fake) ApplyChatTemplate(ctx context.Context, messages []engine.Message, opts engine.TemplateOptions) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return f.tmpl.Render(ctx, messages, opts)
}

// Close implements engine.Engine.
func (f *Fake) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return nil
}

// Generate implements engine.Engine.
func (f *Fake) Generate(ctx context.Context, req engine.Request, emit func(engine.Token) error) (engine.Response, error) {
	sampler, matcher, err := engine.RequestSampler(req, fakeVocabulary)
	if err != nil {
		return engine.Response{}, fmt.Errorf("enginetest: %w", err)
	}
	prompt := req.Tokens
	if prompt == nil {
		prompt, _ = f.Tokenize(ctx, req.Prompt, req.AddSpecial)
	}
	if len(prompt) == 0 {
		return engine.Response{}, engine.ErrEmptyPrompt
	}
	for _, t := range prompt {
		if t < 0 || t >= FakeVocabSize {
			return engine.Response{}, fmt.Errorf("enginetest: prompt token %d outside vocabulary", t)
		}
	}
	if len(prompt) >= f.o.ContextLength {
		return engine.Response{}, &engine.ContextLengthError{PromptTokens: len(prompt), ContextLength: f.o.ContextLength}
	}
	enqueued := time.Now()
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return engine.Response{FinishReason: engine.FinishCancelled}, ctx.Err()
	}
	defer func() { <-f.sem }()

	// Take the free slot holding the longest prefix, less what it would destroy of another request's shared
	// prefix (CacheBoundary), the least recently used among equals: goengine's policy.
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return engine.Response{}, engine.ErrClosed
	}
	f.calls++
	best, bestN, bestScore := -1, -1, 0
	for i, s := range f.slots {
		if f.busy[i] {
			continue
		}
		n := 0
		for n < len(s) && n < len(prompt) && s[n] == prompt[n] {
			n++
		}
		score := n - max(f.keep[i]-n, 0)
		if best < 0 || score > bestScore || (score == bestScore && f.used[i] < f.used[best]) {
			best, bestN, bestScore = i, n, score
		}
	}
	f.busy[best] = true
	f.clock++
	f.used[best] = f.clock
	switch {
	case req.CacheBoundary > 0:
		f.keep[best] = min(req.CacheBoundary, len(prompt))
	case bestN < f.keep[best]:
		f.keep[best] = 0
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.busy[best] = false
		f.mu.Unlock()
	}()
	cached := bestN
	if req.NoCache {
		cached = 0
	}
	if cached == len(prompt) {
		cached--
	}
	kv := append([]int32(nil), prompt...)
	f.setSlot(best, kv)

	tm := engine.Timings{PromptTokens: len(prompt), CachedTokens: cached}
	admitted := time.Now()
	tm.QueueDuration = admitted.Sub(enqueued)
	resp := engine.Response{}
	if err := sleep(ctx, time.Duration(len(prompt)-cached)*f.o.PromptDelay); err != nil {
		resp.FinishReason, tm.PromptDuration = engine.FinishCancelled, time.Since(admitted)
		resp.Timings = tm
		return resp, err
	}
	first := time.Now()
	tm.PromptDuration = first.Sub(admitted)

	promptText, _ := f.Detokenize(prompt)
	reply := f.reply(promptText)
	stream := engine.NewTextStream(req.Stop)
	history := append([]int32(nil), prompt...)
	logits := make([]float32, FakeVocabSize)
	finish := func(r engine.FinishReason, err error) (engine.Response, error) {
		if r != engine.FinishCancelled {
			if rest := stream.Flush(); rest != "" && emit != nil {
				if e := emit(engine.Token{ID: -1, Text: rest}); e != nil {
					r, err = engine.FinishCancelled, e
				}
			}
		}
		tm.GenerateDuration = time.Since(first)
		f.setSlot(best, kv)
		resp.Text, resp.FinishReason, resp.Timings = stream.Text(), r, tm
		return resp, err
	}
	for step := 0; ; step++ {
		if step > 0 {
			if err := sleep(ctx, f.o.TokenDelay); err != nil {
				return finish(engine.FinishCancelled, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return finish(engine.FinishCancelled, err)
		}
		want := TokenIMEnd
		if step < len(reply) {
			want = int32(reply[step])
		}
		if matcher != nil && matcher.Done() { // complete before any token (an empty choice)
			return finish(engine.FinishStop, nil)
		}
		fillLogits(logits, history, want)
		if f.o.Logits != nil {
			f.o.Logits(step, logits)
		}
		t, err := sampler.Sample(logits, history)
		if err != nil {
			if errors.Is(err, engine.ErrNonFiniteLogits) {
				return finish(engine.FinishCancelled, fmt.Errorf("enginetest: %w", err))
			}
			return finish(engine.FinishCancelled, &engine.ConstraintError{Generated: len(resp.Tokens), Err: err})
		}
		tm.GeneratedTokens++
		if (t == TokenIMEnd || t == TokenEndOfText) && !req.IgnoreEOG {
			return finish(engine.FinishStop, nil)
		}
		resp.Tokens = append(resp.Tokens, t)
		history = append(history, t)
		piece := ""
		if t < 256 {
			piece = string([]byte{byte(t)})
		}
		visible, stopped := stream.Push(piece)
		tok := engine.Token{ID: t, Text: visible}
		if lp, ok := sampler.Logprobs(); ok {
			resp.Logprobs = append(resp.Logprobs, lp)
			tok.Logprobs = &resp.Logprobs[len(resp.Logprobs)-1]
		}
		if emit != nil {
			if err := emit(tok); err != nil {
				return finish(engine.FinishCancelled, err)
			}
		}
		switch {
		case stopped:
			return finish(engine.FinishStop, nil)
		case matcher != nil && matcher.Done(): // only an end-of-generation token could follow
			return finish(engine.FinishStop, nil)
		case req.MaxTokens > 0 && len(resp.Tokens) >= req.MaxTokens:
			return finish(engine.FinishLength, nil)
		case len(kv)+1 > f.o.ContextLength:
			return finish(engine.FinishLength, nil)
		}
		kv = append(kv, t)
	}
}

// Vocabulary describes the fake's tokens, as goengine's Vocabulary does.
func (f *Fake) Vocabulary() *engine.Vocabulary { return fakeVocabulary() }

// fakeVocabulary describes the fake's tokens to constraints: bytes, then
// <|im_start|> (control: no visible piece) and the two end-of-generation
// tokens.
var fakeVocabulary = sync.OnceValue(func() *engine.Vocabulary {
	toks := make([]engine.VocabToken, FakeVocabSize)
	for b := range 256 {
		toks[b] = engine.VocabToken{Piece: string([]byte{byte(b)}), Text: string([]byte{byte(b)})}
	}
	for _, s := range specials {
		toks[s.id] = engine.VocabToken{Text: s.text, EOG: s.id != TokenIMStart}
	}
	return engine.NewVocabulary(toks)
})

func (f *Fake) setSlot(i int, kv []int32) {
	f.mu.Lock()
	f.slots[i] = append([]int32(nil), kv...)
	f.mu.Unlock()
}

func (f *Fake) reply(prompt string) string {
	if f.o.Reply != nil {
		return f.o.Reply(prompt)
	}
	h := fnv.New64a()
	h.Write([]byte(prompt))
	rng := rand.New(rand.NewPCG(h.Sum64(), 1))
	const letters = "abcdefghijklmnopqrstuvwxyz     "
	b := make([]byte, defaultReplyLen)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return string(b)
}

// fillLogits writes pseudo-random logits in [0, 4) derived from the last
// tokens of the context, with want at 8.
func fillLogits(logits []float32, history []int32, want int32) {
	h := fnv.New64a()
	tail := history[max(0, len(history)-8):]
	for _, t := range tail {
		h.Write([]byte{byte(t), byte(t >> 8)})
	}
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(len(history))))
	for i := range logits {
		logits[i] = 4 * rng.Float32()
	}
	logits[TokenIMStart] = -10
	logits[want] = 8
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
