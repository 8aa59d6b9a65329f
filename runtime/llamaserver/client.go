package llamaserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/runtime/engine"
)

// Client is a engine.Engine over a running llama-server (llama.cpp's
// tools/server) reached at a base URL. It uses llama-server's native
// endpoints: /tokenize, /detokenize, /apply-template and a streaming
// /completion with token ids, so stop sequences, sampling and the prompt
// cache are llama-server's own.
type Client struct {
	base   string
	apiKey string
	hc     *http.Client
	info   engine.ModelInfo
	stop   func() error // set by Start: stops the supervised process
}

var _ engine.Engine = (*Client)(nil)

// maxResponse bounds a non-streaming response body and one stream line.
const maxResponse = 64 << 20

// Connect returns a Client for the llama-server at base (for example
// "http://127.0.0.1:8080"), after reading its model and limits. apiKey is
// sent as a bearer token when not empty.
func Connect(ctx context.Context, base, apiKey string) (*Client, error) {
	c := &Client{base: strings.TrimRight(base, "/"), apiKey: apiKey, hc: &http.Client{}}
	if err := c.readInfo(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Client) readInfo(ctx context.Context) error {
	var props struct {
		Settings struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
		TotalSlots   int    `json:"total_slots"`
		ModelPath    string `json:"model_path"`
		ChatTemplate string `json:"chat_template"`
	}
	if err := c.call(ctx, "GET", "/props", nil, &props); err != nil {
		return err
	}
	var models struct {
		Data []struct {
			ID   string `json:"id"`
			Meta struct {
				NVocab     int `json:"n_vocab"`
				NCtxTrain  int `json:"n_ctx_train"`
				NParameter int `json:"n_params"`
			} `json:"meta"`
		} `json:"data"`
	}
	if err := c.call(ctx, "GET", "/v1/models", nil, &models); err != nil {
		return err
	}
	if len(models.Data) == 0 || models.Data[0].Meta.NVocab <= 0 || props.Settings.NCtx <= 0 {
		return fmt.Errorf("llamaserver: %s: /props and /v1/models lack n_ctx or n_vocab", c.base)
	}
	m := models.Data[0]
	c.info = engine.ModelInfo{ID: m.ID, Path: props.ModelPath, Architecture: "llama.cpp", Engine: "llama-server",
		ContextLength: props.Settings.NCtx, TrainContextLength: m.Meta.NCtxTrain, Parallel: max(props.TotalSlots, 1),
		VocabSize: m.Meta.NVocab, HasChatTemplate: props.ChatTemplate != ""}
	return nil
}

// call sends a JSON request and decodes a JSON answer.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.do(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return fmt.Errorf("llamaserver: %s %s: %w", method, path, err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("llamaserver: %s %s: decode %q: %w", method, path, trim(body), err)
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("llamaserver: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("llamaserver: %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &StatusError{Method: method, Path: path, Status: resp.StatusCode, Body: trim(b)}
	}
	return resp, nil
}

// StatusError is a non-200 answer of llama-server.
type StatusError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("llamaserver: %s %s: HTTP %d: %s", e.Method, e.Path, e.Status, e.Body)
}

// InputError classifies a 400 (llama-server refused the request: a
// grammar it cannot parse, a bad parameter) as the request's fault.
func (e *StatusError) InputError() bool { return e.Status == http.StatusBadRequest }

func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Info implements engine.Engine.
func (c *Client) Info() engine.ModelInfo { return c.info }

// Tokenize implements engine.Engine (special tokens are parsed).
func (c *Client) Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error) {
	var out struct {
		Tokens []int32 `json:"tokens"`
	}
	err := c.call(context.Background(), "POST", "/tokenize", map[string]any{"content": text, "add_special": addSpecial, "parse_special": true}, &out)
	return out.Tokens, err
}

// Detokenize implements engine.Engine.
func (c *Client) Detokenize(tokens []int32) (string, error) {
	if err := c.checkTokens(tokens); err != nil {
		return "", err
	}
	var out struct {
		Content string `json:"content"`
	}
	err := c.call(context.Background(), "POST", "/detokenize", map[string]any{"tokens": tokens}, &out)
	return out.Content, err
}

func (c *Client) checkTokens(tokens []int32) error {
	for _, t := range tokens {
		if t < 0 || int(t) >= c.info.VocabSize {
			return fmt.Errorf("llamaserver: token %d outside vocabulary of %d", t, c.info.VocabSize)
		}
	}
	return nil
}

// ApplyChatTemplate implements engine.Engine with llama-server's Jinja
// renderer (/apply-template, which takes the fields of a chat request):
// the messages, the tools (rendered as the model's template describes
// them) and the template variables.
func (c *Client) ApplyChatTemplate(ctx context.Context, messages []engine.Message, opts engine.TemplateOptions) (string, error) {
	if len(messages) == 0 {
		return "", errors.New("llamaserver: chat template: no messages")
	}
	req := map[string]any{"messages": messages, "add_generation_prompt": opts.AddGenerationPrompt}
	if opts.Tools != nil {
		req["tools"] = opts.Tools
	}
	kwargs := map[string]any{}
	if opts.EnableThinking != nil {
		kwargs["enable_thinking"] = *opts.EnableThinking
	}
	for k, v := range opts.Extra {
		kwargs[k] = v
	}
	if len(kwargs) > 0 {
		req["chat_template_kwargs"] = kwargs
	}
	var out struct {
		Prompt string `json:"prompt"`
	}
	err := c.call(context.Background(), "POST", "/apply-template", req, &out)
	return out.Prompt, err
}

