package api

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phonellm/phonellm/runtime/enginetest"
)

// checkEntries checks chat logprob entries against the answer: one per
// token, bytes that spell it (the token text too, where it is whole UTF-8),
// alternatives sorted, the greedy token the most likely.
func checkEntries(t *testing.T, entries []TokenLogprobOut, content string, top int, greedy bool) {
	t.Helper()
	var sb strings.Builder
	textOK := func(text string, b []int) bool {
		s := string(bytesOf(b))
		return s == text || !utf8.ValidString(s) && text == strings.ToValidUTF8(s, "\uFFFD")
	}
	for i, e := range entries {
		sb.Write(bytesOf(e.Bytes))
		if !textOK(e.Token, e.Bytes) || e.Logprob > 0 || len(e.TopLogprobs) != top {
			t.Fatalf("entry %d: %+v", i, e)
		}
		var sum float64
		for j, a := range e.TopLogprobs {
			if a.Logprob > 0 || j > 0 && a.Logprob > e.TopLogprobs[j-1].Logprob || !textOK(a.Token, a.Bytes) {
				t.Fatalf("entry %d alternatives %+v", i, e.TopLogprobs)
			}
			sum += math.Exp(a.Logprob)
		}
		if sum > 1+1e-9 {
			t.Fatalf("entry %d: alternatives sum to %v", i, sum)
		}
		if greedy && top > 0 && (e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob) {
			t.Fatalf("entry %d: greedy token %q is not the most likely %+v", i, e.Token, e.TopLogprobs[0])
		}
	}
	if sb.String() != content {
		t.Fatalf("entries spell %q, the answer is %q", sb.String(), content)
	}
}

func bytesOf(b []int) []byte {
	out := make([]byte, len(b))
	for i, x := range b {
		out[i] = byte(x)
	}
	return out
}

// streamChunks returns the chat chunks of a streaming request.
func streamChunks(t *testing.T, url string, body map[string]any) []ChatResponse {
	t.Helper()
	body["stream"] = true
	resp := post(t, url, "", body)
	defer resp.Body.Close()
	var out []ChatResponse
	for _, ev := range readSSE(t, resp.Body) {
		if ev == "[DONE]" {
			break
		}
		var c ChatResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		out = append(out, c)
	}
	return out
}

func TestChatLogprobs(t *testing.T) {
	reply := "héllo wörld"
	ts, _, _ := newServer(t, enginetest.Options{Reply: func(string) string { return reply }}, Options{})
	u := ts.URL + "/v1/chat/completions"
	for _, top := range []int{0, 3, 20} {
		r := decode[ChatResponse](t, post(t, u, "", chatBody("x", map[string]any{"temperature": 0, "logprobs": true, "top_logprobs": top})), 200)
		lp := r.Choices[0].Logprobs
		if lp == nil || len(lp.Content) != r.Usage.CompletionTokens {
			t.Fatalf("top %d: logprobs %+v for %d tokens", top, lp, r.Usage.CompletionTokens)
		}
		checkEntries(t, lp.Content, reply, top, true)

		// Streamed: the same entries, each in the chunk that shows its text.
		var entries []TokenLogprobOut
		var text strings.Builder
		for _, c := range streamChunks(t, u, chatBody("x", map[string]any{"temperature": 0, "logprobs": true, "top_logprobs": top})) {
			ch := c.Choices[0]
			if ch.Logprobs != nil {
				entries = append(entries, ch.Logprobs.Content...)
				var shown strings.Builder
				for _, e := range ch.Logprobs.Content {
					shown.Write(bytesOf(e.Bytes))
				}
				if !strings.HasPrefix(ch.Delta.Content, shown.String()) && shown.Len() > 0 {
					t.Fatalf("chunk %q carries entries for %q", ch.Delta.Content, shown.String())
				}
			}
			text.WriteString(ch.Delta.Content)
		}
		if text.String() != reply || !reflect.DeepEqual(entries, lp.Content) {
			t.Fatalf("streamed %q with %+v\nnot streamed %+v", text.String(), entries, lp.Content)
		}
	}
	// Without logprobs there are none.
	r := decode[ChatResponse](t, post(t, u, "", chatBody("x", nil)), 200)
	if r.Choices[0].Logprobs != nil {
		t.Fatalf("logprobs %+v without asking", r.Choices[0].Logprobs)
	}
	// A stop sequence's tokens have no entries.
	r = decode[ChatResponse](t, post(t, u, "", chatBody("x", map[string]any{"logprobs": true, "stop": "o w", "temperature": 0})), 200)
	checkEntries(t, r.Choices[0].Logprobs.Content, "héll", 0, true)
	var entries []TokenLogprobOut
	for _, c := range streamChunks(t, u, chatBody("x", map[string]any{"logprobs": true, "stop": "o w", "temperature": 0})) {
		if c.Choices[0].Logprobs != nil {
			entries = append(entries, c.Choices[0].Logprobs.Content...)
		}
	}
	if !reflect.DeepEqual(entries, r.Choices[0].Logprobs.Content) {
		t.Fatalf("stop: streamed %+v, not streamed %+v", entries, r.Choices[0].Logprobs.Content)
	}
	// Under a constraint the entries describe the model's distribution: the
	// forced token may be unlikely and the alternatives include forbidden
	// tokens.
	r = decode[ChatResponse](t, post(t, u, "", chatBody("x", map[string]any{"logprobs": true, "top_logprobs": 2, "choices": []string{"no"}})), 200)
	lp := r.Choices[0].Logprobs.Content
	if r.Choices[0].Message.Content != "no" || len(lp) != 2 || lp[0].TopLogprobs[0].Token != "h" || lp[0].Logprob >= lp[0].TopLogprobs[0].Logprob {
		t.Fatalf("constrained %q: %+v", r.Choices[0].Message.Content, lp)
	}
}

