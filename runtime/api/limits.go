package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/runtime/engine"
)

// Limits bound the work one request can make the server do before it takes
// a slot (reading, decoding, templating, tokenizing), so that clients cannot
// starve the CPU or the memory with requests that will never generate. Zero
// fields follow the model's context length.
type Limits struct {
	// MaxBodyBytes bounds a request body; 0 means 4 MiB plus six times
	// MaxPromptBytes (room for a prompt that fills the context even when
	// every character is JSON-escaped). Larger bodies get 413.
	MaxBodyBytes int64
	// MaxPromptBytes bounds the text of a request, checked before the
	// template and the tokenizer run: each message's content and their sum
	// (chat), the prompt string (completions). 0 means 32 bytes per token of
	// context, at least 64 KiB: far more than natural text needs per token
	// (English about 4, code about 3, CJK about 2-3), so only text that
	// cannot fit the context is refused.
	MaxPromptBytes int
	// MaxMessages bounds the messages of a chat request; 0 means a quarter
	// of the context length, at least 64 (chat templates spend several
	// tokens on every message).
	MaxMessages int
	// MaxStopBytes bounds each stop sequence (they are matched against every
	// generated token); 0 means 1 KiB.
	MaxStopBytes int
	// PrepWorkers bounds the requests decoding, templating and tokenizing at
	// once; 0 means half the CPUs, at least 1. Others wait, and the wait
	// counts against the request timeout.
	PrepWorkers int
	// BodyBudget bounds the request bodies held in memory at once, over all
	// requests; 0 means DefaultBodyBudget. A request that would exceed it
	// gets 429.
	BodyBudget int64
}

// DefaultBodyBudget is the default Limits.BodyBudget.
const DefaultBodyBudget = 256 << 20

// forContext fills the zero limits for a model with a context of n tokens.
func (l Limits) forContext(n int) Limits {
	if l.MaxPromptBytes <= 0 {
		l.MaxPromptBytes = max(64<<10, 32*n)
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = 4<<20 + 6*int64(l.MaxPromptBytes)
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = max(64, n/4)
	}
	if l.MaxStopBytes <= 0 {
		l.MaxStopBytes = 1 << 10
	}
	return l
}

// request is a generation request after its body was decoded, checked,
// templated and tokenized: ready for a slot.
type request struct {
	greq engine.Request
	f    *samplingFields
	chat bool
	// logprobs: the answer carries log-probabilities.
	logprobs bool
	// tools, when set, reads tool calls out of the answer.
	tools *toolReader
	// constraintParam names the field that constrains the output.
	constraintParam string
	// chatMsgs and chatOpts are a chat request's messages and template options, kept until tokenize has found
	// where the shared system prefix ends (cacheBoundary).
	chatMsgs []engine.Message
	chatOpts engine.TemplateOptions
}

// prepare turns a body into a request on one of the PrepWorkers. The work
// runs under ctx (the request's timeout and the client's connection); if ctx
// ends first the client gets its answer at once, while the worker stays
// taken until the engine returns, so an engine that is slow to notice
// cancellation still cannot occupy more cores than PrepWorkers. release
// returns the body's bytes to the budget once the body is decoded.
func (s *Server) prepare(ctx context.Context, b *engineBox, body []byte, release func(), chat bool) (*request, *httpx.Error) {
	select {
	case s.prep <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, contextError(ctx)
	}
	type result struct {
		req *request
		err *httpx.Error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-s.prep }()
		defer func() {
			if p := recover(); p != nil {
				release()
				s.o.Logger.Error("preparing a request panicked", "panic", fmt.Sprint(p))
				done <- result{err: serverError("internal_error", "The server could not prepare this request.")}
			}
		}()
		req, err := s.prepareNow(ctx, b, body, release, chat)
		done <- result{req, err}
	}()
	select {
	case r := <-done:
		return r.req, r.err
	case <-ctx.Done():
		return nil, contextError(ctx)
	}
}

func (s *Server) prepareNow(ctx context.Context, b *engineBox, body []byte, release func(), chat bool) (*request, *httpx.Error) {
	var r *request
	var apiErr *httpx.Error
	if chat {
		var req ChatRequest
		apiErr = decodeJSON(body, &req)
		release()
		if apiErr != nil {
			return nil, apiErr
		}
		if apiErr = s.checkModel(b, req.Model); apiErr != nil {
			return nil, apiErr
		}
		r, apiErr = s.prepareChat(ctx, b, &req)
	} else {
		var req CompletionRequest
		apiErr = decodeJSON(body, &req)
		release()
		if apiErr != nil {
			return nil, apiErr
		}
		if apiErr = s.checkModel(b, req.Model); apiErr != nil {
			return nil, apiErr
		}
		r, apiErr = s.prepareCompletion(b, &req)
	}
	if apiErr != nil {
		return nil, apiErr
	}
	return s.tokenize(ctx, b, r)
}

