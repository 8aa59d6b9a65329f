package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phonellm/phonellm/runtime/enginetest"
)

// fuzzLimits are small, so the fuzzer reaches every limit's edge quickly.
var fuzzLimits = Limits{MaxBodyBytes: 64 << 10, MaxPromptBytes: 2048, MaxMessages: 6, MaxStopBytes: 8, PrepWorkers: 1}

func fuzzServer() (*Server, *engineBox) {
	s := New(Options{Limits: fuzzLimits})
	s.SetEngine(enginetest.NewFake(enginetest.Options{ContextLength: 512}))
	return s, s.current()
}

func addRequestSeeds(f *testing.F) {
	for _, seed := range []string{
		`{"model":"fake","messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"stop":["x","yz"],"max_tokens":3,"temperature":0.5,"top_p":0.9,"seed":1}`,
		`{"messages":[{"role":"developer","content":null},{"role":"assistant","content":"<|im_start|>"}],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`,
		`{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false},"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":"abc"}`, `{"prompt":["abc"]}`, `{"prompt":[1,2,3,258]}`, `{"prompt":[1.5]}`, `{"prompt":[-1]}`,
		`{"prompt":"x","echo":true}`, `{"prompt":"x","n":2}`, `{"prompt":"x","logprobs":true}`, `{"prompt":"x","stop":"s"}`,
		`{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}],"tool_choice":"required","parallel_tool_calls":false}`,
		`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"2"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"messages":[{"role":"user","content":"q"}],"choices":["RISK_LEVEL: 1","RISK_LEVEL: 2"],"logprobs":true,"top_logprobs":5}`,
		`{"messages":[{"role":"user","content":"q"}],"grammar":"root ::= [a-z]{1,3} <|im_end|>"}`,
		`{"prompt":"q","json_schema":{"type":"object","properties":{"x":{"$ref":"#/$defs/y"}},"$defs":{"y":{"enum":[1,2]}}},"logprobs":3}`,
		`{"messages":[]}`, `{"messages":[{"role":"wizard"}]}`, `{}`, `[]`, `null`, `{"messages":[{}]} trailing`,
		`{"messages":[{"role":"user","content":"` + strings.Repeat(`\u00e9`, 400) + `"}]}`,
		`{"messages":[` + strings.Repeat(`{"role":"user","content":"m"},`, 7) + `{"role":"user","content":"m"}]}`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
}

// FuzzRequestDecoder drives the request decoder of both endpoints (decode, check, template, tokenize) with
// arbitrary bodies: it never panics, answers either a request within every limit or an OpenAI-shaped error
// with a status a client can act on.
func FuzzRequestDecoder(f *testing.F) {
	addRequestSeeds(f)
	s, b := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		req, apiErr := s.prepareNow(context.Background(), b, body, func() {}, chat)
		if apiErr != nil {
			switch apiErr.Status {
			case 400, 404, 500:
			default:
				t.Fatalf("status %d: %v", apiErr.Status, apiErr)
			}
			if apiErr.Message == "" || apiErr.Type == "" || !utf8.ValidString(apiErr.Message) || len(apiErr.Message) > 2048 {
				t.Fatalf("error %+v", apiErr)
			}
			return
		}
		if req == nil {
			t.Fatal("no request and no error")
		}
		info := b.e.Info()
		if n := len(req.greq.Tokens); n == 0 || n >= info.ContextLength {
			t.Fatalf("%d tokens accepted for a %d-token context", n, info.ContextLength)
		}
		for _, tok := range req.greq.Tokens {
			if tok < 0 || int(tok) >= info.VocabSize {
				t.Fatalf("token %d accepted", tok)
			}
		}
		if len(req.greq.Prompt) > fuzzLimits.MaxPromptBytes+1<<20 {
			t.Fatalf("prompt of %d bytes accepted", len(req.greq.Prompt))
		}
		if len(req.greq.Stop) > maxStops {
			t.Fatalf("%d stops", len(req.greq.Stop))
		}
		for _, stop := range req.greq.Stop {
			if len(stop) > fuzzLimits.MaxStopBytes {
				t.Fatalf("stop of %d bytes", len(stop))
			}
		}
		if err := req.greq.Sampling.Validate(); err != nil {
			t.Fatalf("invalid sampling accepted: %v", err)
		}
		if chat {
			var c ChatRequest
			if json.Unmarshal(body, &c) == nil && len(c.Messages) > fuzzLimits.MaxMessages {
				t.Fatalf("%d messages accepted", len(c.Messages))
			}
		}
	})
}

// FuzzHandler sends arbitrary bodies through the whole HTTP handler (auth, body limits, generation on the
// fake engine): every answer is JSON or an event stream, and the server's counters return to zero.
func FuzzHandler(f *testing.F) {
	addRequestSeeds(f)
	s, _ := fuzzServer()
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
		h.ServeHTTP(rec, req)
		ct := rec.Header().Get("Content-Type")
		switch {
		case rec.Code == 200 && (ct == "application/json" || ct == "text/event-stream"):
		case rec.Code != 200 && ct == "application/json":
			var e errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error["message"] == "" {
				t.Fatalf("%d %s", rec.Code, rec.Body.Bytes())
			}
		default:
			t.Fatalf("status %d, content type %q: %.200s", rec.Code, ct, rec.Body.Bytes())
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inflight != 0 || s.busy != 0 || s.queued != 0 || s.budget.Used() != 0 {
			t.Fatalf("after the request: %d in flight, %d busy, %d queued, %d body bytes", s.inflight, s.busy, s.queued, s.budget.Used())
		}
	})
}
