package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// checkpointed is a fake engine that says it resumes only at checkpoints and records the requests it gets.
type checkpointed struct {
	*enginetest.Fake
	mu  sync.Mutex
	got []engine.Request
}

func (c *checkpointed) Info() engine.ModelInfo {
	i := c.Fake.Info()
	i.ResumesAtCheckpoints = true
	return i
}

func (c *checkpointed) Generate(ctx context.Context, req engine.Request, emit func(engine.Token) error) (engine.Response, error) {
	c.mu.Lock()
	c.got = append(c.got, req)
	c.mu.Unlock()
	return c.Fake.Generate(ctx, req, emit)
}

func tokens(t *testing.T, e engine.Engine, text string) []int32 {
	t.Helper()
	toks, err := e.Tokenize(context.Background(), text, true)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

func TestCacheBoundary(t *testing.T) {
	ctx := context.Background()
	chatml := enginetest.NewFake(enginetest.Options{})
	qwen35src, err := os.ReadFile("../../internal/jinja/testdata/templates/Qwen3.5-4B.jinja")
	if err != nil {
		t.Fatal(err)
	}
	qwen35 := enginetest.NewFake(enginetest.Options{ChatTemplate: string(qwen35src)})
	rubric := "Rubric: weigh the evidence and answer RISK_LEVEL 1-5."
	msgs := []engine.Message{{Role: "system", Content: rubric}, {Role: "user", Content: "Case 17: a card payment."}}
	opts := engine.TemplateOptions{AddGenerationPrompt: true}
	full := func(e engine.Engine, m []engine.Message) []int32 {
		p, err := e.ApplyChatTemplate(ctx, m, opts)
		if err != nil {
			t.Fatal(err)
		}
		return tokens(t, e, p)
	}
	// ChatML renders the system message alone: the boundary is its rendering, to the newline after <|im_end|>.
	want := len(tokens(t, chatml, "<|im_start|>system\n"+rubric+"<|im_end|>\n"))
	if got := cacheBoundary(ctx, chatml, msgs, opts, full(chatml, msgs)); got != want {
		t.Errorf("ChatML: boundary %d, want %d", got, want)
	}
	// Qwen3.5's template refuses a conversation without a user query: the boundary ends before the user's
	// content, one token short of "<|im_start|>user\n".
	want = len(tokens(t, qwen35, "<|im_start|>system\n"+rubric+"<|im_end|>\n<|im_start|>user\n")) - 1
	if got := cacheBoundary(ctx, qwen35, msgs, opts, full(qwen35, msgs)); got != want {
		t.Errorf("Qwen3.5 template: boundary %d, want %d", got, want)
	}
	// Two requests with the same rubric share at least the boundary.
	other := []engine.Message{msgs[0], {Role: "user", Content: "Case 18: another."}}
	for _, e := range []engine.Engine{chatml, qwen35} {
		a, b := full(e, msgs), full(e, other)
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		if bd := cacheBoundary(ctx, e, other, opts, b); bd > n || bd == 0 {
			t.Errorf("boundary %d, shared %d", bd, n)
		}
	}
	if got := cacheBoundary(ctx, chatml, msgs[1:], opts, full(chatml, msgs[1:])); got != 0 {
		t.Errorf("no system message: boundary %d", got)
	}
}

// TestChatPassesCacheBoundary: a chat request carries the boundary of its system messages; other requests (no
// system message, cache_prompt false, raw completions) carry none.
func TestChatPassesCacheBoundary(t *testing.T) {
	e := &checkpointed{Fake: enginetest.NewFake(enginetest.Options{})}
	s := New(Options{})
	s.SetEngine(e)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for _, body := range []string{
		`{"messages":[{"role":"system","content":"Rubric."},{"role":"user","content":"Case."}],"max_tokens":2}`,
		`{"messages":[{"role":"developer","content":"Rubric."},{"role":"user","content":"Case."}],"max_tokens":2}`,
		`{"messages":[{"role":"user","content":"Case."}],"max_tokens":2}`,
		`{"messages":[{"role":"system","content":"Rubric."},{"role":"user","content":"Case."}],"max_tokens":2,"cache_prompt":false}`,
	} {
		resp := post(t, ts.URL+"/v1/chat/completions", "", body)
		resp.Body.Close()
	}
	resp := post(t, ts.URL+"/v1/completions", "", `{"prompt":"<|im_start|>system\nRubric.<|im_end|>\n","max_tokens":2}`)
	resp.Body.Close()
	want := len(tokens(t, e, "<|im_start|>system\nRubric.<|im_end|>\n"))
	e.mu.Lock()
	defer e.mu.Unlock()
	var got []int
	for _, r := range e.got {
		got = append(got, r.CacheBoundary)
	}
	if len(got) != 5 || got[0] != want || got[1] != want || got[2] != 0 || got[3] != 0 || got[4] != 0 {
		t.Fatalf("boundaries %v, want [%d %d 0 0 0]", got, want, want)
	}
}

// TestWarm: after warming two prefixes on a two-slot engine, the first real request of each rubric reuses its
// system message from the cache.
func TestWarm(t *testing.T) {
	f := enginetest.NewFake(enginetest.Options{Parallel: 2, PromptDelay: time.Microsecond})
	rubrics := []string{"Rubric A: weigh the evidence, answer RISK_LEVEL.", "Rubric B: score the seller, answer RISK_LEVEL."}
	res, err := Warm(context.Background(), f, rubrics, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := len(tokens(t, f, "<|im_start|>system\n"+rubrics[0]+"<|im_end|>\n"))
	if len(res) != 2 || res[0].Boundary != want || res[0].Cached != 0 || res[0].Tokens <= want {
		t.Fatalf("warm results %+v (boundary want %d)", res, want)
	}
	s := New(Options{})
	s.SetEngine(f)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for _, r := range []string{rubrics[1], rubrics[0]} {
		body := fmt.Sprintf(`{"messages":[{"role":"system","content":%q},{"role":"user","content":"Case 9: refund twice."}],"max_tokens":2}`, r)
		u := decode[struct {
			Usage Usage `json:"usage"`
		}](t, post(t, ts.URL+"/v1/chat/completions", "", body), 200)
		if u.Usage.PromptTokensDetails == nil || u.Usage.PromptTokensDetails.CachedTokens < want {
			t.Errorf("first request of %q: usage %+v, want at least %d cached", r[:10], u.Usage, want)
		}
	}
	if _, err := Warm(context.Background(), f, []string{""}, nil); err == nil {
		t.Error("an empty prefix was accepted")
	}
}
