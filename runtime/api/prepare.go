package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// Preparing a request's output options: its constraint, logprobs and tools
// (checked, compiled, tried on the model's vocabulary) and, for a chat, the
// prompt the template renders with the tools.

// toolReader makes the tool-call parser of a request's answers.
type toolReader struct {
	strings      map[string]map[string]bool
	skipThinkEnd bool
}

func (r *toolReader) parser() *toolParser {
	p := newToolParser(r.strings)
	p.skipThinkEnd = r.skipThinkEnd
	return p
}

// prepareCompletion checks a completion request's prompt and output
// options.
func (s *Server) prepareCompletion(b *engineBox, req *CompletionRequest) (*request, *httpx.Error) {
	f := &req.samplingFields
	if req.Echo {
		return nil, httpx.BadRequest("echo", "", "echo is not supported")
	}
	text, toks, apiErr := req.prompt(b.lim, b.e.Info().ContextLength)
	if apiErr != nil {
		return nil, apiErr
	}
	greq, apiErr := f.request(*s.o.Sampling, b.lim)
	if apiErr != nil {
		return nil, apiErr
	}
	greq.Prompt, greq.Tokens = text, toks
	if greq.Logprobs, apiErr = req.logprobOptions(); apiErr != nil {
		return nil, apiErr
	}
	if greq.Constraint, apiErr = f.constraint(s.cache); apiErr != nil {
		return nil, apiErr
	}
	r := &request{greq: greq, f: f, logprobs: greq.Logprobs != nil, constraintParam: f.constraintParam()}
	if apiErr = s.checkConstraint(b, r); apiErr != nil {
		return nil, apiErr
	}
	return r, nil
}

// prepareChat checks a chat request's messages, tools and output options
// and renders its prompt.
func (s *Server) prepareChat(ctx context.Context, b *engineBox, req *ChatRequest) (*request, *httpx.Error) {
	f := &req.samplingFields
	msgs, apiErr := req.messages(b.lim)
	if apiErr != nil {
		return nil, apiErr
	}
	greq, apiErr := f.request(*s.o.Sampling, b.lim)
	if apiErr != nil {
		return nil, apiErr
	}
	if greq.Logprobs, apiErr = req.logprobOptions(); apiErr != nil {
		return nil, apiErr
	}
	if greq.Constraint, apiErr = f.constraint(s.cache); apiErr != nil {
		return nil, apiErr
	}
	r := &request{f: f, chat: true, logprobs: greq.Logprobs != nil, constraintParam: f.constraintParam()}
	tools, apiErr := parseTools(req.Tools)
	if apiErr != nil {
		return nil, apiErr
	}
	choice, apiErr := parseToolChoice(req.ToolChoice, tools)
	if apiErr != nil {
		return nil, apiErr
	}
	toolBytes := 0
	for _, t := range tools {
		toolBytes += len(t.raw)
	}
	if toolBytes+totalContent(msgs) > b.lim.MaxPromptBytes {
		return nil, httpx.BadRequest("tools", "string_above_max_length",
			"Invalid 'tools': the tools and messages hold more than %d bytes, more than a prompt for this model's context may have.", b.lim.MaxPromptBytes)
	}
	opts := engine.TemplateOptions{AddGenerationPrompt: true, EnableThinking: s.o.EnableThinking}
	if len(tools) > 0 {
		opts.Tools = make([]json.RawMessage, len(tools))
		for i, t := range tools {
			opts.Tools[i] = t.raw
		}
	}
	if len(req.ChatTemplateKwargs) > 0 {
		opts.Extra = map[string]any{}
		for k, v := range req.ChatTemplateKwargs {
			if reservedKwargs[k] {
				return nil, httpx.BadRequest("chat_template_kwargs", "", "Invalid 'chat_template_kwargs': %q is set by the request itself.", httpx.CapText(k, 80))
			}
			opts.Extra[k] = v
		}
	}
	prompt, err := b.e.ApplyChatTemplate(ctx, msgs, opts)
	if err != nil {
		return nil, templateError(ctx, err)
	}
	if limit := b.lim.MaxPromptBytes + 1<<20; len(prompt) > limit {
		return nil, serverError("template_output_too_large",
			"The model's chat template turned %d bytes of messages into %d bytes, more than the %d allowed.",
			totalContent(msgs), len(prompt), limit)
	}
	greq.Prompt = prompt
	r.chatMsgs, r.chatOpts = msgs, opts
	if choice.mode != "none" {
		if greq.Constraint != nil {
			return nil, httpx.BadRequest(r.constraintParam, "", "'%s' cannot constrain an answer that may call tools; set tool_choice to \"none\" or leave '%s' out.", r.constraintParam, r.constraintParam)
		}
		thinkOpen := openThink(prompt)
		r.tools = &toolReader{strings: stringParams(tools), skipThinkEnd: thinkOpen}
		if choice.mode == "required" || choice.mode == "function" {
			form, err := b.callForm(ctx)
			if err != nil {
				return nil, contextError(ctx)
			}
			parallel := req.ParallelToolCalls == nil || *req.ParallelToolCalls
			if greq.Constraint, apiErr = s.toolConstraint(tools, choice, parallel, form, thinkOpen); apiErr != nil {
				return nil, apiErr
			}
			r.constraintParam = "tool_choice"
		}
	}
	r.greq = greq
	if apiErr = s.checkConstraint(b, r); apiErr != nil {
		return nil, apiErr
	}
	return r, nil
}

