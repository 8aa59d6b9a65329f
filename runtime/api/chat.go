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
	out := responder{id: id, created: time.Now().Unix(), model: info.ID, req: req}
	if f.Model != "" {
		out.model = f.Model
	}
	if f.Stream {
		s.stream(ctx, w, eng, out, queueWait)
		return
	}
	resp, err := eng.Generate(ctx, greq, nil)
	s.m.tokens(resp.Timings.PromptTokens, resp.Timings.CachedTokens, len(resp.Tokens), resp.Timings.PromptDuration, queueWait)
	if err != nil {
		httpx.WriteError(w, s.generateError(ctx, err, req, info.ContextLength))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out.final(resp))
}

func (s *Server) generateError(ctx context.Context, err error, req *request, limit int) *httpx.Error {
	var ce *engine.ContextLengthError
	switch {
	case errors.As(err, &ce):
		return contextLengthError(len(req.greq.Tokens), limit, req.chat)
	case errors.Is(err, engine.ErrNonFiniteLogits):
		s.o.Logger.Error("generation stopped", "error", err)
		return serverError("non_finite_logits", "model produced non-finite logits")
	case ctx.Err() != nil:
		return contextError(ctx)
	case isConstraintError(err):
		return constraintError(err, req.constraintParam)
	case isInputError(err):
		// The engine refused the request (llama-server's 400: a grammar it
		// cannot parse, a field it does not take).
		param := ""
		if req.greq.Constraint != nil {
			param = req.constraintParam
		}
		return httpx.BadRequest(param, "", "The model's server refused the request: %s", httpx.CapText(err.Error(), 512))
	}
	s.o.Logger.Error("generation failed", "error", err)
	return serverError("generation_failed", "generation failed: %s", httpx.CapText(err.Error(), 512))
}

// isInputError reports an error that says it is the request's fault
// (pipeline's error contract).
func isInputError(err error) bool {
	var ie interface{ InputError() bool }
	return errors.As(err, &ie) && ie.InputError()
}

// stream runs the request and writes Server-Sent Events in OpenAI's chunk
// format, ending with "data: [DONE]". A failed write (client gone, or not
// reading within the server's write timeout) stops generation.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, eng engine.Engine, out responder, queueWait time.Duration) {
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
	req := out.req
	if err := send(out.chunk(&ChatMessageOut{Role: "assistant"}, "", nil, 0, nil)); err != nil {
		return
	}
	st := out.newStreamState()
	resp, err := eng.Generate(ctx, req.greq, func(t engine.Token) error {
		for _, c := range st.token(t) {
			if err := send(c); err != nil {
				return err
			}
		}
		return nil
	})
	s.m.tokens(resp.Timings.PromptTokens, resp.Timings.CachedTokens, len(resp.Tokens), resp.Timings.PromptDuration, queueWait)
	if err != nil {
		if r := context.Cause(ctx); r != nil && !errors.Is(r, errRequestTimeout) {
			return // client gone
		}
		_ = send(httpx.ErrorBody(s.generateError(ctx, err, req, eng.Info().ContextLength)))
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
		_ = rc.Flush()
		return
	}
	for _, c := range st.finish(resp) {
		if err := send(c); err != nil {
			return
		}
	}
	if f := req.f; f.StreamOptions != nil && f.StreamOptions.IncludeUsage {
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
	req     *request
	callID  func() string // tool call ids; nil means random
}

type chunk interface{ setTimings(*Timings) }

func (c *ChatResponse) setTimings(t *Timings)       { c.Timings = t }
func (c *CompletionResponse) setTimings(t *Timings) { c.Timings = t }

// chunk is one stream event: a chat delta (or, for completions, its
// content as text), the records of the tokens it shows, and the finish
// reason on the last.
func (o responder) chunk(delta *ChatMessageOut, text string, steps []engine.StepLogprobs, offset int, reason *string) chunk {
	if o.req.chat {
		c := ChatChoice{Delta: delta, FinishReason: reason}
		if o.req.logprobs && (steps != nil || reason == nil) {
			c.Logprobs = &ChatLogprobs{Content: chatLogprobEntries(steps)}
		}
		return &ChatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.model,
			SystemFingerprint: fingerprint, Choices: []ChatChoice{c}}
	}
	c := CompletionChoice{Text: text, FinishReason: reason}
	if o.req.logprobs && (steps != nil || reason == nil) {
		c.Logprobs = completionLogprobs(steps, offset)
	}
	return &CompletionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.model,
		SystemFingerprint: fingerprint, Choices: []CompletionChoice{c}}
}

func (o responder) usageChunk(u *Usage) any {
	if o.req.chat {
		return &ChatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.model,
			SystemFingerprint: fingerprint, Choices: []ChatChoice{}, Usage: u}
	}
	return &CompletionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.model,
		SystemFingerprint: fingerprint, Choices: []CompletionChoice{}, Usage: u}
}

func (o responder) newCallID() string {
	if o.callID != nil {
		return o.callID()
	}
	return "call_" + randomID()
}

