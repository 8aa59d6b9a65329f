package llamaserver

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/enginetest"
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
			Messages []engine.Message `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		p, err := f.ApplyChatTemplate(context.Background(), in.Messages, engine.TemplateOptions{AddGenerationPrompt: true})
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
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || !in.Stream || !in.ReturnTokens {
			http.Error(w, "fake llama-server: want a streaming request with return_tokens", 400)
			return
		}
		req := engine.Request{Tokens: in.Prompt, Stop: in.Stop, NoCache: !in.CachePrompt, IgnoreEOG: in.IgnoreEOS,
			Sampling: engine.SamplingParams{Temperature: in.Temperature, TopK: in.TopK, TopP: in.TopP, MinP: in.MinP, RepeatPenalty: in.RepeatPenalty}}
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
			if t.ID >= 0 {
				toks = []int32{t.ID}
			}
			return send(map[string]any{"content": t.Text, "tokens": toks, "stop": false})
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
	enginetest.Run(t, c, enginetest.Features{NoConstraints: true})
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
