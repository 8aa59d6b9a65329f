package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

func newServer(t *testing.T, fo enginetest.Options, o Options) (*httptest.Server, *enginetest.Fake, *Server) {
	t.Helper()
	f := enginetest.NewFake(fo)
	s := New(o)
	s.SetEngine(f)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, f, s
}

func post(t *testing.T, url, key string, body any) *http.Response {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		r = strings.NewReader(string(js))
	}
	req, _ := http.NewRequest("POST", url, r)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decode[T any](t *testing.T, resp *http.Response, status int) T {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

type errorBody struct {
	Error map[string]any `json:"error"`
}

// wantError checks OpenAI's error shape: message, type, param, code keys.
func wantError(t *testing.T, resp *http.Response, status int, typ, code string) {
	t.Helper()
	e := decode[errorBody](t, resp, status)
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[k]; !ok {
			t.Fatalf("error body %v lacks %q", e.Error, k)
		}
	}
	if e.Error["type"] != typ || (code != "" && e.Error["code"] != code) || e.Error["message"] == "" {
		t.Fatalf("error %v, want type %q code %q", e.Error, typ, code)
	}
}

func chatBody(content string, extra map[string]any) map[string]any {
	b := map[string]any{"model": "fake", "messages": []map[string]any{{"role": "user", "content": content}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func TestChatNonStreaming(t *testing.T) {
	ts, f, _ := newServer(t, enginetest.Options{Reply: func(string) string { return "Hello there" }}, Options{})
	resp := decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("hi", nil)), 200)
	if resp.Object != "chat.completion" || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Model != "fake" || len(resp.Choices) != 1 {
		t.Fatalf("response %+v", resp)
	}
	c := resp.Choices[0]
	if c.Message.Role != "assistant" || c.Message.Content != "Hello there" || *c.FinishReason != "stop" {
		t.Fatalf("choice %+v %q", c, c.Message.Content)
	}
	prompt, _ := f.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "user", Content: "hi"}}, engine.TemplateOptions{AddGenerationPrompt: true})
	toks, _ := f.Tokenize(context.Background(), prompt, true)
	if u := resp.Usage; u.PromptTokens != len(toks) || u.CompletionTokens != len("Hello there") || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("usage %+v, prompt has %d tokens", u, len(toks))
	}
	// The same request again reuses the prompt prefix.
	again := decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("hi", nil)), 200)
	if again.Usage.PromptTokensDetails.CachedTokens != len(toks)-1 {
		t.Fatalf("cached %d, want %d", again.Usage.PromptTokensDetails.CachedTokens, len(toks)-1)
	}
}

// readSSE returns the data payloads of an event stream.
func readSSE(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected line %q", line)
		}
		out = append(out, d)
	}
	return out
}

func TestChatStreaming(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{Reply: func(string) string { return "streamed € text" }}, Options{})
	resp := post(t, ts.URL+"/v1/chat/completions", "", chatBody("hi", map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}))
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := readSSE(t, resp.Body)
	if len(events) < 4 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var text strings.Builder
	var finish string
	var usage *Usage
	for i, ev := range events[:len(events)-1] {
		var c ChatResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %d %q: %v", i, ev, err)
		}
		if c.Object != "chat.completion.chunk" || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Fatalf("chunk %+v", c)
		}
		if c.Usage != nil {
			usage = c.Usage
			if len(c.Choices) != 0 {
				t.Fatalf("usage chunk has choices")
			}
			continue
		}
		if i == 0 && c.Choices[0].Delta.Role != "assistant" {
			t.Fatalf("first delta %+v", c.Choices[0].Delta)
		}
		text.WriteString(c.Choices[0].Delta.Content)
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	if text.String() != "streamed € text" || finish != "stop" || usage == nil || usage.CompletionTokens != len("streamed € text") {
		t.Fatalf("text %q finish %q usage %+v", text.String(), finish, usage)
	}
	// Multi-byte runes are never split across chunks.
	for _, ev := range events {
		if strings.Contains(ev, `\ufffd`) {
			t.Fatalf("replacement character in %q", ev)
		}
	}
}

