package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/phonellm/phonellm/internal/jinja"
)

// ChatMLTemplate is used when a GGUF has no tokenizer.chat_template; it is
// llama.cpp's fallback (llm_chat_apply_template, LLM_CHAT_TEMPLATE_CHATML).
const ChatMLTemplate = `{%- for message in messages -%}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}`

// ChatTemplate renders chat messages with a model's Jinja chat template
// (the GGUF key tokenizer.chat_template) through internal/jinja: jinja2's
// semantics in transformers' environment, every render bounded by limits
// and by the request's context. It is safe for concurrent use.
type ChatTemplate struct {
	tmpl     *jinja.Template
	bosToken string
	eosToken string
	// parts: the template renders content given as a list of parts; for the
	// others the text parts are joined into one string (like llama.cpp).
	parts bool
}

// TemplateParseError reports a chat template that does not parse. A model
// file carrying one is bad input.
type TemplateParseError struct{ Err error }

func (e *TemplateParseError) Error() string {
	return "engine: the chat template does not parse: " + strings.TrimPrefix(e.Err.Error(), "jinja: ")
}
func (e *TemplateParseError) Unwrap() error { return e.Err }

// InputError marks the file as bad input (exit 3; see pipeline/errors.go).
func (e *TemplateParseError) InputError() bool { return true }

// TemplateLimitError reports a render stopped by a limit (steps, loop
// iterations, call depth, output or allocated bytes) or by the request's
// context: the template is at fault (or the time ran out), not the request,
// so an API answers 500. errors.Is(err, context.DeadlineExceeded) holds when
// the deadline stopped it; errors.As finds the *jinja.LimitError otherwise.
type TemplateLimitError struct{ Err error }

func (e *TemplateLimitError) Error() string {
	return "engine: chat template stopped: " + strings.TrimPrefix(e.Err.Error(), "jinja: ")
}
func (e *TemplateLimitError) Unwrap() error { return e.Err }

// LimitExceeded says a bounded computation ran out (runtime/api answers 500, not 400).
func (e *TemplateLimitError) LimitExceeded() bool { return true }

// TemplateRenderError reports a chat template that fails on these messages:
// it refused them (raise_exception, e.g. "Conversation roles must
// alternate"), they hold what the template cannot take, or it hit a type
// error on them. An API answers 400.
type TemplateRenderError struct{ Err error }

func (e *TemplateRenderError) Error() string {
	return "engine: the chat template rejected the messages: " + strings.TrimPrefix(e.Err.Error(), "jinja: ")
}
func (e *TemplateRenderError) Unwrap() error { return e.Err }

// NewChatTemplate compiles src. bosToken and eosToken are the texts of the
// model's BOS and EOS tokens (templates read them as bos_token/eos_token).
// An empty src selects ChatMLTemplate. A template that does not parse is a
// *TemplateParseError.
func NewChatTemplate(src, bosToken, eosToken string) (*ChatTemplate, error) {
	if src == "" {
		src = ChatMLTemplate
	}
	t, err := jinja.Parse(src)
	if err != nil {
		return nil, &TemplateParseError{Err: err}
	}
	c := &ChatTemplate{tmpl: t, bosToken: bosToken, eosToken: eosToken}
	c.parts = c.probeParts()
	return c, nil
}

// partsProbe is the text of the content part probeParts renders.
const partsProbe = "phonellm-parts-probe"

// probeParts reports whether the template renders a content part list (the
// way llama.cpp detects typed-content support): the part's text appears in
// the output and the list itself is not printed.
func (c *ChatTemplate) probeParts() bool {
	msgs := []Message{{Role: "user", Parts: []ContentPart{{Type: "text", Text: partsProbe}}}}
	vars, err := c.variables(msgs, TemplateOptions{AddGenerationPrompt: true}, true)
	if err != nil {
		return false
	}
	// A probe is bounded by probeLimits, not by a request: no context to pass.
	out, err := c.tmpl.Render(context.Background(), vars, &jinja.RenderOptions{Limits: probeLimits})
	return err == nil && strings.Contains(out, partsProbe) && !strings.Contains(out, "'type'") && !strings.Contains(out, `"type"`)
}

// probeLimits bound the renders of probeParts and CheckChatTemplate: ample
// for any real template on a short conversation.
var probeLimits = jinja.Limits{Steps: 2_000_000, Iterations: 200_000, CallDepth: 64, Output: 1 << 20, Alloc: 32 << 20}

// Render returns the prompt text for messages. It stops when ctx ends or a
// limit of opts.Limits is exceeded (*TemplateLimitError); a template that
// refuses the messages gives a *TemplateRenderError.
func (c *ChatTemplate) Render(ctx context.Context, messages []Message, opts TemplateOptions) (string, error) {
	if len(messages) == 0 {
		return "", &TemplateRenderError{Err: errors.New("no messages")}
	}
	vars, err := c.variables(messages, opts, c.parts)
	if err != nil {
		return "", &TemplateRenderError{Err: err}
	}
	ro := &jinja.RenderOptions{}
	if opts.Limits != nil {
		ro.Limits = *opts.Limits
	}
	out, err := c.tmpl.Render(ctx, vars, ro)
	if err != nil {
		var le *jinja.LimitError
		if errors.As(err, &le) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return "", &TemplateLimitError{Err: err}
		}
		return "", &TemplateRenderError{Err: err}
	}
	return out, nil
}