func TestCompletionLogprobs(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{Reply: func(string) string { return "aab c" }}, Options{})
	u := ts.URL + "/v1/completions"
	r := decode[CompletionResponse](t, post(t, u, "", map[string]any{"model": "fake", "prompt": "q", "logprobs": 3, "temperature": 0}), 200)
	lp := r.Choices[0].Logprobs
	if lp == nil || strings.Join(lp.Tokens, "") != "aab c" || len(lp.TokenLogprobs) != 5 || len(lp.TopLogprobs) != 5 || len(lp.TextOffset) != 5 {
		t.Fatalf("logprobs %+v", lp)
	}
	for i := range lp.Tokens {
		if lp.TextOffset[i] != i || lp.TokenLogprobs[i] > 0 || len(lp.TopLogprobs[i]) != 3 {
			t.Fatalf("token %d: %+v", i, lp)
		}
		m := lp.TopLogprobs[i]
		if m[0].Key != lp.Tokens[i] || m[0].Value != lp.TokenLogprobs[i] || m[1].Value > m[0].Value || m[2].Value > m[1].Value {
			t.Fatalf("token %d alternatives %+v", i, m)
		}
	}
	// The raw JSON keeps OpenAI's shape: top_logprobs are objects.
	resp := post(t, u, "", map[string]any{"model": "fake", "prompt": "q", "logprobs": 1, "max_tokens": 1, "temperature": 0})
	defer resp.Body.Close()
	var raw struct {
		Choices []struct {
			Logprobs struct {
				TopLogprobs []map[string]float64 `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil || len(raw.Choices[0].Logprobs.TopLogprobs) != 1 || len(raw.Choices[0].Logprobs.TopLogprobs[0]) != 1 {
		t.Fatalf("%+v: %v", raw, err)
	}
	// Streamed: the offsets continue across chunks.
	body := map[string]any{"model": "fake", "prompt": "q", "logprobs": 0, "stream": true, "temperature": 0}
	sresp := post(t, u, "", body)
	defer sresp.Body.Close()
	var toks []string
	var offs []int
	for _, ev := range readSSE(t, sresp.Body) {
		if ev == "[DONE]" {
			break
		}
		var c CompletionResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if l := c.Choices[0].Logprobs; l != nil {
			toks = append(toks, l.Tokens...)
			offs = append(offs, l.TextOffset...)
		}
	}
	if strings.Join(toks, "") != "aab c" || !reflect.DeepEqual(offs, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("streamed tokens %q offsets %v", toks, offs)
	}
}

func TestLogprobErrors(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{}, Options{})
	for _, c := range []struct {
		url   string
		body  map[string]any
		param string
	}{
		{"/v1/chat/completions", chatBody("x", map[string]any{"logprobs": true, "top_logprobs": 21}), "top_logprobs"},
		{"/v1/chat/completions", chatBody("x", map[string]any{"logprobs": true, "top_logprobs": -1}), "top_logprobs"},
		{"/v1/chat/completions", chatBody("x", map[string]any{"top_logprobs": 2}), "top_logprobs"},
		{"/v1/completions", map[string]any{"prompt": "x", "logprobs": true}, "logprobs"},
		{"/v1/completions", map[string]any{"prompt": "x", "logprobs": 21}, "logprobs"},
		{"/v1/completions", map[string]any{"prompt": "x", "logprobs": 1.5}, "logprobs"},
	} {
		e := decode[errorBody](t, post(t, ts.URL+c.url, "", c.body), 400)
		if e.Error["param"] != c.param {
			t.Fatalf("%v: %v", c.body, e.Error)
		}
	}
}