func TestStopMaxTokensAndSeed(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{Reply: func(string) string { return "abc STOP def" }}, Options{})
	r := decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", map[string]any{"stop": "STOP"})), 200)
	if r.Choices[0].Message.Content != "abc " || *r.Choices[0].FinishReason != "stop" {
		t.Fatalf("stop: %q", r.Choices[0].Message.Content)
	}
	r = decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", map[string]any{"stop": []string{"zz", " def"}, "max_tokens": 100})), 200)
	if r.Choices[0].Message.Content != "abc STOP" {
		t.Fatalf("stop list: %q", r.Choices[0].Message.Content)
	}
	r = decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", map[string]any{"max_completion_tokens": 3})), 200)
	if r.Choices[0].Message.Content != "abc" || *r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 3 {
		t.Fatalf("max tokens: %q %s %+v", r.Choices[0].Message.Content, *r.Choices[0].FinishReason, r.Usage)
	}
	seeded := map[string]any{"temperature": 2.0, "top_p": 1.0, "seed": 9, "max_tokens": 12}
	a := decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", seeded)), 200)
	b := decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", seeded)), 200)
	if a.Choices[0].Message.Content != b.Choices[0].Message.Content {
		t.Fatalf("seeded runs differ: %q vs %q", a.Choices[0].Message.Content, b.Choices[0].Message.Content)
	}
}

func TestErrors(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{ContextLength: 64}, Options{})
	u := ts.URL + "/v1/chat/completions"
	wantError(t, post(t, u, "", `{"model": "fake", "messages": [`), 400, "invalid_request_error", "invalid_json")
	wantError(t, post(t, u, "", chatBody("x", map[string]any{"model": "gpt-4o"})), 404, "invalid_request_error", "model_not_found")
	wantError(t, post(t, u, "", chatBody(strings.Repeat("long ", 20), nil)), 400, "invalid_request_error", "context_length_exceeded")
	wantError(t, post(t, u, "", chatBody("x", map[string]any{"n": 2})), 400, "invalid_request_error", "")
	wantError(t, post(t, u, "", chatBody("x", map[string]any{"temperature": 3})), 400, "invalid_request_error", "")
	wantError(t, post(t, u, "", chatBody("x", map[string]any{"max_tokens": 0})), 400, "invalid_request_error", "")
	wantError(t, post(t, u, "", chatBody("x", map[string]any{"response_format": map[string]any{"type": "yaml"}})), 400, "invalid_request_error", "")
	wantError(t, post(t, u, "", map[string]any{"model": "fake", "messages": []any{}}), 400, "invalid_request_error", "")
	wantError(t, post(t, u, "", map[string]any{"model": "fake", "messages": []any{map[string]any{"role": "wizard", "content": "x"}}}), 400, "invalid_request_error", "")
	wantError(t, post(t, ts.URL+"/v1/completions", "", map[string]any{"model": "fake", "prompt": []string{"a", "b"}}), 400, "invalid_request_error", "")
	wantError(t, post(t, ts.URL+"/v1/nothing", "", "{}"), 404, "invalid_request_error", "")
}

func TestResponseFormatJSON(t *testing.T) {
	reply := `{"risk": 5}`
	ts, _, _ := newServer(t, enginetest.Options{Reply: func(string) string { return reply }}, Options{})
	u := ts.URL + "/v1/chat/completions"
	rf := map[string]any{"response_format": map[string]any{"type": "json_object"}}
	r := decode[ChatResponse](t, post(t, u, "", chatBody("x", rf)), 200)
	if r.Choices[0].Message.Content != reply {
		t.Fatalf("content %q", r.Choices[0].Message.Content)
	}
	schema := map[string]any{"response_format": map[string]any{"type": "json_schema",
		"json_schema": map[string]any{"name": "r", "schema": map[string]any{"type": "object"}}}}
	decode[ChatResponse](t, post(t, u, "", chatBody("x", schema)), 200)
	// A model that wants to answer otherwise is held to JSON while it
	// generates (no check after the fact).
	reply = "RISK_LEVEL: 5"
	r = decode[ChatResponse](t, post(t, u, "", chatBody("x", rf)), 200)
	var v map[string]any
	d := json.NewDecoder(strings.NewReader(r.Choices[0].Message.Content))
	d.UseNumber() // numbers such as 1e999 are JSON, if not float64s
	if err := d.Decode(&v); err != nil || d.More() || *r.Choices[0].FinishReason != "stop" {
		t.Fatalf("json_object answer %q (%s): %v", r.Choices[0].Message.Content, *r.Choices[0].FinishReason, err)
	}
}

