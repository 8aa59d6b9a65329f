package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
)

// Features tell Run what an engine is expected to do beyond the contract.
type Features struct {
	// CheckpointPrefixCache: the engine can resume a prompt only at saved
	// recurrent-state checkpoints (qwen35 on Ollama's engine), so a longer
	// prompt may reuse less than its whole cached prefix. Outputs must still
	// equal uncached ones.
	CheckpointPrefixCache bool
	// NoConstraints: the engine cannot honour Request.Constraint or
	// Request.Logprobs; it must refuse such requests with an error rather
	// than generate unconstrained text or drop the records silently.
	NoConstraints bool
}

// Run is the conformance suite for engine.Engine implementations. e must be
// freshly loaded, have a context of at least 128 tokens, and is not closed by
// Run. The concurrency check needs Parallel >= 2.
func Run(t *testing.T, e engine.Engine, f Features) {
	info := e.Info()
	if info.VocabSize <= 0 || info.ContextLength < 128 || info.Parallel < 1 || info.ID == "" {
		t.Fatalf("Info() = %+v: want vocab > 0, context >= 128, parallel >= 1, an id", info)
	}
	prompt := func(t *testing.T, text string) string {
		t.Helper()
		p, err := e.ApplyChatTemplate(t.Context(), []engine.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: text}},
			engine.TemplateOptions{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p, text) {
			t.Fatalf("rendered prompt %q lacks the message %q", p, text)
		}
		return p
	}

	t.Run("Tokenize", func(t *testing.T) {
		ids, err := e.Tokenize(t.Context(), "<|im_start|>", false)
		if err != nil || len(ids) != 1 {
			t.Fatalf("special token tokenized as %v (%v), want one id", ids, err)
		}
		const text = "hello world, the answer is 42"
		ids, err = e.Tokenize(t.Context(), text, false)
		if err != nil || len(ids) == 0 {
			t.Fatalf("Tokenize: %v %v", ids, err)
		}
		back, err := e.Detokenize(ids)
		if err != nil || back != text {
			t.Fatalf("round trip %q -> %v -> %q (%v)", text, ids, back, err)
		}
		if _, err := e.Detokenize([]int32{int32(info.VocabSize) + 10}); err == nil {
			t.Fatal("Detokenize accepted a token outside the vocabulary")
		}
	})

	t.Run("GreedyDeterministicAndStreamed", func(t *testing.T) {
		req := engine.Request{Prompt: prompt(t, "hello world"), MaxTokens: 12}
		var streamed strings.Builder
		var ids []int32
		a, err := e.Generate(context.Background(), req, func(tok engine.Token) error {
			streamed.WriteString(tok.Text)
			if tok.ID >= 0 {
				ids = append(ids, tok.ID)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if streamed.String() != a.Text || !slices.Equal(ids, a.Tokens) {
			t.Fatalf("streamed %q %v, response %q %v", streamed.String(), ids, a.Text, a.Tokens)
		}
		if len(a.Tokens) == 0 || a.Timings.PromptTokens == 0 || a.Timings.GeneratedTokens < len(a.Tokens) {
			t.Fatalf("response %+v", a)
		}
		if a.FinishReason == engine.FinishLength && len(a.Tokens) != 12 {
			t.Fatalf("finish length after %d tokens, max 12", len(a.Tokens))
		}
		b := genNoErr(t, e, req)
		req.NoCache = true
		c := genNoErr(t, e, req)
		if !slices.Equal(a.Tokens, b.Tokens) || !slices.Equal(a.Tokens, c.Tokens) {
			t.Fatalf("greedy runs differ:\n first  %v\n cached %v\n fresh  %v", a.Tokens, b.Tokens, c.Tokens)
		}
		if b.Timings.CachedTokens == 0 || c.Timings.CachedTokens != 0 {
			t.Fatalf("cached tokens: repeat %d (want > 0), NoCache %d (want 0)", b.Timings.CachedTokens, c.Timings.CachedTokens)
		}
	})

	t.Run("PrefixCache", func(t *testing.T) {
		base := prompt(t, "The shared instruction block. Rate the following transaction for fraud risk.")
		a := genNoErr(t, e, engine.Request{Prompt: base, MaxTokens: 4})
		ext := base + "more context that follows"
		b := genNoErr(t, e, engine.Request{Prompt: ext, MaxTokens: 8})
		fresh := genNoErr(t, e, engine.Request{Prompt: ext, MaxTokens: 8, NoCache: true})
		if !f.CheckpointPrefixCache && b.Timings.CachedTokens < a.Timings.PromptTokens-1 {
			t.Fatalf("extended prompt reused %d of %d shared tokens", b.Timings.CachedTokens, a.Timings.PromptTokens)
		}
		if !slices.Equal(b.Tokens, fresh.Tokens) {
			t.Fatalf("prefix-cached output %v differs from fresh %v", b.Tokens, fresh.Tokens)
		}
	})

	t.Run("MaxTokens", func(t *testing.T) {
		r := genNoErr(t, e, engine.Request{Prompt: prompt(t, "count"), MaxTokens: 3})
		if len(r.Tokens) > 3 || (r.FinishReason == engine.FinishLength) != (len(r.Tokens) == 3) {
			t.Fatalf("max 3: %d tokens, %s", len(r.Tokens), r.FinishReason)
		}
	})

	t.Run("Stop", func(t *testing.T) {
		req := engine.Request{Prompt: prompt(t, "say something long"), MaxTokens: 24}
		full := genNoErr(t, e, req)
		if len(full.Text) < 6 {
			t.Skipf("model produced only %q", full.Text)
		}
		k := len(full.Text) / 2
		stop := full.Text[k : k+2]
		want := full.Text[:strings.Index(full.Text, stop)]
		req.Stop = []string{stop}
		r := genNoErr(t, e, req)
		if r.Text != want || r.FinishReason != engine.FinishStop {
			t.Fatalf("stop %q: got %q (%s), want %q", stop, r.Text, r.FinishReason, want)
		}
	})

	t.Run("IgnoreEOG", func(t *testing.T) {
		r := genNoErr(t, e, engine.Request{Prompt: prompt(t, "bench"), MaxTokens: 40, IgnoreEOG: true})
		if len(r.Tokens) != 40 || r.FinishReason != engine.FinishLength {
			t.Fatalf("IgnoreEOG: %d tokens, %s; want 40, length", len(r.Tokens), r.FinishReason)
		}
	})

	t.Run("SeededSampling", func(t *testing.T) {
		seed := uint64(1234)
		req := engine.Request{Prompt: prompt(t, "random"), MaxTokens: 10,
			Sampling: engine.SamplingParams{Temperature: 1.5, TopK: 50, TopP: 0.98, Seed: &seed}}
		a, b := genNoErr(t, e, req), genNoErr(t, e, req)
		if !slices.Equal(a.Tokens, b.Tokens) {
			t.Fatalf("same seed, different tokens: %v vs %v", a.Tokens, b.Tokens)
		}
		bad := req
		bad.Sampling.TopP = 3
		if _, err := e.Generate(context.Background(), bad, nil); err == nil {
			t.Fatal("top_p 3 accepted")
		}
	})

	t.Run("ContextLength", func(t *testing.T) {
		long := slices.Repeat([]int32{'a'}, info.ContextLength)
		ids, _ := e.Tokenize(t.Context(), "a", false)
		for i := range long {
			long[i] = ids[0]
		}
		_, err := e.Generate(context.Background(), engine.Request{Tokens: long, MaxTokens: 1}, nil)
		var ce *engine.ContextLengthError
		if !errors.As(err, &ce) || ce.PromptTokens != info.ContextLength {
			t.Fatalf("prompt of %d tokens: err %v, want ContextLengthError", len(long), err)
		}
		if _, err := e.Generate(context.Background(), engine.Request{Tokens: []int32{}}, nil); err == nil {
			t.Fatal("empty prompt accepted")
		}
	})

	t.Run("CancelFreesSlot", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		start := time.Now()
		r, err := e.Generate(ctx, engine.Request{Prompt: prompt(t, "go on forever")}, func(engine.Token) error {
			n++
			if n == 2 {
				cancel()
			}
			return nil
		})
		if time.Since(start) > 10*time.Second {
			t.Fatalf("cancelled generation took %v", time.Since(start))
		}
		if r.FinishReason == engine.FinishCancelled {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: err %v", err)
			}
		} else if err != nil {
			t.Fatalf("finished %s with %v", r.FinishReason, err)
		}
		if n > 2 && r.FinishReason == engine.FinishCancelled {
			t.Fatalf("emit called %d times after cancel", n-2)
		}
		// Every slot is free again.
		var wg sync.WaitGroup
		errs := make(chan error, info.Parallel)
		for range info.Parallel {
			wg.Go(func() {
				ctx, c := context.WithTimeout(context.Background(), 30*time.Second)
				defer c()
				_, err := e.Generate(ctx, engine.Request{Prompt: prompt(t, "again"), MaxTokens: 2}, nil)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("after cancel: %v", err)
			}
		}
	})

	t.Run("EmitError", func(t *testing.T) {
		boom := errors.New("client gone")
		_, err := e.Generate(context.Background(), engine.Request{Prompt: prompt(t, "x"), MaxTokens: 20}, func(engine.Token) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err %v, want the emit error", err)
		}
	})

	t.Run("ConcurrentEqualsSequential", func(t *testing.T) {
		if info.Parallel < 2 {
			t.Skip("needs Parallel >= 2")
		}
		n := info.Parallel + 1
		reqs := make([]engine.Request, n)
		want := make([]engine.Response, n)
		for i := range reqs {
			reqs[i] = engine.Request{Prompt: prompt(t, fmt.Sprintf("question number %d", i*7)), MaxTokens: 10, NoCache: true}
			want[i] = genNoErr(t, e, reqs[i])
		}
		got := make([]engine.Response, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Go(func() { got[i], errs[i] = e.Generate(context.Background(), reqs[i], nil) })
		}
		wg.Wait()
		for i := range reqs {
			if errs[i] != nil {
				t.Fatalf("request %d: %v", i, errs[i])
			}
			if !slices.Equal(got[i].Tokens, want[i].Tokens) {
				t.Fatalf("request %d concurrent %v, sequential %v", i, got[i].Tokens, want[i].Tokens)
			}
		}
	})

	if f.NoConstraints {
		t.Run("RefusesConstraint", func(t *testing.T) { runRefusesConstraint(t, e, prompt(t, "Rate the fraud risk.")) })
	} else {
		t.Run("Constraint", func(t *testing.T) { runConstraint(t, e, prompt(t, "Rate the fraud risk.")) })
		t.Run("Logprobs", func(t *testing.T) { runLogprobs(t, e, prompt(t, "Say something.")) })
	}
}

func genNoErr(t *testing.T, e engine.Engine, req engine.Request) engine.Response {
	t.Helper()
	r, err := e.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return r
}