// finishReason is the engine's, or tool_calls when the answer called a
// tool and ended by itself.
func finishReason(r engine.FinishReason, calls int) string {
	if calls > 0 && r == engine.FinishStop {
		return "tool_calls"
	}
	return string(r)
}

func (o responder) final(r engine.Response) any {
	steps := visibleSteps(r.Logprobs, len(r.Text))
	if !o.req.chat {
		c := CompletionChoice{Text: r.Text}
		if o.req.logprobs {
			c.Logprobs = completionLogprobs(steps, 0)
		}
		reason := string(r.FinishReason)
		c.FinishReason = &reason
		return &CompletionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.model,
			SystemFingerprint: fingerprint, Usage: usageOf(r), Timings: timingsOf(r), Choices: []CompletionChoice{c}}
	}
	msg := &ChatMessageOut{Role: "assistant", Content: r.Text}
	calls := 0
	if o.req.tools != nil {
		var p parsed
		tp := o.req.tools.parser()
		collect(tp.Push(r.Text), &p)
		collect(tp.Finish(), &p)
		msg.Content = p.Content
		for _, c := range p.Calls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCallOut{ID: o.newCallID(), Type: "function",
				Function: ToolFunctionOut{Name: c[0], Arguments: c[1]}})
		}
		calls = len(p.Calls)
	}
	reason := finishReason(r.FinishReason, calls)
	c := ChatChoice{Message: msg, FinishReason: &reason}
	if o.req.logprobs {
		c.Logprobs = &ChatLogprobs{Content: chatLogprobEntries(steps)}
	}
	return &ChatResponse{ID: o.id, Object: "chat.completion", Created: o.created, Model: o.model,
		SystemFingerprint: fingerprint, Usage: usageOf(r), Timings: timingsOf(r), Choices: []ChatChoice{c}}
}

// parsed is an answer read whole: its content and its calls (name,
// arguments).
type parsed struct {
	Content string
	Calls   [][2]string
}

// collect adds parser events to an answer read whole.
func collect(evs []toolEvent, into *parsed) {
	for _, e := range evs {
		switch {
		case e.Start:
			into.Calls = append(into.Calls, [2]string{e.Name, e.Args})
		case e.Args != "":
			into.Calls[e.Index][1] += e.Args
		default:
			into.Content += e.Content
		}
	}
}

// streamState turns a stream's tokens into chunks.
type streamState struct {
	o     responder
	q     logprobQueue
	carry []engine.StepLogprobs // released records not yet sent
	off   int                   // text offset of carry[0]
	tp    *toolParser
}

func (o responder) newStreamState() *streamState {
	st := &streamState{o: o}
	if o.req.tools != nil {
		st.tp = o.req.tools.parser()
	}
	return st
}

// token returns the chunks a generated token makes.
func (st *streamState) token(t engine.Token) []chunk {
	if t.Logprobs != nil {
		st.q.add(*t.Logprobs)
	}
	steps, off := st.q.show(len(t.Text))
	if len(steps) > 0 {
		if len(st.carry) == 0 {
			st.off = off
		}
		st.carry = append(st.carry, steps...)
	}
	if st.tp == nil {
		if t.Text == "" {
			return nil
		}
		return []chunk{st.emit(&ChatMessageOut{Content: t.Text}, t.Text)}
	}
	return st.events(st.tp.Push(t.Text))
}

// emit makes a chunk carrying the records released so far.
func (st *streamState) emit(delta *ChatMessageOut, text string) chunk {
	c := st.o.chunk(delta, text, st.carry, st.off, nil)
	st.carry = nil
	return c
}

func (st *streamState) events(evs []toolEvent) []chunk {
	var out []chunk
	for _, e := range evs {
		switch {
		case e.Start:
			i := e.Index
			out = append(out, st.emit(&ChatMessageOut{ToolCalls: []ToolCallOut{{Index: &i, ID: st.o.newCallID(), Type: "function",
				Function: ToolFunctionOut{Name: e.Name, Arguments: e.Args}}}}, ""))
		case e.Args != "":
			i := e.Index
			out = append(out, st.emit(&ChatMessageOut{ToolCalls: []ToolCallOut{{Index: &i, Function: ToolFunctionOut{Arguments: e.Args}}}}, ""))
		case e.Content != "":
			out = append(out, st.emit(&ChatMessageOut{Content: e.Content}, e.Content))
		}
	}
	return out
}

// finish returns the last chunks: what the tool parser held back, then the
// finish reason with the timings (and the records not yet sent).
func (st *streamState) finish(r engine.Response) []chunk {
	var out []chunk
	calls := 0
	if st.tp != nil {
		out = st.events(st.tp.Finish())
		calls = st.tp.Calls()
	}
	reason := finishReason(r.FinishReason, calls)
	delta := &ChatMessageOut{}
	c := st.o.chunk(delta, "", st.carry, st.off, &reason)
	st.carry = nil
	c.setTimings(timingsOf(r))
	return append(out, c)
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
