package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/enginetest"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// TestMain doubles as a fake llama-server executable: with
// FAKE_LLAMA_SERVER=1 the test binary parses llama-server's flags and serves
// llama-server's native endpoints over enginetest.Fake.
func TestMain(m *testing.M) {
	if os.Getenv("FAKE_LLAMA_SERVER") == "1" {
		fakeMain()
		return
	}
	os.Exit(m.Run())
}

func fakeMain() {
	fs := flag.NewFlagSet("llama-server", flag.ExitOnError)
	model := fs.String("model", "", "")
	host := fs.String("host", "127.0.0.1", "")
	port := fs.Int("port", 8080, "")
	ctxSize := fs.Int("ctx-size", 4096, "")
	parallel := fs.Int("parallel", 1, "")
	fs.Bool("jinja", false, "")
	fs.Int("threads", 0, "")
	fs.Int("batch-size", 0, "")
	fs.String("alias", "", "")
	crash := fs.Bool("crash", false, "exit at once (tests the supervisor)")
	_ = fs.Parse(os.Args[1:])
	if *crash {
		os.Exit(3)
	}
	if _, err := os.Stat(*model); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f := enginetest.NewFake(enginetest.Options{ID: "fake.gguf", Parallel: *parallel, ContextLength: *ctxSize / *parallel})
	l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", *host, *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = http.Serve(l, fakeHandler(f, *model))
}

// fakeHandler implements the subset of llama-server's API the client uses,
// with llama-server's field names.
func fakeHandler(f *enginetest.Fake, model string) http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	info := f.Info()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { reply(w, map[string]string{"status": "ok"}) })
	mux.HandleFunc("GET /props", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"default_generation_settings": map[string]any{"n_ctx": info.ContextLength},
			"total_slots": info.Parallel, "model_path": model, "chat_template": "{{ messages }}"})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"object": "list", "data": []any{map[string]any{"id": info.ID,
			"meta": map[string]any{"n_vocab": info.VocabSize, "n_ctx_train": 32768}}}})
	})
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Content    string `json:"content"`
			AddSpecial bool   `json:"add_special"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		toks, _ := f.Tokenize(context.Background(), in.Content, in.AddSpecial)
		reply(w, map[string]any{"tokens": toks})
	})
	mux.HandleFunc("POST /detokenize", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Tokens []int32 `json:"tokens"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		s, _ := f.Detokenize(in.Tokens)
		reply(w, map[string]any{"content": s})
	})
	mux.HandleFunc("POST /apply-template", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Messages            []engine.Message           `json:"messages"`
			Tools               []json.RawMessage          `json:"tools"`
			AddGenerationPrompt *bool                      `json:"add_generation_prompt"`
			Kwargs              map[string]json.RawMessage `json:"chat_template_kwargs"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		opts := engine.TemplateOptions{AddGenerationPrompt: in.AddGenerationPrompt == nil || *in.AddGenerationPrompt, Tools: in.Tools}
		if len(in.Kwargs) > 0 {
			opts.Extra = map[string]any{}
			for k, v := range in.Kwargs {
				opts.Extra[k] = v
			}
		}
		p, err := f.ApplyChatTemplate(context.Background(), in.Messages, opts)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		reply(w, map[string]any{"prompt": p})
	})
	mux.HandleFunc("POST /completion", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Prompt        []int32  `json:"prompt"`
			NPredict      int      `json:"n_predict"`
			Stop          []string `json:"stop"`
			Temperature   float32  `json:"temperature"`
			TopK          int      `json:"top_k"`
			TopP          float32  `json:"top_p"`
			MinP          float32  `json:"min_p"`
			Seed          int64    `json:"seed"`
			CachePrompt   bool     `json:"cache_prompt"`
			IgnoreEOS     bool     `json:"ignore_eos"`
			Stream        bool     `json:"stream"`
			ReturnTokens  bool     `json:"return_tokens"`
			RepeatPenalty float32  `json:"repeat_penalty"`
			Grammar       string   `json:"grammar"`
			NProbs        int      `json:"n_probs"`
			PostSampling  bool     `json:"post_sampling_probs"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || !in.Stream || !in.ReturnTokens {
			http.Error(w, "fake llama-server: want a streaming request with return_tokens", 400)
			return
		}
		req := engine.Request{Tokens: in.Prompt, Stop: in.Stop, NoCache: !in.CachePrompt, IgnoreEOG: in.IgnoreEOS,
			Sampling: engine.SamplingParams{Temperature: in.Temperature, TopK: in.TopK, TopP: in.TopP, MinP: in.MinP, RepeatPenalty: in.RepeatPenalty}}
		fail := func(msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": 400, "message": msg, "type": "invalid_request_error"}})
		}
		if in.Grammar != "" {
			// llama-server parses the grammar (and fails the request) before it generates.
			g, err := grammar.Parse(in.Grammar)
			if err == nil {
				_, err = g.NewMatcher(f.Vocabulary())
			}
			if err != nil {
				fail("Failed to parse grammar: " + err.Error())
				return
			}
			req.Constraint = g
		}
		if in.NProbs > 0 {
			if in.PostSampling {
				fail("fake llama-server: post_sampling_probs is not faked")
				return
			}
			req.Logprobs = &engine.LogprobOptions{Top: in.NProbs}
		}
		if in.NPredict > 0 {
			req.MaxTokens = in.NPredict
		}
		if in.Seed >= 0 {
			s := uint64(in.Seed)
			req.Sampling.Seed = &s
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(v any) error {
			b, _ := json.Marshal(v)
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return err
			}
			w.(http.Flusher).Flush()
			return nil
		}
		resp, err := f.Generate(r.Context(), req, func(t engine.Token) error {
			toks := []int32{}
			ev := map[string]any{"content": t.Text, "tokens": toks, "stop": false}
			if t.ID >= 0 {
				ev["tokens"] = []int32{t.ID}
			}
			if lp := t.Logprobs; lp != nil {
				// llama-server's record: token text, bytes, logprob, and the top list.
				rec := func(x engine.TokenLogprob) map[string]any {
					b := make([]int, len(x.Piece))
					for i := range len(x.Piece) {
						b[i] = int(x.Piece[i])
					}
					return map[string]any{"id": x.ID, "token": x.Piece, "bytes": b, "logprob": x.Logprob}
				}
				p := rec(lp.Token)
				top := []any{}
				for _, a := range lp.Top {
					top = append(top, rec(a))
				}
				p["top_logprobs"] = top
				ev["completion_probabilities"] = []any{p}
			}
			return send(ev)
		})
		if err != nil {
			return
		}
		stopType := map[engine.FinishReason]string{engine.FinishStop: "eos", engine.FinishLength: "limit"}[resp.FinishReason]
		tm := resp.Timings
		_ = send(map[string]any{"content": "", "tokens": []int32{}, "stop": true, "stop_type": stopType,
			"timings": map[string]any{"cache_n": tm.CachedTokens, "prompt_n": tm.PromptTokens - tm.CachedTokens,
				"prompt_ms": float64(tm.PromptDuration.Microseconds()) / 1e3, "predicted_n": tm.GeneratedTokens,
				"predicted_ms": float64(tm.GenerateDuration.Microseconds()) / 1e3}})
	})
	return mux
}