// reserved are the variables TemplateOptions.Extra may not set.
var reserved = map[string]bool{"messages": true, "tools": true, "documents": true, "add_generation_prompt": true}

// variables are what transformers' apply_chat_template passes to a template:
// messages, tools (None without tools), documents (None),
// add_generation_prompt, the special tokens, then the template kwargs.
func (c *ChatTemplate) variables(messages []Message, opts TemplateOptions, parts bool) (map[string]jinja.Value, error) {
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		v, err := messageValue(m, parts)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs[i] = v
	}
	tools := jinja.None()
	if opts.Tools != nil {
		list := make([]jinja.Value, len(opts.Tools))
		for i, raw := range opts.Tools {
			v, err := jinja.FromJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("tools[%d]: %w", i, err)
			}
			list[i] = v
		}
		tools = jinja.NewList(list...)
	}
	vars := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs...),
		"tools":                 tools,
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.Bool(opts.AddGenerationPrompt),
		"bos_token":             jinja.String(c.bosToken),
		"eos_token":             jinja.String(c.eosToken),
	}
	if opts.EnableThinking != nil {
		vars["enable_thinking"] = jinja.Bool(*opts.EnableThinking)
	}
	for k, x := range opts.Extra {
		if reserved[k] {
			return nil, fmt.Errorf("chat_template_kwargs may not set %q", k)
		}
		v, err := jinja.FromGo(x)
		if err != nil {
			return nil, fmt.Errorf("chat_template_kwargs[%q]: %w", k, err)
		}
		vars[k] = v
	}
	return vars, nil
}

// messageValue is the mapping a template sees for m, in OpenAI's key order.
func messageValue(m Message, parts bool) (jinja.Value, error) {
	d := jinja.NewDict()
	d.Set("role", jinja.String(m.Role))
	switch {
	case m.Parts == nil:
		d.Set("content", jinja.String(m.Content))
	case parts:
		list := make([]jinja.Value, len(m.Parts))
		for i, p := range m.Parts {
			if p.Type != "text" {
				return jinja.Value{}, fmt.Errorf("content part %d: type %q is not supported", i, p.Type)
			}
			pd := jinja.NewDict()
			pd.Set("type", jinja.String("text"))
			pd.Set("text", jinja.String(p.Text))
			list[i] = pd.Value()
		}
		d.Set("content", jinja.NewList(list...))
	default:
		// The template wants a string: the text parts, one per line
		// (llama.cpp's concat_typed_text).
		texts := make([]string, len(m.Parts))
		for i, p := range m.Parts {
			if p.Type != "text" {
				return jinja.Value{}, fmt.Errorf("content part %d: type %q is not supported", i, p.Type)
			}
			texts[i] = p.Text
		}
		d.Set("content", jinja.String(strings.Join(texts, "\n")))
	}
	if m.ReasoningContent != "" {
		d.Set("reasoning_content", jinja.String(m.ReasoningContent))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			cd := jinja.NewDict()
			if tc.ID != "" {
				cd.Set("id", jinja.String(tc.ID))
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			cd.Set("type", jinja.String(typ))
			fd := jinja.NewDict()
			fd.Set("name", jinja.String(tc.Function.Name))
			fd.Set("arguments", argumentsValue(tc.Function.Arguments))
			cd.Set("function", fd.Value())
			calls[i] = cd.Value()
		}
		d.Set("tool_calls", jinja.NewList(calls...))
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", jinja.String(m.ToolCallID))
	}
	if m.Name != "" {
		d.Set("name", jinja.String(m.Name))
	}
	return d.Value(), nil
}

// argumentsValue is a tool call's arguments as templates read them: the
// mapping when the text is a JSON object, else the text.
func argumentsValue(args string) jinja.Value {
	s := strings.TrimSpace(args)
	if strings.HasPrefix(s, "{") {
		if v, err := jinja.FromJSON([]byte(s)); err == nil {
			return v
		}
	}
	return jinja.String(args)
}

// CheckChatTemplate compiles src and renders probe conversations under tight
// limits, so that inspect and fit can warn when a model's template would
// fail every request: it must render a single user turn; a conversation with
// a system message, two turns and tool definitions must not hit a limit or a
// type error (the template may refuse it with raise_exception). An empty src
// is fine (ChatML is used). The errors are *TemplateParseError,
// *TemplateLimitError and *TemplateRenderError. The probes are bounded by
// steps and sizes, not by time, so CheckChatTemplate needs no context.
func CheckChatTemplate(src string) error {
	if src == "" {
		return nil
	}
	c, err := NewChatTemplate(src, "<s>", "</s>")
	if err != nil {
		return err
	}
	lim := probeLimits
	ctx := context.Background()
	opts := TemplateOptions{AddGenerationPrompt: true, Limits: &lim}
	if _, err := c.Render(ctx, []Message{{Role: "user", Content: "Hello."}}, opts); err != nil {
		return err
	}
	tools := opts
	tools.Tools = probeTools
	for _, probe := range []struct {
		msgs []Message
		opts TemplateOptions
	}{
		{[]Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello."},
			{Role: "assistant", Content: "Hi."}, {Role: "user", Content: "Bye."}}, opts},
		{[]Message{{Role: "user", Content: "Hello."}}, tools},
	} {
		_, err := c.Render(ctx, probe.msgs, probe.opts)
		var re *jinja.RaiseError
		if err != nil && !errors.As(err, &re) {
			return err
		}
	}
	return nil
}

var probeTools = []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "get_time", "description": "Current time.", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}`)}