// completionChunk is one streamed /completion event (partial or final).
type completionChunk struct {
	Content      string `json:"content"`
	Tokens       []int32
	Stop         bool   `json:"stop"`
	StopType     string `json:"stop_type"`
	TokensCached int    `json:"tokens_cached"`
	// Probs are the log-probabilities of Tokens (n_probs), in order.
	Probs []tokenProbs `json:"completion_probabilities"`
	// Error is an error event in the stream.
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
	Timings *struct {
		CacheN      int     `json:"cache_n"`
		PromptN     int     `json:"prompt_n"`
		PromptMS    float64 `json:"prompt_ms"`
		PredictedN  int     `json:"predicted_n"`
		PredictedMS float64 `json:"predicted_ms"`
	} `json:"timings"`
}

// tokenProbs is llama-server's record of one token (n_probs with
// post_sampling_probs false: log-probabilities of the model's logits).
type tokenProbs struct {
	ID      int32   `json:"id"`
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Top     []struct {
		ID      int32   `json:"id"`
		Token   string  `json:"token"`
		Bytes   []int   `json:"bytes"`
		Logprob float64 `json:"logprob"`
	} `json:"top_logprobs"`
	RawBytes []int `json:"bytes"`
}

// piece is a token's exact bytes when llama-server sent them (its text is
// not exact when the token is part of a UTF-8 character).
func piece(text string, b []int) string {
	if b == nil {
		return text
	}
	out := make([]byte, len(b))
	for i, x := range b {
		out[i] = byte(x)
	}
	return string(out)
}

func (p tokenProbs) step(top int) engine.StepLogprobs {
	st := engine.StepLogprobs{Token: engine.TokenLogprob{ID: p.ID, Logprob: p.Logprob, Piece: piece(p.Token, p.RawBytes)}}
	for i, a := range p.Top {
		if i >= top {
			break
		}
		st.Top = append(st.Top, engine.TokenLogprob{ID: a.ID, Logprob: a.Logprob, Piece: piece(a.Token, a.Bytes)})
	}
	return st
}

// errUnsupportedConstraint refuses constraints this client cannot express
// in llama-server's fields (anything but a runtime/grammar grammar).
var errUnsupportedConstraint = pipeline.InputError(errors.New("llamaserver: this kind of constraint cannot be passed to llama-server (a GBNF grammar can)"))

// errUnsupportedLogprobs refuses log-probabilities of the constrained
// distribution: llama-server reports the model's (n_probs) or the
// sampler's after its whole chain (post_sampling_probs), not that one.
var errUnsupportedLogprobs = pipeline.InputError(errors.New("llamaserver: llama-server reports the model's log-probabilities, not the constrained distribution's"))

// gbnf is implemented by constraints that have a GBNF source
// (*grammar.Grammar).
type gbnf interface {
	engine.Constraint
	String() string
}

