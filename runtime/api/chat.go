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

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/runtime/engine"
)

const fingerprint = "phonellm"

func (s *Server) chat(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, true) }

func (s *Server) completions(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, false) }

// serveGenerate answers a chat or completion request. Every stage is
// bounded: a full server refuses before reading anything, the body is read
// within MaxBodyBytes and the shared body budget, decoding, templating and
// tokenizing run on one of the PrepWorkers under the request's timeout, and
// only then does the request wait for a slot (or get 429 when the queue is
// full).
func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	b := s.current()
	if b == nil {
		httpx.Reject(w, r, modelLoading())
		return
	}
	leave, apiErr := s.enter()
	if apiErr != nil {
		s.m.reject()
		httpx.Reject(w, r, apiErr)
		return
	}
	defer leave()
	ctx, cancel := context.WithTimeoutCause(r.Context(), s.o.RequestTimeout, errRequestTimeout)
	defer cancel()
	body, release, err := httpx.ReadBody(r, b.lim.MaxBodyBytes, s.budget)
	if err != nil {
		release()
		s.readError(w, r, err)
		return
	}
	req, apiErr := s.prepare(ctx, b, body, release, chat)
	if apiErr != nil {
		httpx.WriteError(w, apiErr)
		return
	}
	s.generate(ctx, w, b.e, req)
}

// generate waits for a slot and runs the request, streaming or not.
func (s *Server) generate(ctx context.Context, w http.ResponseWriter, eng engine.Engine, req *request) {
	release, queueWait, apiErr := s.acquire(ctx)
	if apiErr != nil {
		if apiErr.Status == http.StatusTooManyRequests {
			s.m.reject()
		}
		httpx.WriteError(w, apiErr)
		return
	}
	defer release()

	info := eng.Info()
	greq, f := req.greq, req.f
	id := "cmpl-" + randomID()
	if req.chat {
		id = "chatcmpl-" + randomID()
	}
	out := responder{id: id, created: time.Now().Unix(), model: info.ID, chat: req.chat}
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
		httpx.WriteError(w, s.generateError(ctx, err, len(greq.Tokens), info.ContextLength, req.chat))
		return
	}
	if f.wantsJSON() && !json.Valid([]byte(resp.Text)) {
		httpx.WriteError(w, invalidJSON(resp.Text))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out.final(resp))
}

func (s *Server) generateError(ctx context.Context, err error, n, limit int, chat bool) *httpx.Error {
	var ce *engine.ContextLengthError
	switch {
	case errors.As(err, &ce):
		return contextLengthError(n, limit, chat)
	case errors.Is(err, engine.ErrNonFiniteLogits):
		s.o.Logger.Error("generation stopped", "error", err)
		return serverError("non_finite_logits", "model produced non-finite logits")
	case ctx.Err() != nil:
		return contextError(ctx)
	}
	s.o.Logger.Error("generation failed", "error", err)
	return serverError("generation_failed", "generation failed: %s", httpx.CapText(err.Error(), 512))
}

func invalidJSON(text string) *httpx.Error {
	return httpx.NewError(http.StatusUnprocessableEntity, httpx.TypeInvalidRequest, "invalid_json_output", "response_format",
		"The model's output is not valid JSON: %q", httpx.CapText(text, 200))
}

// stream runs greq and writes Server-Sent Events in OpenAI's chunk format,
// ending with "data: [DONE]". A failed write (client gone, or not reading
// within the server's write timeout) stops generation.
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
		_ = send(httpx.ErrorBody(s.generateError(ctx, err, len(greq.Tokens), eng.Info().ContextLength, out.chat)))
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
		_ = rc.Flush()
		return
	}
	if f.wantsJSON() && !json.Valid([]byte(resp.Text)) {
		_ = send(httpx.ErrorBody(invalidJSON(resp.Text)))
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
