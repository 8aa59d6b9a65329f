package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
)

const fingerprint = "phonellm"

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req ChatRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	eng, apiErr := s.checkModel(req.Model)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	msgs, apiErr := req.messages()
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	greq, apiErr := req.request(*s.o.Sampling)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	opts := engine.TemplateOptions{AddGenerationPrompt: true, EnableThinking: s.o.EnableThinking}
	if v, ok := req.ChatTemplateKwargs["enable_thinking"].(bool); ok {
		opts.EnableThinking = &v
	}
	prompt, err := eng.ApplyChatTemplate(r.Context(), msgs, opts)
	if err != nil {
		writeError(w, badRequest("messages", "", "the chat template rejected the messages: %v", err))
		return
	}
	greq.Prompt = prompt
	s.generate(w, r, eng, greq, &req.samplingFields, true)
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	eng, apiErr := s.checkModel(req.Model)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if req.Echo {
		writeError(w, badRequest("echo", "", "echo is not supported"))
		return
	}
	text, toks, apiErr := req.prompt()
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	greq, apiErr := req.request(*s.o.Sampling)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	greq.Prompt, greq.Tokens = text, toks
	s.generate(w, r, eng, greq, &req.samplingFields, false)
}

// generate tokenizes, checks the context, waits for a slot and runs the
// request, streaming or not.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, eng engine.Engine, greq engine.Request, f *samplingFields, chat bool) {
	ctx, cancel := context.WithTimeoutCause(r.Context(), s.o.RequestTimeout, errRequestTimeout)
	defer cancel()
	info := eng.Info()
	greq.AddSpecial = true
	if greq.Tokens == nil {
		toks, err := eng.Tokenize(ctx, greq.Prompt, true)
		if err != nil {
			writeError(w, badRequest("prompt", "", "%v", err))
			return
		}
		greq.Tokens = toks
	}
	for _, t := range greq.Tokens {
		if t < 0 || int(t) >= info.VocabSize {
			writeError(w, badRequest("prompt", "", "token %d outside the vocabulary of %d", t, info.VocabSize))
			return
		}
	}
	if len(greq.Tokens) == 0 {
		writeError(w, badRequest("prompt", "", "the prompt is empty"))
		return
	}
	if len(greq.Tokens) >= info.ContextLength {
		writeError(w, contextLengthError(len(greq.Tokens), info.ContextLength, chat))
		return
	}
	release, queueWait, apiErr := s.acquire(ctx)
	if apiErr != nil {
		if apiErr.Status == http.StatusTooManyRequests {
			s.writeRetryAfter(w)
		}
		writeError(w, apiErr)
		return
	}
	defer release()

	id := "cmpl-" + randomID()
	if chat {
		id = "chatcmpl-" + randomID()
	}
	out := responder{id: id, created: time.Now().Unix(), model: info.ID, chat: chat}
	if f.Model != "" {
		out.model = f.Model
	}
	if f.Stream {
		s.stream(ctx, w, eng, greq, f, out, queueWait)
		return
	}
	resp, err := eng.Generate(ctx, greq, nil)
	s.m.tokens(resp.Timings.PromptTokens, resp.Timings.CachedTokens, len(resp.Tokens), resp.Timings.PromptDuration, queueWait)
	if err != nil {
		writeError(w, s.generateError(ctx, err, len(greq.Tokens), info.ContextLength, chat))
		return
	}
	if f.wantsJSON() && !json.Valid([]byte(resp.Text)) {
		writeError(w, invalidJSON(resp.Text))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out.final(resp))
}

func (s *Server) generateError(ctx context.Context, err error, n, limit int, chat bool) *APIError {
	var ce *engine.ContextLengthError
	switch {
	case errors.As(err, &ce):
		return contextLengthError(n, limit, chat)
	case ctx.Err() != nil:
		return contextError(ctx)
	}
	return &APIError{Status: http.StatusInternalServerError, Type: "server_error", Message: fmt.Sprintf("generation failed: %v", err)}
}