func TestConformanceOverProcess(t *testing.T) {
	model := t.TempDir() + "/fake.gguf"
	os.WriteFile(model, []byte("GGUF"), 0o644)
	c, err := Start(context.Background(), Options{Binary: os.Args[0], Model: model, Parallel: 2, ContextLength: 512,
		Env: []string{"FAKE_LLAMA_SERVER=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info := c.Info()
	if info.Engine != "llama-server" || info.ContextLength != 512 || info.Parallel != 2 || info.Path != model {
		t.Fatalf("info %+v", info)
	}
	enginetest.Run(t, c, enginetest.Features{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tokenize(context.Background(), "x", false); err == nil {
		t.Fatal("server still answers after Close")
	}
}

func TestStartFailures(t *testing.T) {
	model := t.TempDir() + "/fake.gguf"
	os.WriteFile(model, []byte("GGUF"), 0o644)
	_, err := Start(context.Background(), Options{Binary: os.Args[0], Model: model, Args: []string{"--crash"}, Env: []string{"FAKE_LLAMA_SERVER=1"}})
	if err == nil {
		t.Fatal("crashing server started")
	}
	if _, err := Start(context.Background(), Options{Binary: "/nonexistent/llama-server", Model: model}); err == nil {
		t.Fatal("missing binary started")
	}
	if _, err := Start(context.Background(), Options{Binary: os.Args[0], Model: model + ".missing"}); err == nil {
		t.Fatal("missing model started")
	}
}

// TestRequestFields: constraints, log-probabilities, tools and template
// variables reach llama-server in its own fields; what it cannot express is
// refused, and its 400s are the request's fault.
func TestRequestFields(t *testing.T) {
	f := enginetest.NewFake(enginetest.Options{ID: "fake.gguf", ContextLength: 512})
	inner := fakeHandler(f, "m.gguf")
	var mu sync.Mutex
	bodies := map[string]map[string]json.RawMessage{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]json.RawMessage
		_ = json.Unmarshal(b, &m)
		mu.Lock()
		bodies[r.URL.Path] = m
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c, err := Connect(context.Background(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f"}}`)}
	no := false
	if _, err := c.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "user", Content: "x"}},
		engine.TemplateOptions{AddGenerationPrompt: true, Tools: tools, EnableThinking: &no, Extra: map[string]any{"k": json.RawMessage(`[1]`)}}); err != nil {
		t.Fatal(err)
	}
	if b := bodies["/apply-template"]; string(b["tools"]) != `[{"type":"function","function":{"name":"f"}}]` ||
		string(b["chat_template_kwargs"]) != `{"enable_thinking":false,"k":[1]}` {
		t.Fatalf("/apply-template body %s %s", b["tools"], b["chat_template_kwargs"])
	}
	g, err := grammar.Choices([]string{"yes", "no"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Generate(context.Background(), engine.Request{Prompt: "q", Constraint: g, Logprobs: &engine.LogprobOptions{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := bodies["/completion"]
	var gs string
	json.Unmarshal(b["grammar"], &gs)
	if gs != g.String() || string(b["n_probs"]) != "1" || string(b["post_sampling_probs"]) != "false" {
		t.Fatalf("/completion body: grammar %s n_probs %s post %s", b["grammar"], b["n_probs"], b["post_sampling_probs"])
	}
	if (r.Text != "yes" && r.Text != "no") || len(r.Logprobs) != len(r.Tokens) || r.Logprobs[0].Top != nil || r.Logprobs[0].Token.Piece == "" {
		t.Fatalf("constrained answer %+v", r)
	}
	// llama-server refuses a grammar: the request's fault.
	bad, _ := grammar.Parse(`root ::= <|no-such-token|>`)
	_, err = c.Generate(context.Background(), engine.Request{Prompt: "q", Constraint: bad}, nil)
	if !pipeline.IsInputError(err) {
		t.Fatalf("refused grammar: %v, want an input error", err)
	}
	_, err = c.Generate(context.Background(), engine.Request{Prompt: "q", Logprobs: &engine.LogprobOptions{Source: engine.LogprobsConstrained}}, nil)
	if !pipeline.IsInputError(err) {
		t.Fatalf("constrained logprobs: %v, want an input error", err)
	}
}

// TestServedThroughAPI: phonellm's API over a llama-server (serve --engine
// llama-server): choices, logprobs and a forced tool call reach llama-server
// as grammar and n_probs, and come back in OpenAI's shapes.
func TestServedThroughAPI(t *testing.T) {
	tmpl, err := os.ReadFile("../../internal/jinja/testdata/templates/Qwen-Qwen3-0.6B.jinja")
	if err != nil {
		t.Fatal(err)
	}
	f := enginetest.NewFake(enginetest.Options{ID: "fake.gguf", ContextLength: 4096, ChatTemplate: string(tmpl),
		Reply: func(string) string { return "RISK_LEVEL: 4" }})
	ls := httptest.NewServer(fakeHandler(f, "m.gguf"))
	defer ls.Close()
	c, err := Connect(context.Background(), ls.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Options{})
	s.SetEngine(c)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	chat := func(body string) api.ChatResponse {
		t.Helper()
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r api.ChatResponse
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("%d: %s", resp.StatusCode, b)
		}
		return r
	}
	r := chat(`{"messages":[{"role":"user","content":"risk?"}],"choices":["RISK_LEVEL: 1","RISK_LEVEL: 2","RISK_LEVEL: 3","RISK_LEVEL: 4","RISK_LEVEL: 5"],"logprobs":true,"top_logprobs":5,"temperature":0}`)
	lp := r.Choices[0].Logprobs
	if r.Choices[0].Message.Content != "RISK_LEVEL: 4" || lp == nil || len(lp.Content) != 13 || len(lp.Content[12].TopLogprobs) != 5 || lp.Content[12].Token != "4" {
		t.Fatalf("%+v %+v", r.Choices[0].Message, lp)
	}
	r = chat(`{"messages":[{"role":"user","content":"risk?"}],"tools":[{"type":"function","function":{"name":"score","parameters":{"type":"object","properties":{"level":{"type":"integer","minimum":1,"maximum":5}},"required":["level"]}}}],"tool_choice":{"type":"function","function":{"name":"score"}}}`)
	m := r.Choices[0].Message
	var args struct{ Level int }
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "score" || json.Unmarshal([]byte(m.ToolCalls[0].Function.Arguments), &args) != nil ||
		args.Level < 1 || args.Level > 5 || *r.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("forced call %+v", m)
	}
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= <|nope|>"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a grammar llama-server refuses: status %d", resp.StatusCode)
	}
}