// Generate implements engine.Engine over a streaming POST /completion. A
// constraint goes to llama-server as its GBNF source ("grammar"), log-
// probabilities as "n_probs" (the model's distribution, as
// engine.LogprobsModel describes; llama-server needs n_probs >= 1 to report
// any).
func (c *Client) Generate(ctx context.Context, req engine.Request, emit func(engine.Token) error) (engine.Response, error) {
	var grammarSrc string
	if req.Constraint != nil {
		g, ok := req.Constraint.(gbnf)
		if !ok {
			return engine.Response{}, errUnsupportedConstraint
		}
		grammarSrc = g.String()
	}
	if lp := req.Logprobs; lp != nil {
		if err := lp.Validate(); err != nil {
			return engine.Response{}, fmt.Errorf("llamaserver: logprobs: %w", err)
		}
		if lp.Source != engine.LogprobsModel {
			return engine.Response{}, errUnsupportedLogprobs
		}
	}
	if err := req.Sampling.Validate(); err != nil {
		return engine.Response{}, fmt.Errorf("llamaserver: sampling: %w", err)
	}
	prompt := req.Tokens
	if prompt == nil {
		var err error
		if prompt, err = c.Tokenize(ctx, req.Prompt, req.AddSpecial); err != nil {
			return engine.Response{}, err
		}
	}
	if len(prompt) == 0 {
		return engine.Response{}, engine.ErrEmptyPrompt
	}
	if err := c.checkTokens(prompt); err != nil {
		return engine.Response{}, err
	}
	if len(prompt) >= c.info.ContextLength {
		return engine.Response{}, &engine.ContextLengthError{PromptTokens: len(prompt), ContextLength: c.info.ContextLength}
	}
	p := req.Sampling
	body := map[string]any{
		"prompt": prompt, "stream": true, "return_tokens": true, "cache_prompt": !req.NoCache,
		"n_predict": -1, "stop": req.Stop, "ignore_eos": req.IgnoreEOG,
		"temperature": p.Temperature, "top_k": p.TopK, "top_p": orOne(p.TopP), "min_p": p.MinP,
		"repeat_penalty": orOne(p.RepeatPenalty), "repeat_last_n": repeatLastN(p.RepeatLastN),
		"frequency_penalty": p.FrequencyPenalty, "presence_penalty": p.PresencePenalty, "seed": -1,
	}
	if req.MaxTokens > 0 {
		body["n_predict"] = req.MaxTokens
	}
	if p.Seed != nil {
		body["seed"] = uint32(*p.Seed) // llama.cpp seeds are uint32
	}
	if req.Stop == nil {
		body["stop"] = []string{}
	}
	if grammarSrc != "" {
		body["grammar"] = grammarSrc
	}
	if req.Logprobs != nil {
		body["n_probs"] = max(req.Logprobs.Top, 1)
		body["post_sampling_probs"] = false
	}
	start := time.Now()
	resp, err := c.do(ctx, "POST", "/completion", body)
	if err != nil {
		if ctx.Err() != nil {
			return engine.Response{FinishReason: engine.FinishCancelled}, ctx.Err()
		}
		return engine.Response{}, err
	}
	defer resp.Body.Close()

	var out engine.Response
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxResponse)
	done := false
	for !done && sc.Scan() {
		// Events are "data: {...}"; llama-server sends a failure after the
		// stream began as "error: {"error": {...}}".
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			if line, ok = strings.CutPrefix(sc.Text(), "error: "); !ok {
				continue
			}
		}
		if err := ctx.Err(); err != nil {
			out.Text, out.FinishReason = text.String(), engine.FinishCancelled
			return out, err
		}
		var ch completionChunk
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			return out, fmt.Errorf("llamaserver: /completion: decode %q: %w", trim([]byte(line)), err)
		}
		if e := ch.Error; e != nil {
			out.Text, out.FinishReason = text.String(), engine.FinishCancelled
			return out, &StatusError{Method: "POST", Path: "/completion", Status: e.Code, Body: e.Message}
		}
		if req.Logprobs != nil && len(ch.Probs) != len(ch.Tokens) {
			return out, fmt.Errorf("llamaserver: /completion: %d tokens with %d log-probability records", len(ch.Tokens), len(ch.Probs))
		}
		for i, t := range ch.Tokens {
			tok := engine.Token{ID: t}
			if i == len(ch.Tokens)-1 {
				tok.Text = ch.Content
			}
			if req.Logprobs != nil {
				out.Logprobs = append(out.Logprobs, ch.Probs[i].step(req.Logprobs.Top))
				tok.Logprobs = &out.Logprobs[len(out.Logprobs)-1]
			}
			out.Tokens = append(out.Tokens, t)
			if err := ctx.Err(); err != nil {
				out.Text, out.FinishReason = text.String(), engine.FinishCancelled
				return out, err
			}
			if err := emitTo(emit, tok); err != nil {
				out.Text, out.FinishReason = text.String(), engine.FinishCancelled
				return out, err
			}
		}
		if len(ch.Tokens) == 0 && ch.Content != "" {
			if err := emitTo(emit, engine.Token{ID: -1, Text: ch.Content}); err != nil {
				out.Text, out.FinishReason = text.String(), engine.FinishCancelled
				return out, err
			}
		}
		text.WriteString(ch.Content)
		if ch.Stop {
			done = true
			out.FinishReason = engine.FinishLength
			if ch.StopType == "eos" || ch.StopType == "word" {
				out.FinishReason = engine.FinishStop
			}
			if t := ch.Timings; t != nil {
				out.Timings = engine.Timings{PromptTokens: len(prompt), CachedTokens: t.CacheN,
					PromptDuration: msDuration(t.PromptMS), GeneratedTokens: t.PredictedN, GenerateDuration: msDuration(t.PredictedMS)}
			}
		}
	}
	out.Text = text.String()
	if err := sc.Err(); err != nil || !done {
		if ctx.Err() != nil {
			out.FinishReason = engine.FinishCancelled
			return out, ctx.Err()
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return out, fmt.Errorf("llamaserver: /completion stream after %v: %w", time.Since(start).Round(time.Millisecond), err)
	}
	return out, nil
}

func emitTo(emit func(engine.Token) error, t engine.Token) error {
	if emit == nil {
		return nil
	}
	return emit(t)
}

func orOne(v float32) float32 {
	if v == 0 {
		return 1
	}
	return v
}

func repeatLastN(n int) int {
	if n == 0 {
		return 64
	}
	return n
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// Close implements engine.Engine: it stops the supervised process, if any.
func (c *Client) Close() error {
	if c.stop != nil {
		return c.stop()
	}
	return nil
}