// tokenize turns the prompt into tokens and checks them against the
// context.
func (s *Server) tokenize(ctx context.Context, b *engineBox, r *request) (*request, *httpx.Error) {
	greq, chat := &r.greq, r.chat
	greq.AddSpecial = true
	info := b.e.Info()
	param := "prompt"
	if chat {
		param = "messages"
	}
	if greq.Tokens == nil {
		toks, err := b.e.Tokenize(ctx, greq.Prompt, true)
		if err != nil {
			return nil, tokenizeError(ctx, err, info.ContextLength, chat)
		}
		greq.Tokens = toks
		greq.Prompt = "" // the tokens say it all: a queued request holds no second copy of its text
	}
	for _, t := range greq.Tokens {
		if t < 0 || int(t) >= info.VocabSize {
			return nil, httpx.BadRequest("prompt", "", "token %d outside the vocabulary of %d", t, info.VocabSize)
		}
	}
	if len(greq.Tokens) == 0 {
		return nil, httpx.BadRequest(param, "", "the prompt is empty")
	}
	if len(greq.Tokens) >= info.ContextLength {
		return nil, contextLengthError(len(greq.Tokens), info.ContextLength, chat)
	}
	if chat && !greq.NoCache {
		// Where the rendered system messages end: the prefix the next requests of this task share, which an
		// engine keeps a checkpoint at and does not give away for a shorter reuse.
		greq.CacheBoundary = cacheBoundary(ctx, b.e, r.chatMsgs, r.chatOpts, greq.Tokens)
	}
	r.chatMsgs = nil // the tokens say it all from here
	return r, nil
}

// limitExceeded is implemented by errors that say a bounded computation (a
// chat template's loop, output or time budget) ran out: the model's
// template is at fault, not the client's messages.
type limitExceeded interface{ LimitExceeded() bool }

func templateError(ctx context.Context, err error) *httpx.Error {
	if ctx.Err() != nil {
		return contextError(ctx)
	}
	msg := httpx.CapText(err.Error(), 512)
	var le limitExceeded
	if errors.As(err, &le) && le.LimitExceeded() {
		return serverError("template_limit", "The model's chat template exceeded a limit: %s", msg)
	}
	return httpx.BadRequest("messages", "", "the chat template rejected the messages: %s", msg)
}

// tokenizeError answers a failed tokenization: the request's timeout or the client leaving, text longer
// than the context can hold (the tokenizer stops once it knows: a *tokenizer.LimitError, answered as OpenAI's
// context_length_exceeded), or text the tokenizer refuses.
func tokenizeError(ctx context.Context, err error, contextLength int, chat bool) *httpx.Error {
	if ctx.Err() != nil {
		return contextError(ctx)
	}
	param := "prompt"
	if chat {
		param = "messages"
	}
	var le *tokenizer.LimitError
	if errors.As(err, &le) {
		what := fmt.Sprintf("%d bytes, more than %d tokens can hold", le.Count, contextLength)
		if le.Limit == tokenizer.LimitTokens {
			what = fmt.Sprintf("more than %d tokens", le.Count-1)
		}
		return httpx.BadRequest(param, "context_length_exceeded",
			"This model's maximum context length is %d tokens. However, your messages resulted in %s (at least one must be left to generate).", contextLength, what)
	}
	return httpx.BadRequest(param, "", "%s", httpx.CapText(err.Error(), 512))
}

func tooLong(param string, got, limit int) *httpx.Error {
	return httpx.BadRequest(param, "string_above_max_length",
		"Invalid '%s': string too long: %d bytes, at most %d.", param, got, limit)
}

func contextLengthError(n, limit int, chat bool) *httpx.Error {
	param := "prompt"
	if chat {
		param = "messages"
	}
	return httpx.BadRequest(param, "context_length_exceeded",
		"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens (at least one must be left to generate).", limit, n)
}

// decodeJSON decodes one JSON value, nothing after it.
func decodeJSON(body []byte, v any) *httpx.Error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return httpx.BadRequest("", "invalid_json", "We could not parse the JSON body of your request: %s", httpx.CapText(err.Error(), 256))
	}
	if dec.More() {
		return httpx.BadRequest("", "invalid_json", "unexpected data after the JSON body")
	}
	return nil
}

// readError answers a failed body read, unless the client is gone.
func (s *Server) readError(w http.ResponseWriter, r *http.Request, err error) {
	if httpx.ClientGone(r, err) {
		return
	}
	httpx.Reject(w, r, httpx.BodyError(err, s.o.HTTP.WithDefaults().ReadTimeout))
}
