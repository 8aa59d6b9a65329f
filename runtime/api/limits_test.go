package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

func TestLimitsFollowTheContext(t *testing.T) {
	l := Limits{}.forContext(4096)
	if l.MaxPromptBytes != 128<<10 || l.MaxBodyBytes != 4<<20+6*128<<10 || l.MaxMessages != 1024 || l.MaxStopBytes != 1024 {
		t.Fatalf("%+v", l)
	}
	small := Limits{}.forContext(64)
	if small.MaxPromptBytes != 64<<10 || small.MaxMessages != 64 {
		t.Fatalf("small context: %+v", small)
	}
	set := Limits{MaxBodyBytes: 1, MaxPromptBytes: 2, MaxMessages: 3, MaxStopBytes: 4}.forContext(1 << 20)
	if set.MaxBodyBytes != 1 || set.MaxPromptBytes != 2 || set.MaxMessages != 3 || set.MaxStopBytes != 4 {
		t.Fatalf("explicit limits changed: %+v", set)
	}
}

// TestRequestLimits: what does not fit is refused with a 400 (or 413) naming the field, before the template
// or the tokenizer runs.
func TestRequestLimits(t *testing.T) {
	ts, f, _ := newServer(t, enginetest.Options{ContextLength: 8192},
		Options{Limits: Limits{MaxBodyBytes: 1 << 20, MaxPromptBytes: 4096, MaxMessages: 8, MaxStopBytes: 16}})
	u := ts.URL + "/v1/chat/completions"
	msgs := func(n, size int) []map[string]any {
		var out []map[string]any
		for range n {
			out = append(out, map[string]any{"role": "user", "content": strings.Repeat("x", size)})
		}
		return out
	}
	for _, c := range []struct {
		name  string
		url   string
		body  any
		code  int
		param string
	}{
		{"9 messages", u, map[string]any{"messages": msgs(9, 1)}, 400, "messages"},
		{"one long content", u, map[string]any{"messages": msgs(1, 4097)}, 400, "messages[0].content"},
		{"long in parts", u, map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": strings.Repeat("y", 3000)}, map[string]any{"type": "text", "text": strings.Repeat("y", 3000)}}}}}, 400, "messages[0].content"},
		{"sum too long", u, map[string]any{"messages": msgs(3, 1500)}, 400, "messages"},
		{"escaped past the limit unread", u, `{"messages":[{"role":"user","content":"` + strings.Repeat(`\u0000`, 6000) + `"}]}`, 400, "messages[0].content"},
		{"long stop", u, chatBody("x", map[string]any{"stop": []string{"ok", strings.Repeat("s", 17)}}), 400, "stop[1]"},
		{"long prompt", ts.URL + "/v1/completions", map[string]any{"prompt": strings.Repeat("p", 4097)}, 400, "prompt"},
		{"long prompt in array", ts.URL + "/v1/completions", map[string]any{"prompt": []string{strings.Repeat("p", 4097)}}, 400, "prompt[0]"},
		{"too many prompt tokens", ts.URL + "/v1/completions", map[string]any{"prompt": make([]int, 8192)}, 400, "prompt"},
		{"body too large", u, map[string]any{"messages": msgs(1, 2<<20)}, 413, ""},
	} {
		resp := post(t, c.url, "", c.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e errorBody
		if resp.StatusCode != c.code || json.Unmarshal(b, &e) != nil || (c.param != "" && e.Error["param"] != c.param) {
			t.Errorf("%s: %d %s; want %d naming %q", c.name, resp.StatusCode, b, c.code, c.param)
		}
	}
	if n := f.Calls(); n != 0 {
		t.Errorf("%d refused requests reached generation", n)
	}
	// The limits are not off by one: exactly at them is fine.
	decode[ChatResponse](t, post(t, u, "", map[string]any{"messages": msgs(8, 512), "max_tokens": 1}), 200)
}

// TestTokenizationBoundedAndCancelled: 50 clients at once tokenize at most PrepWorkers at a time; a request
// whose tokenization outlives its timeout gets 504 and its worker is freed; a client that disconnects
// stops its tokenization.
func TestTokenizationBoundedAndCancelled(t *testing.T) {
	const workers = 2
	ts, f, s := newServer(t, enginetest.Options{TokenizeDelay: 5 * time.Millisecond, Parallel: 4},
		Options{QueueSize: 100, Limits: Limits{PrepWorkers: workers}})
	var wg sync.WaitGroup
	codes := make(chan int, 50)
	for i := range 50 {
		wg.Go(func() {
			resp := post(t, ts.URL+"/v1/chat/completions", "", chatBody(fmt.Sprint("client ", i), map[string]any{"max_tokens": 2}))
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("status %d", c)
		}
	}
	if p := f.PeakTokenize(); p > workers || p == 0 {
		t.Fatalf("%d tokenizations ran at once, want at most %d", p, workers)
	}

	// 600 KiB of text at 100 ms per KiB takes a minute to tokenize: the request times out long before, and
	// its worker must be back well before the minute is over (the waits below give up after 10 s).
	ts2, f2, s2 := newServer(t, enginetest.Options{TokenizeDelay: 100 * time.Millisecond},
		Options{RequestTimeout: 200 * time.Millisecond, Limits: Limits{PrepWorkers: 1, MaxPromptBytes: 1 << 20}})
	big := strings.Repeat("z", 600<<10)
	wantError(t, post(t, ts2.URL+"/v1/completions", "", map[string]any{"prompt": big}), 504, "server_error", "timeout")
	waitFor(t, "the timed-out request's worker to be freed", func() bool { return len(s2.prep) == 0 })

	ts3, f3, s3 := newServer(t, enginetest.Options{TokenizeDelay: 100 * time.Millisecond},
		Options{Limits: Limits{PrepWorkers: 1, MaxPromptBytes: 1 << 20}})
	ctx, cancel := context.WithCancel(context.Background())
	js, _ := json.Marshal(map[string]any{"prompt": big})
	req, _ := http.NewRequestWithContext(ctx, "POST", ts3.URL+"/v1/completions", strings.NewReader(string(js)))
	go func() {
		waitFor(t, "tokenization to start", func() bool { return f3.PeakTokenize() > 0 })
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	waitFor(t, "the disconnected client's worker to be freed", func() bool { return len(s3.prep) == 0 })
	if f2.Calls() != 0 || f3.Calls() != 0 {
		t.Error("a timed-out or abandoned request reached generation")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight != 0 || s.busy != 0 || s.queued != 0 || s.budget.Used() != 0 {
		t.Fatalf("after the requests: %d in flight, %d busy, %d queued, %d body bytes held", s.inflight, s.busy, s.queued, s.budget.Used())
	}
}

// TestNonFiniteLogits: a model producing NaN or infinite logits ends that request with an OpenAI-shaped
// 500, streaming or not, at temperature 0 and above, frees its slot, and the server goes on serving.
func TestNonFiniteLogits(t *testing.T) {
	var mu sync.Mutex
	poison := float32(math.NaN())
	ts, _, s := newServer(t, enginetest.Options{Logits: func(step int, l []float32) {
		mu.Lock()
		defer mu.Unlock()
		if step == 2 {
			for i := range l {
				l[i] = poison
			}
		}
	}}, Options{})
	u := ts.URL + "/v1/chat/completions"
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		mu.Lock()
		poison = v
		mu.Unlock()
		for _, temp := range []float64{0, 0.8} {
			wantError(t, post(t, u, "", chatBody("x", map[string]any{"temperature": temp})), 500, "server_error", "non_finite_logits")
			resp := post(t, u, "", chatBody("x", map[string]any{"temperature": temp, "stream": true}))
			events := readSSE(t, resp.Body)
			resp.Body.Close()
			if len(events) < 2 || !strings.Contains(events[len(events)-2], `"code":"non_finite_logits"`) ||
				!strings.Contains(events[len(events)-2], "model produced non-finite logits") || events[len(events)-1] != "[DONE]" {
				t.Fatalf("%v stream: %q", v, events)
			}
		}
	}
	if b, q := health(t, ts.URL); b != 0 || q != 0 {
		t.Fatalf("after NaN: %d busy, %d queued", b, q)
	}
	s.mu.Lock()
	inflight := s.inflight
	s.mu.Unlock()
	if inflight != 0 {
		t.Fatalf("%d requests still counted in flight", inflight)
	}
	mu.Lock()
	poison = 1 // finite again: the next request is answered
	mu.Unlock()
	decode[ChatResponse](t, post(t, u, "", chatBody("x", nil)), 200)
}

// TestQueueFullRefusedBeforeReading: with every slot and the queue taken, a request is refused at once,
// without its body being read (the body below never comes); requests still reading their bodies do not take
// queue places from the others.
func TestQueueFullRefusedBeforeReading(t *testing.T) {
	ts, _, s := newServer(t, enginetest.Options{TokenDelay: 50 * time.Millisecond}, Options{QueueSize: 1, Limits: Limits{PrepWorkers: 1}})
	// Three slow bodies arrive first: they hold no place.
	var pws []*io.PipeWriter
	done := make(chan int, 8)
	postPipe := func() {
		pr, pw := io.Pipe()
		pws = append(pws, pw)
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", pr)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range 3 {
		postPipe()
	}
	waitFor(t, "three requests reading", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.inflight == 3 })
	holds := make(chan struct{}, 2)
	for range 2 { // one slot, one queue place
		go func() {
			resp := post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", map[string]any{"max_tokens": 40}))
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			holds <- struct{}{}
		}()
	}
	waitFor(t, "a busy slot and a queued request", func() bool { b, q := health(t, ts.URL); return b == 1 && q == 1 })
	postPipe() // refused without a byte of its body
	if code := <-done; code != 429 {
		t.Fatalf("a request arriving with the queue full got %d, want 429 before its body", code)
	}
	for _, pw := range pws {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	for range 3 {
		<-done
	}
	<-holds
	<-holds
}

// limitErr is what a bounded template engine returns when a render runs out of a budget.
type limitErr struct{}

func (limitErr) Error() string       { return "loop iterations over 100000" }
func (limitErr) LimitExceeded() bool { return true }

// TestTemplateErrors: a template that refuses the messages (raise_exception) is the client's 400; a template
// that runs out of a limit is the model's fault, a 500; a template cut by the request's timeout is a 504.
func TestTemplateErrors(t *testing.T) {
	const tmpl = `{%- for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}{{ m.content }}{% endfor %}`
	ts, _, _ := newServer(t, enginetest.Options{ChatTemplate: tmpl}, Options{})
	resp := post(t, ts.URL+"/v1/chat/completions", "", map[string]any{"messages": []any{map[string]any{"role": "tool", "content": "x"}}})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "tool messages are not supported") || !strings.Contains(string(b), `"param":"messages"`) {
		t.Errorf("raise_exception: %d %s", resp.StatusCode, b)
	}
	ctx := context.Background()
	if e := templateError(ctx, fmt.Errorf("engine: render chat template: %w", limitErr{})); e.Status != 500 || *e.Code != "template_limit" {
		t.Errorf("limit error: %+v", e)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, time.Nanosecond, errRequestTimeout)
	defer cancel()
	<-tctx.Done()
	// The engine's own limit error is the one the chat handler sees.
	if e := templateError(ctx, &engine.TemplateLimitError{Err: errors.New("jinja: loop iterations: more than 1000000")}); e.Status != 500 || *e.Code != "template_limit" {
		t.Fatalf("engine.TemplateLimitError: %+v", e)
	}
	if e := templateError(ctx, &engine.TemplateRenderError{Err: errors.New("roles must alternate")}); e.Status != 400 {
		t.Fatalf("engine.TemplateRenderError: %+v", e)
	}
	if e := templateError(tctx, context.DeadlineExceeded); e.Status != 504 {
		t.Errorf("timeout: %+v", e)
	}
}

// TestTokenizeErrors: the tokenizer stopping at its limit is OpenAI's context_length_exceeded, naming the
// field, so clients that trim their history on that code keep working.
func TestTokenizeErrors(t *testing.T) {
	ctx := context.Background()
	e := tokenizeError(ctx, fmt.Errorf("goengine: tokenize: %w", &tokenizer.LimitError{Limit: tokenizer.LimitTokens, Max: 1024, Count: 1025}), 256, true)
	if e.Status != 400 || *e.Code != "context_length_exceeded" || *e.Param != "messages" || !strings.Contains(e.Message, "more than 1024 tokens") {
		t.Errorf("token limit: %+v", e)
	}
	e = tokenizeError(ctx, &tokenizer.LimitError{Limit: tokenizer.LimitInputBytes, Max: 4096, Count: 9000}, 256, false)
	if e.Status != 400 || *e.Code != "context_length_exceeded" || *e.Param != "prompt" || !strings.Contains(e.Message, "9000 bytes") {
		t.Errorf("byte limit: %+v", e)
	}
	e = tokenizeError(ctx, fmt.Errorf("broken \x1b[2J vocabulary%s", strings.Repeat("!", 2000)), 256, false)
	if e.Status != 400 || e.Code != nil || len(e.Message) > 600 || strings.Contains(e.Message, "\x1b") {
		t.Errorf("other error: %+v", e)
	}
}