func TestCompletions(t *testing.T) {
	ts, f, _ := newServer(t, enginetest.Options{Reply: func(p string) string { return "<" + p + ">" }}, Options{})
	u := ts.URL + "/v1/completions"
	r := decode[CompletionResponse](t, post(t, u, "", map[string]any{"model": "fake", "prompt": "abc"}), 200)
	if r.Object != "text_completion" || r.Choices[0].Text != "<abc>" || r.Usage.PromptTokens != 3 {
		t.Fatalf("%+v", r)
	}
	toks, _ := f.Tokenize(context.Background(), "xyz", false)
	r = decode[CompletionResponse](t, post(t, u, "", map[string]any{"model": "fake", "prompt": toks}), 200)
	if r.Choices[0].Text != "<xyz>" {
		t.Fatalf("token prompt: %q", r.Choices[0].Text)
	}
	resp := post(t, u, "", map[string]any{"model": "fake", "prompt": []string{"q"}, "stream": true})
	defer resp.Body.Close()
	var text strings.Builder
	events := readSSE(t, resp.Body)
	for _, ev := range events[:len(events)-1] {
		var c CompletionResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Object != "text_completion" {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if text.String() != "<q>" || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream %q", text.String())
	}
}

func TestAuthHealthModels(t *testing.T) {
	f := enginetest.NewFake(enginetest.Options{ID: "qwen3-0.6b"})
	s := New(Options{APIKey: "sekret", Aliases: []string{"default"}})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	get := func(path, key string) *http.Response {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if h := decode[map[string]any](t, get("/health", ""), 503); h["status"] != "loading" {
		t.Fatalf("health while loading: %v", h)
	}
	wantError(t, post(t, ts.URL+"/v1/chat/completions", "sekret", chatBody("x", map[string]any{"model": ""})), 503, "server_error", "model_loading")
	s.SetEngine(f)
	if h := decode[map[string]any](t, get("/health", ""), 200); h["status"] != "ok" {
		t.Fatalf("health: %v", h)
	}
	wantError(t, get("/v1/models", ""), 401, "invalid_request_error", "invalid_api_key")
	wantError(t, get("/v1/models", "sekre"), 401, "invalid_request_error", "invalid_api_key")
	wantError(t, post(t, ts.URL+"/v1/chat/completions", "wrong", chatBody("x", nil)), 401, "invalid_request_error", "invalid_api_key")
	list := decode[struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}](t, get("/v1/models", "sekret"), 200)
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "qwen3-0.6b" || list.Data[1].ID != "default" {
		t.Fatalf("models %+v", list)
	}
	decode[modelObject](t, get("/v1/models/default", "sekret"), 200)
	wantError(t, get("/v1/models/nope", "sekret"), 404, "invalid_request_error", "model_not_found")
	decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "sekret", chatBody("x", map[string]any{"model": "default"})), 200)
}

func TestMetrics(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{}, Options{})
	decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", nil)), 200)
	wantError(t, post(t, ts.URL+"/v1/chat/completions", "", "{"), 400, "invalid_request_error", "")
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	text := string(b)
	for _, want := range []string{
		`phonellm_requests_total{endpoint="/v1/chat/completions",code="200"} 1`,
		`phonellm_requests_total{endpoint="/v1/chat/completions",code="400"} 1`,
		`phonellm_request_duration_seconds_bucket{endpoint="/v1/chat/completions",le="+Inf"} 2`,
		`phonellm_request_duration_seconds_count{endpoint="/v1/chat/completions"} 2`,
		"phonellm_generated_tokens_total 48", "phonellm_queue_depth 0", "phonellm_slots_busy 0",
		"phonellm_slots_total 1", "# TYPE phonellm_time_to_first_token_seconds histogram", "phonellm_ready 1",
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("metrics lack %q:\n%s", want, text)
		}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
}