func contextLengthError(n, limit int, chat bool) *APIError {
	param := "prompt"
	if chat {
		param = "messages"
	}
	return badRequest(param, "context_length_exceeded",
		"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens (at least one must be left to generate).", limit, n)
}

func invalidJSON(text string) *APIError {
	const show = 200
	if len(text) > show {
		text = text[:show] + "…"
	}
	return &APIError{Status: http.StatusUnprocessableEntity, Type: "invalid_request_error", Param: strp("response_format"),
		Code: strp("invalid_json_output"), Message: fmt.Sprintf("The model's output is not valid JSON: %q", text)}
}

// stream runs greq and writes Server-Sent Events in OpenAI's chunk format,
// ending with "data: [DONE]". A failed write (client gone) stops generation.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, eng engine.Engine, greq engine.Request, f *samplingFields, out responder, queueWait time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send(out.chunk("", true, nil)); err != nil {
		return
	}
	resp, err := eng.Generate(ctx, greq, func(t engine.Token) error {
		if t.Text == "" {
			return nil
		}
		return send(out.chunk(t.Text, false, nil))
	})
	s.m.tokens(resp.Timings.PromptTokens, resp.Timings.CachedTokens, len(resp.Tokens), resp.Timings.PromptDuration, queueWait)
	if err != nil {
		if r := context.Cause(ctx); r != nil && !errors.Is(r, errRequestTimeout) {
			return // client gone
		}
		_ = send(map[string]*APIError{"error": s.generateError(ctx, err, len(greq.Tokens), eng.Info().ContextLength, out.chat)})
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
		_ = rc.Flush()
		return
	}
	if f.wantsJSON() && !json.Valid([]byte(resp.Text)) {
		_ = send(map[string]*APIError{"error": invalidJSON(resp.Text)})
	}
	reason := string(resp.FinishReason)
	final := out.chunk("", false, &reason)
	final.setTimings(timingsOf(resp))
	if err := send(final); err != nil {
		return
	}
	if f.StreamOptions != nil && f.StreamOptions.IncludeUsage {
		if err := send(out.usageChunk(usageOf(resp))); err != nil {
			return
		}
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// responder builds response objects of one request.
type responder struct {
	id      string
	created int64
	model   string
	chat    bool
}

type chunk interface{ setTimings(*Timings) }

func (c *ChatResponse) setTimings(t *Timings)       { c.Timings = t }
func (c *CompletionResponse) setTimings(t *Timings) { c.Timings = t }

func (o responder) chunk(text string, first bool, reason *string) chunk {
	if o.chat {
		d := &ChatMessageOut{Content: text}
		if first {
			d.Role = "assistant"
		}
		if reason != nil {
			d = &ChatMessageOut{}
		}
		return &ChatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.model,
			SystemFingerprint: fingerprint, Choices: []ChatChoice{{Delta: d, FinishReason: reason}}}
	}
	return &CompletionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.model,
		SystemFingerprint: fingerprint, Choices: []CompletionChoice{{Text: text, FinishReason: reason}}}
}

func (o responder) usageChunk(u *Usage) any {
	if o.chat {
		return &ChatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.model,
			SystemFingerprint: fingerprint, Choices: []ChatChoice{}, Usage: u}
	}
	return &CompletionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.model,
		SystemFingerprint: fingerprint, Choices: []CompletionChoice{}, Usage: u}
}

func (o responder) final(r engine.Response) any {
	reason := string(r.FinishReason)
	if o.chat {
		return &ChatResponse{ID: o.id, Object: "chat.completion", Created: o.created, Model: o.model,
			SystemFingerprint: fingerprint, Usage: usageOf(r), Timings: timingsOf(r),
			Choices: []ChatChoice{{Message: &ChatMessageOut{Role: "assistant", Content: r.Text}, FinishReason: &reason}}}
	}
	return &CompletionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.model,
		SystemFingerprint: fingerprint, Usage: usageOf(r), Timings: timingsOf(r),
		Choices: []CompletionChoice{{Text: r.Text, FinishReason: &reason}}}
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
