package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/jinja"
	"github.com/phonellm/phonellm/internal/testkit/jinjaoracle"
	"github.com/phonellm/phonellm/pipeline"
)

// corpusMessages decodes the shared corpus's conversations as the API would
// hand them over: OpenAI-shaped JSON into []Message.
func corpusMessages(t *testing.T) (map[string][]Message, []json.RawMessage) {
	t.Helper()
	convs := jinjaoracle.LoadConversations(t)
	out := map[string][]Message{}
	for name, raw := range convs.Conversations {
		var msgs []Message
		if err := json.Unmarshal(raw, &msgs); err != nil {
			t.Fatalf("conversation %s: %v", name, err)
		}
		out[name] = msgs
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(convs.Tools, &tools); err != nil {
		t.Fatal(err)
	}
	return out, tools
}

type engineCase struct {
	name string
	tmpl string
	msgs []Message
	opts TemplateOptions
}

// engineCases renders every corpus template on every corpus conversation
// through ChatTemplate, with and without the generation prompt, thinking
// unset and off.
func engineCases(t *testing.T) (map[string]*ChatTemplate, map[string]string, []engineCase) {
	templates := jinjaoracle.Templates(t)
	convs, tools := corpusMessages(t)
	compiled := map[string]*ChatTemplate{}
	var names, convNames []string
	for n, src := range templates {
		c, err := NewChatTemplate(src, "<s>", "</s>")
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		compiled[n] = c
		names = append(names, n)
	}
	for n := range convs {
		convNames = append(convNames, n)
	}
	slices.Sort(names)
	slices.Sort(convNames)
	off := false
	var cases []engineCase
	for _, tn := range names {
		for _, cn := range convNames {
			for _, gp := range []bool{true, false} {
				for _, think := range []*bool{nil, &off} {
					o := TemplateOptions{AddGenerationPrompt: gp, EnableThinking: think}
					if jinjaoracle.UsesTools(cn) {
						o.Tools = tools
					}
					cases = append(cases, engineCase{name: fmt.Sprintf("%s/%s/gen=%t/think=%v", tn, cn, gp, think != nil),
						tmpl: tn, msgs: convs[cn], opts: o})
				}
			}
		}
	}
	return compiled, templates, cases
}

// TestChatTemplateDifferential renders the corpus through ChatTemplate —
// message conversion, content parts, tool calls, tools and options included —
// and compares each prompt byte for byte with jinja2 and @huggingface/jinja
// given the same variables.
func TestChatTemplateDifferential(t *testing.T) {
	for _, oracle := range []func(testing.TB) *jinjaoracle.Oracle{jinjaoracle.Python, jinjaoracle.HuggingFace} {
		t.Run("", func(t *testing.T) {
			o := oracle(t)
			compiled, templates, cases := engineCases(t)
			oc := make([]jinjaoracle.Case, len(cases))
			for i, c := range cases {
				ct := compiled[c.tmpl]
				vars, err := ct.variables(c.msgs, c.opts, ct.parts)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				b, err := json.Marshal(vars)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				oc[i] = jinjaoracle.Case{Template: c.tmpl, Context: b, Now: jinjaoracle.Now.Format(time.RFC3339)}
			}
			res := o.Run(t, templates, oc)
			bad, same := 0, 0
			for i, c := range cases {
				got, err := compiled[c.tmpl].render(context.Background(), c.msgs, c.opts, func() time.Time { return jinjaoracle.Now })
				want := res[i]
				if o.Name() != "jinja2" && jinjaoracle.MarkupDivergence(c.tmpl, got) {
					continue
				}
				switch {
				case want.Output == nil && err == nil && o.Name() == "jinja2":
					bad++
					t.Errorf("%s: %s fails (%s) but we render", c.name, o.Name(), want.Error)
				case want.Output != nil && err != nil:
					bad++
					t.Errorf("%s: %s renders but we fail: %v", c.name, o.Name(), err)
				case want.Output != nil && got != *want.Output:
					bad++
					t.Errorf("%s: prompt differs from %s %s", c.name, o.Name(), jinjaoracle.FirstDiff(*want.Output, got))
				case want.Output != nil:
					same++
				}
				if bad > 10 {
					t.Fatal("too many mismatches")
				}
			}
			parts := 0
			for _, c := range compiled {
				if c.parts {
					parts++
				}
			}
			t.Logf("%d prompts identical to %s; %d of %d templates render content parts", same, o.Name(), parts, len(compiled))
		})
	}
}

// render is Render with a fixed clock (strftime_now) for the differential test.
func (c *ChatTemplate) render(ctx context.Context, messages []Message, opts TemplateOptions, now func() time.Time) (string, error) {
	vars, err := c.variables(messages, opts, c.parts)
	if err != nil {
		return "", err
	}
	return c.tmpl.Render(ctx, vars, &jinja.RenderOptions{Now: now})
}

func readCorpusTemplate(t *testing.T, name string) string {
	t.Helper()
	src, ok := jinjaoracle.Templates(t)[name]
	if !ok {
		t.Fatalf("no template %s in the corpus", name)
	}
	return src
}

// TestChatTemplateToolCalls pins the prompt of a tool-calling conversation
// for Qwen3.5 (XML parameters from the arguments mapping) and Qwen2.5 (JSON).
func TestChatTemplateToolCalls(t *testing.T) {
	msgs := []Message{
		{Role: "user", Content: "Weather in Zürich?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Type: "function", Function: ToolCallFunction{Name: "get_weather", Arguments: `{"city": "Zürich", "days": 2, "hourly": true}`}}}},
		{Role: "tool", ToolCallID: "c1", Name: "get_weather", Content: "21 C"},
	}
	tools := []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}`)}
	for _, c := range []struct {
		template string
		want     []string
	}{
		{"Qwen3.5-4B", []string{
			"<tools>\n" + `{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}` + "\n</tools>",
			"<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich\n</parameter>\n<parameter=days>\n2\n</parameter>\n<parameter=hourly>\nTrue\n</parameter>\n</function>\n</tool_call><|im_end|>\n",
			"<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n",
		}},
		{"Qwen-Qwen2.5-7B-Instruct", []string{
			"<|im_start|>assistant\n<tool_call>\n" + `{"name": "get_weather", "arguments": {"city": "Zürich", "days": 2, "hourly": true}}` + "\n</tool_call><|im_end|>\n",
			"<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
		}},
	} {
		ct, err := NewChatTemplate(readCorpusTemplate(t, c.template), "", "<|im_end|>")
		if err != nil {
			t.Fatal(err)
		}
		got, err := ct.Render(context.Background(), msgs, TemplateOptions{AddGenerationPrompt: true, Tools: tools})
		if err != nil {
			t.Fatalf("%s: %v", c.template, err)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: prompt lacks %q:\n%s", c.template, w, got)
			}
		}
	}
}

// TestChatTemplateVariables checks what a template sees of a message.
func TestChatTemplateVariables(t *testing.T) {
	const src = `{% for m in messages %}{{ m|tojson }}
{% endfor %}{{ tools }} {{ documents }} {{ add_generation_prompt }} {{ bos_token }} {{ eos_token }} {{ enable_thinking }} {{ custom }} {{ nested|tojson }}`
	ct, err := NewChatTemplate(src, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	if ct.parts {
		t.Error("a template printing content as JSON was taken for one that renders parts")
	}
	off := false
	msgs := []Message{
		{Role: "user", Parts: []ContentPart{{Type: "text", Text: "a"}, {Type: "text", Text: "b"}}},
		{Role: "assistant", ReasoningContent: "hmm", ToolCalls: []ToolCall{
			{ID: "x", Type: "function", Function: ToolCallFunction{Name: "f", Arguments: `{"b": 1, "a": [2]}`}},
			{Function: ToolCallFunction{Name: "g", Arguments: `not json`}}}},
		{Role: "tool", ToolCallID: "x", Name: "f", Content: "ok"},
	}
	got, err := ct.Render(context.Background(), msgs, TemplateOptions{EnableThinking: &off,
		Extra: map[string]any{"custom": 7, "nested": json.RawMessage(`{"z": 1, "y": 2}`), "enable_thinking": true, "bos_token": "B"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role": "user", "content": "a\nb"}
{"role": "assistant", "content": "", "reasoning_content": "hmm", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [2]}}}, {"type": "function", "function": {"name": "g", "arguments": "not json"}}]}
{"role": "tool", "content": "ok", "tool_call_id": "x", "name": "f"}
None None False B </s> True 7 {"z": 1, "y": 2}`
	if got != want {
		t.Fatalf("variables:\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []TemplateOptions{
		{Extra: map[string]any{"messages": 1}},
		{Tools: []json.RawMessage{json.RawMessage(`{`)}},
	} {
		var re *TemplateRenderError
		if _, err := ct.Render(context.Background(), msgs, bad); !errors.As(err, &re) {
			t.Errorf("%+v: %v, want a *TemplateRenderError", bad, err)
		}
	}
	img := []Message{{Role: "user", Parts: []ContentPart{{Type: "image_url"}}}}
	var re *TemplateRenderError
	if _, err := ct.Render(context.Background(), img, TemplateOptions{}); !errors.As(err, &re) || !strings.Contains(err.Error(), `type "image_url" is not supported`) {
		t.Errorf("image part: %v", err)
	}
}

// TestChatTemplateParts: a template that renders part lists gets them.
func TestChatTemplateParts(t *testing.T) {
	ct, err := NewChatTemplate(readCorpusTemplate(t, "Qwen3.5-4B"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if !ct.parts {
		t.Fatal("Qwen3.5's template renders content parts but was not detected")
	}
	got, err := ct.Render(context.Background(), []Message{{Role: "user", Parts: []ContentPart{{Type: "text", Text: "one"}, {Type: "text", Text: " two"}}}}, TemplateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>user\none two<|im_end|>\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestChatTemplateErrors checks how failures are classified.
func TestChatTemplateErrors(t *testing.T) {
	_, err := NewChatTemplate("{% for x in %}", "", "")
	var pe *TemplateParseError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "line 1:13") {
		t.Fatalf("parse: %v", err)
	}
	// the engine wraps it with the file's name; it stays an input error (exit 3)
	if wrapped := fmt.Errorf("goengine: model.gguf: %w", err); !pipeline.IsInputError(wrapped) {
		t.Fatalf("%v is not an input error", wrapped)
	}
	msgs := []Message{{Role: "user", Content: "hi"}}
	loop, err := NewChatTemplate(`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var le *TemplateLimitError
	_, err = loop.Render(context.Background(), msgs, TemplateOptions{})
	var jl *jinja.LimitError
	if !errors.As(err, &le) || !errors.As(err, &jl) || jl.Limit != jinja.LimitIterations {
		t.Fatalf("looping template: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	unlimited := jinja.Limits{Steps: -1, Iterations: -1}
	_, err = loop.Render(ctx, msgs, TemplateOptions{Limits: &unlimited})
	if !errors.As(err, &le) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	raise, err := NewChatTemplate(`{{ raise_exception('Conversation roles must alternate') }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var re *TemplateRenderError
	_, err = raise.Render(context.Background(), msgs, TemplateOptions{})
	var jr *jinja.RaiseError
	if !errors.As(err, &re) || !errors.As(err, &jr) || jr.Message != "Conversation roles must alternate" {
		t.Fatalf("raise: %v", err)
	}
}

func TestCheckChatTemplate(t *testing.T) {
	for name, src := range jinjaoracle.Templates(t) {
		err := CheckChatTemplate(src)
		if name == "NousResearch-Hermes-3-Llama-3.1-8B-tool_use" {
			// this tool-use-only variant iterates tools unconditionally: it
			// fails every request without tools, which is what the check is for
			var re *TemplateRenderError
			if !errors.As(err, &re) {
				t.Errorf("%s: %v, want a *TemplateRenderError", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := CheckChatTemplate(""); err != nil {
		t.Errorf("empty (ChatML): %v", err)
	}
	var pe *TemplateParseError
	if err := CheckChatTemplate("{{ x"); !errors.As(err, &pe) {
		t.Errorf("unparsable: %v", err)
	}
	var le *TemplateLimitError
	if err := CheckChatTemplate(`{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`); !errors.As(err, &le) {
		t.Errorf("recursive: %v", err)
	}
	if err := CheckChatTemplate(`{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}{% for i in range(10**6) %}{% endfor %}{% endif %}`); !errors.As(err, &le) {
		t.Errorf("looping on tools: %v", err)
	}
	var re *TemplateRenderError
	if err := CheckChatTemplate(`{{ messages[0].content + 1 }}`); !errors.As(err, &re) {
		t.Errorf("type error: %v", err)
	}
}

func TestMessageJSON(t *testing.T) {
	in := `[{"role":"system","content":"s"},
	{"role":"user","content":[{"type":"text","text":"a"}]},
	{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}]},
	{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"g","arguments":{"y": [1, 2]}}}],"reasoning_content":"r"},
	{"role":"tool","tool_call_id":"c","name":"f","content":"ok"}]`
	var msgs []Message
	if err := json.Unmarshal([]byte(in), &msgs); err != nil {
		t.Fatal(err)
	}
	if msgs[1].Parts == nil || msgs[1].Parts[0].Text != "a" || msgs[2].ToolCalls[0].Function.Arguments != `{"x": 1}` ||
		msgs[3].ToolCalls[0].Function.Arguments != `{"y":[1,2]}` || msgs[3].ReasoningContent != "r" || msgs[4].ToolCallID != "c" {
		t.Fatalf("decoded %+v", msgs)
	}
	out, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}]},{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"type":"function","function":{"name":"g","arguments":"{\"y\":[1,2]}"}}]},{"role":"tool","content":"ok","tool_call_id":"c","name":"f"}]`
	if string(out) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", out, want)
	}
	var m Message
	if err := json.Unmarshal([]byte(`{"role":"user","content":5}`), &m); err == nil {
		t.Error("numeric content accepted")
	}
}