func health(t *testing.T, url string) (busy, queued int) {
	t.Helper()
	h := decode[map[string]any](t, must(http.Get(url+"/health")), 200)
	return int(h["slots_processing"].(float64)), int(h["queued"].(float64))
}

func must(r *http.Response, err error) *http.Response {
	if err != nil {
		panic(err)
	}
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestParallelQueueAndBackPressure(t *testing.T) {
	// 48 tokens at 20 ms: each request holds its slot about a second, so
	// the full state below is observable even on a loaded machine.
	ts, _, _ := newServer(t, enginetest.Options{Parallel: 2, TokenDelay: 20 * time.Millisecond},
		Options{QueueSize: 2, RetryAfter: 3 * time.Second})
	u := ts.URL + "/v1/chat/completions"
	// 4 = parallel + queue: all succeed.
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Go(func() {
			resp := post(t, u, "", chatBody(fmt.Sprint("q", i), nil))
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	waitFor(t, "2 busy and 2 queued", func() bool { b, q := health(t, ts.URL); return b == 2 && q == 2 })
	resp := post(t, u, "", chatBody("one too many", nil))
	if ra := resp.Header.Get("Retry-After"); ra != "3" {
		t.Fatalf("Retry-After %q", ra)
	}
	wantError(t, resp, 429, "rate_limit_error", "queue_full")
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d: status %d", i, c)
		}
	}
}

func TestDisconnectFreesSlot(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{TokenDelay: 20 * time.Millisecond, ContextLength: 8192,
		Reply: func(string) string { return strings.Repeat("x", 5000) }}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	js, _ := json.Marshal(chatBody("x", map[string]any{"stream": true}))
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(string(js)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for n := 0; n < 3; { // role chunk + two content chunks
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	if b, _ := health(t, ts.URL); b != 1 {
		t.Fatalf("busy %d while streaming", b)
	}
	cancel()
	resp.Body.Close()
	// The answer would take 100 s to finish: the slot coming back within waitFor's 10 s shows the
	// disconnect cancelled it (no wall-clock threshold, so a loaded machine does not fail the test).
	waitFor(t, "slot freed", func() bool { b, _ := health(t, ts.URL); return b == 0 })
	// And the engine's slot too: a new request is served at once.
	r := decode[ChatResponse](t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("y", map[string]any{"max_tokens": 1})), 200)
	if r.Usage.CompletionTokens != 1 {
		t.Fatalf("%+v", r.Usage)
	}
}

func TestRequestTimeout(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{TokenDelay: 20 * time.Millisecond}, Options{RequestTimeout: 100 * time.Millisecond})
	wantError(t, post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", nil)), 504, "server_error", "timeout")
	resp := post(t, ts.URL+"/v1/chat/completions", "", chatBody("x", map[string]any{"stream": true}))
	defer resp.Body.Close()
	events := readSSE(t, resp.Body)
	if len(events) < 2 || !strings.Contains(events[len(events)-2], `"code":"timeout"`) || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream after timeout: %q", events)
	}
}

func TestServeShutsDownOnCancel(t *testing.T) {
	s := New(Options{})
	s.SetEngine(enginetest.NewFake(enginetest.Options{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	decode[map[string]any](t, must(http.Get("http://"+ln.Addr().String()+"/health")), 200)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func TestEnableThinking(t *testing.T) {
	const tmpl = `{%- for m in messages %}{{ m.content }}{% endfor %}{% if enable_thinking is defined and enable_thinking is false %}|nothink{% endif %}`
	off := false
	ts, _, _ := newServer(t, enginetest.Options{ChatTemplate: tmpl, Reply: func(p string) string { return p }}, Options{EnableThinking: &off})
	u := ts.URL + "/v1/chat/completions"
	if r := decode[ChatResponse](t, post(t, u, "", chatBody("q", nil)), 200); r.Choices[0].Message.Content != "q|nothink" {
		t.Fatalf("server default: %q", r.Choices[0].Message.Content)
	}
	on := chatBody("q", map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": true}})
	if r := decode[ChatResponse](t, post(t, u, "", on), 200); r.Choices[0].Message.Content != "q" {
		t.Fatalf("request override: %q", r.Choices[0].Message.Content)
	}
}