// reservedKwargs are template variables the request sets itself.
var reservedKwargs = map[string]bool{"messages": true, "tools": true, "documents": true, "add_generation_prompt": true}

// openThink reports a prompt that leaves the model inside a reasoning block
// (Qwen3.5's template ends the generation prompt with "<think>\n").
func openThink(prompt string) bool {
	p := strings.TrimRight(prompt, " \n")
	return strings.HasSuffix(p, "<think>")
}

// toolConstraint compiles (or finds in the cache) the grammar of a forced
// call.
func (s *Server) toolConstraint(tools []tool, choice toolChoice, parallel bool, form callForm, thinkOpen bool) (engine.Constraint, *httpx.Error) {
	var key strings.Builder
	fmt.Fprintf(&key, "t%s|%s|%s|%v|%v", form, choice.mode, choice.name, parallel, thinkOpen)
	for _, t := range tools {
		key.WriteByte('|')
		key.Write(t.raw)
	}
	var apiErr *httpx.Error
	g, err := s.cache.get(key.String(), func() (*grammar.Grammar, error) {
		src, e := toolGrammar(tools, choice, parallel, form)
		if e != nil {
			apiErr = e
			return nil, e
		}
		if thinkOpen {
			src = "root ::= (\"</think>\" call-gap)? calls\ncall-gap ::= [ \\t\\n]{0,4}\n" + strings.Replace(src, "root ::=", "calls ::=", 1)
		}
		return grammar.Parse(src)
	})
	if apiErr != nil {
		return nil, apiErr
	}
	if err != nil {
		return nil, httpx.BadRequest("tools", "invalid_json_schema", "The tools' parameter schemas do not make a usable grammar: %s", httpx.CapText(err.Error(), 512))
	}
	return g, nil
}

// checkConstraint tries the request's constraint on the model's vocabulary
// before the request waits for a slot, when the engine shares its
// vocabulary: a grammar naming a token the model lacks is a 400 then, not an
// error in the middle of a stream.
func (s *Server) checkConstraint(b *engineBox, r *request) *httpx.Error {
	c := r.greq.Constraint
	if c == nil {
		return nil
	}
	ve, ok := b.e.(vocabularyEngine)
	if !ok {
		return nil
	}
	if _, err := c.NewMatcher(ve.Vocabulary()); err != nil {
		return constraintError(err, r.constraintParam)
	}
	return nil
}

// vocabularyEngine is an engine that shares its vocabulary (goengine and
// the test fake do).
type vocabularyEngine interface {
	Vocabulary() *engine.Vocabulary
}
