package api

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/enginetest"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// Real Qwen chat templates (internal/jinja's test data): Qwen3 writes calls
// as JSON, Qwen3.5 in its XML form.
func qwenTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../internal/jinja/testdata/templates/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const (
	qwen3Template  = "Qwen-Qwen3-0.6B.jinja"
	qwen35Template = "Qwen3.5-4B.jinja"
)

var weatherTools = []map[string]any{
	{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Weather in a city.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"city": map[string]any{"type": "string"},
			"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
		}, "required": []string{"city", "days"}}}},
	{"type": "function", "function": map[string]any{"name": "get_time", "parameters": map[string]any{"type": "object",
		"properties": map[string]any{"zone": map[string]any{"type": "string", "enum": []string{"UTC", "CET"}}}, "required": []string{"zone"}}}},
}

// replyRecorder answers with reply and remembers the last prompt.
type replyRecorder struct {
	mu     sync.Mutex
	prompt string
	reply  string
}

func (r *replyRecorder) Reply(p string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prompt = p
	return r.reply
}

func (r *replyRecorder) set(reply string) {
	r.mu.Lock()
	r.reply = reply
	r.mu.Unlock()
}

func (r *replyRecorder) lastPrompt() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prompt
}

// streamedCalls assembles a streamed answer: content, calls (OpenAI's
// delta protocol: the first delta of an index has id, type and name) and
// the finish reason.
func streamedCalls(t *testing.T, url string, body map[string]any) (string, []ToolCallOut, string) {
	t.Helper()
	var content strings.Builder
	var calls []ToolCallOut
	finish := ""
	for _, c := range streamChunks(t, url, body) {
		ch := c.Choices[0]
		content.WriteString(ch.Delta.Content)
		for _, d := range ch.Delta.ToolCalls {
			if d.Index == nil {
				t.Fatalf("tool call delta without index: %+v", d)
			}
			i := *d.Index
			if i == len(calls) {
				if d.ID == "" || d.Type != "function" || d.Function.Name == "" {
					t.Fatalf("first delta of call %d: %+v", i, d)
				}
				calls = append(calls, ToolCallOut{ID: d.ID, Type: d.Type, Function: d.Function})
				continue
			}
			if i != len(calls)-1 || d.ID != "" || d.Function.Name != "" {
				t.Fatalf("delta %+v after %d calls", d, len(calls))
			}
			calls[i].Function.Arguments += d.Function.Arguments
		}
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
	}
	return content.String(), calls, finish
}

func TestToolCalls(t *testing.T) {
	for _, c := range []struct {
		template, reply, wantCity string
	}{
		{qwen3Template, "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>", "Paris"},
		{qwen35Template, "Checking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>", "42"},
	} {
		t.Run(c.template, func(t *testing.T) {
			rec := &replyRecorder{reply: c.reply}
			ts, _, _ := newServer(t, enginetest.Options{Reply: rec.Reply, ChatTemplate: qwenTemplate(t, c.template), ContextLength: 4096}, Options{})
			u := ts.URL + "/v1/chat/completions"
			body := func() map[string]any {
				return chatBody("Weather in Paris, and the time?", map[string]any{"tools": weatherTools, "temperature": 0, "max_tokens": 400})
			}
			r := decode[ChatResponse](t, post(t, u, "", body()), 200)
			// The template described the tools to the model.
			if p := rec.lastPrompt(); !strings.Contains(p, `"name": "get_weather"`) || !strings.Contains(p, "<tools>") {
				t.Fatalf("prompt without the tools:\n%s", p)
			}
			m := r.Choices[0].Message
			if m.Content != "Checking." || len(m.ToolCalls) != 2 || *r.Choices[0].FinishReason != "tool_calls" {
				t.Fatalf("message %+v, finish %s", m, *r.Choices[0].FinishReason)
			}
			var args struct {
				City string `json:"city"`
				Days int    `json:"days"`
			}
			tc := m.ToolCalls[0]
			if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil || tc.Function.Name != "get_weather" ||
				args.City != c.wantCity || args.Days != 2 || !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" || tc.Index != nil {
				t.Fatalf("call %+v: %v", tc, err)
			}
			if m.ToolCalls[1].Function.Name != "get_time" || m.ToolCalls[1].Function.Arguments != `{"zone":"CET"}` || m.ToolCalls[1].ID == tc.ID {
				t.Fatalf("second call %+v", m.ToolCalls[1])
			}
			content, calls, finish := streamedCalls(t, u, body())
			if content != "Checking." || finish != "tool_calls" || len(calls) != 2 {
				t.Fatalf("streamed %q %+v %s", content, calls, finish)
			}
			for i := range calls {
				if calls[i].Function != m.ToolCalls[i].Function {
					t.Fatalf("streamed call %d %+v, not streamed %+v", i, calls[i], m.ToolCalls[i])
				}
			}

			// The answer goes back in: the assistant's calls and the tool
			// results render in the model's format.
			back := chatBody("Weather in Paris?", map[string]any{"tools": weatherTools, "messages": []map[string]any{
				{"role": "user", "content": "Weather in Paris?"},
				{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": tc.ID, "type": "function",
					"function": map[string]any{"name": "get_weather", "arguments": tc.Function.Arguments}}}},
				{"role": "tool", "tool_call_id": tc.ID, "content": "sunny, 24 C"},
			}})
			rec.set("It is sunny.")
			r = decode[ChatResponse](t, post(t, u, "", back), 200)
			p := rec.lastPrompt()
			if r.Choices[0].Message.Content != "It is sunny." || *r.Choices[0].FinishReason != "stop" ||
				!strings.Contains(p, "<tool_response>\nsunny, 24 C\n</tool_response>") || !strings.Contains(p, "get_weather") {
				t.Fatalf("answer %+v after the prompt\n%s", r.Choices[0].Message, p)
			}

			// tool_choice none: the tools are in the prompt, the answer is text.
			rec.set(c.reply)
			r = decode[ChatResponse](t, post(t, u, "", chatBody("x", map[string]any{"tools": weatherTools, "tool_choice": "none"})), 200)
			if r.Choices[0].Message.Content != c.reply || len(r.Choices[0].Message.ToolCalls) != 0 || *r.Choices[0].FinishReason != "stop" {
				t.Fatalf("tool_choice none: %+v", r.Choices[0])
			}
		})
	}
}

// TestForcedToolCalls: tool_choice naming a function, or "required",
// makes a model that wants to chat call it, with arguments that satisfy its
// schema, in the template's form, streamed and not.
func TestForcedToolCalls(t *testing.T) {
	for _, tmpl := range []string{qwen3Template, qwen35Template} {
		t.Run(tmpl, func(t *testing.T) {
			ts, _, _ := newServer(t, enginetest.Options{Reply: func(string) string { return "I would rather chat about 7 things." },
				ChatTemplate: qwenTemplate(t, tmpl), ContextLength: 4096}, Options{})
			u := ts.URL + "/v1/chat/completions"
			named := map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}
			for _, choice := range []any{named, "required"} {
				for _, temp := range []float64{0, 1} {
					body := func() map[string]any {
						return chatBody("Hi", map[string]any{"tools": weatherTools, "tool_choice": choice, "parallel_tool_calls": false,
							"temperature": temp, "seed": 3, "max_tokens": 300})
					}
					r := decode[ChatResponse](t, post(t, u, "", body()), 200)
					m := r.Choices[0].Message
					if len(m.ToolCalls) != 1 || m.Content != "" || *r.Choices[0].FinishReason != "tool_calls" {
						t.Fatalf("%v: %+v %s", choice, m, *r.Choices[0].FinishReason)
					}
					checkWeatherCall(t, m.ToolCalls[0].Function, choice == "required")
					_, calls, finish := streamedCalls(t, u, body())
					if len(calls) != 1 || finish != "tool_calls" {
						t.Fatalf("streamed %+v %s", calls, finish)
					}
					checkWeatherCall(t, calls[0].Function, choice == "required")
				}
			}
		})
	}
}

// TestForcedCallClosesReasoning: Qwen3.5's template leaves the model in a
// reasoning block ("<think>\n" ends the prompt); a forced call may close it
// at once, and the closing tag is not content.
func TestForcedCallClosesReasoning(t *testing.T) {
	reply := "</think>\n\n<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>"
	rec := &replyRecorder{reply: reply}
	ts, _, _ := newServer(t, enginetest.Options{Reply: rec.Reply, ChatTemplate: qwenTemplate(t, qwen35Template), ContextLength: 4096}, Options{})
	u := ts.URL + "/v1/chat/completions"
	body := chatBody("time?", map[string]any{"tools": weatherTools, "tool_choice": "required", "temperature": 0})
	r := decode[ChatResponse](t, post(t, u, "", body), 200)
	if !strings.HasSuffix(rec.lastPrompt(), "<think>\n") {
		t.Fatalf("the prompt does not open a reasoning block:\n%s", rec.lastPrompt())
	}
	m := r.Choices[0].Message
	if m.Content != "" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"zone":"CET"}` {
		t.Fatalf("message %+v", m)
	}
	content, calls, _ := streamedCalls(t, u, body)
	if content != "" || len(calls) != 1 || calls[0].Function != m.ToolCalls[0].Function {
		t.Fatalf("streamed %q %+v", content, calls)
	}
}

// checkWeatherCall checks a call against weatherTools' schemas.
func checkWeatherCall(t *testing.T, f ToolFunctionOut, anyTool bool) {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(f.Arguments))
	d.DisallowUnknownFields()
	switch {
	case f.Name == "get_time":
		var a struct{ Zone *string }
		if err := d.Decode(&a); err != nil || a.Zone == nil || (*a.Zone != "UTC" && *a.Zone != "CET") {
			t.Fatalf("get_time arguments %q: %v", f.Arguments, err)
		}
	case f.Name == "get_weather" && anyTool:
		var a struct {
			City *string
			Days *int
		}
		if err := d.Decode(&a); err != nil || a.City == nil || a.Days == nil || *a.Days < 1 || *a.Days > 7 {
			t.Fatalf("get_weather arguments %q: %v", f.Arguments, err)
		}
	default:
		t.Fatalf("call of %q", f.Name)
	}
}

func TestToolErrors(t *testing.T) {
	ts, f, _ := newServer(t, enginetest.Options{ChatTemplate: qwenTemplate(t, qwen3Template), ContextLength: 4096}, Options{})
	u := ts.URL + "/v1/chat/completions"
	badTool := func(fn map[string]any) []map[string]any {
		return []map[string]any{{"type": "function", "function": fn}}
	}
	for _, c := range []struct {
		extra map[string]any
		param string
	}{
		{map[string]any{"tools": weatherTools, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "launch"}}}, "tool_choice.function.name"},
		{map[string]any{"tools": weatherTools, "tool_choice": "sometimes"}, "tool_choice"},
		{map[string]any{"tool_choice": "required"}, "tool_choice"},
		{map[string]any{"tools": badTool(map[string]any{"name": "has space"})}, "tools[0].function.name"},
		{map[string]any{"tools": []map[string]any{{"type": "retrieval"}}}, "tools[0].type"},
		{map[string]any{"tools": badTool(map[string]any{"name": "f", "parameters": "x"})}, "tools[0].function.parameters"},
		{map[string]any{"tools": append(badTool(map[string]any{"name": "f"}), badTool(map[string]any{"name": "f"})...)}, "tools[1].function.name"},
		{map[string]any{"tools": badTool(map[string]any{"name": "f", "parameters": map[string]any{"type": "object", "not": map[string]any{}}}),
			"tool_choice": "required"}, "tools[0].function.parameters"},
		{map[string]any{"tools": weatherTools, "grammar": `root ::= "x"`}, "grammar"},
		{map[string]any{"tools": weatherTools, "response_format": map[string]any{"type": "json_object"}}, "response_format"},
		{map[string]any{"chat_template_kwargs": map[string]any{"tools": []any{}}}, "chat_template_kwargs"},
	} {
		resp := post(t, u, "", chatBody("x", c.extra))
		e := decode[errorBody](t, resp, 400)
		if e.Error["param"] != c.param {
			t.Fatalf("%v: %v, want param %s", c.extra, e.Error, c.param)
		}
	}
	if f.Calls() != 0 {
		t.Fatalf("%d bad requests reached the engine", f.Calls())
	}
	// An unsupported keyword in a tool the answer is not forced to call is
	// only the model's to read.
	decode[ChatResponse](t, post(t, u, "", chatBody("x", map[string]any{"tools": badTool(map[string]any{"name": "f",
		"parameters": map[string]any{"type": "object", "not": map[string]any{}}})})), 200)
	// A grammar with tool_choice none is fine.
	decode[ChatResponse](t, post(t, u, "", chatBody("x", map[string]any{"tools": weatherTools, "tool_choice": "none", "grammar": `root ::= "x"`})), 200)
}

// TestToolGrammarAcceptsTemplateCalls: the grammar of a forced call accepts
// the calls exactly as the model's own template writes them in past turns,
// which is the form the model was trained to produce.
func TestToolGrammarAcceptsTemplateCalls(t *testing.T) {
	toolsJSON, _ := json.Marshal(weatherTools)
	var raw []json.RawMessage
	json.Unmarshal(toolsJSON, &raw)
	tools, apiErr := parseTools(raw)
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	for _, c := range []struct {
		template string
		form     callForm
	}{{qwen3Template, formJSON}, {qwen35Template, formXML}} {
		f := enginetest.NewFake(enginetest.Options{ChatTemplate: qwenTemplate(t, c.template), ContextLength: 4096})
		form, err := detectCallForm(t.Context(), f)
		if err != nil || form != c.form {
			t.Fatalf("%s: form %v (%v), want %v", c.template, form, err, c.form)
		}
		calls := []engine.ToolCall{
			{ID: "a", Type: "function", Function: engine.ToolCallFunction{Name: "get_weather", Arguments: `{"city": "Rome <b>", "days": 3}`}},
			{ID: "b", Type: "function", Function: engine.ToolCallFunction{Name: "get_time", Arguments: `{"zone": "UTC"}`}},
		}
		prompt, err := f.ApplyChatTemplate(t.Context(), []engine.Message{{Role: "user", Content: "q"}, {Role: "assistant", ToolCalls: calls}},
			engine.TemplateOptions{Tools: raw})
		if err != nil {
			t.Fatal(err)
		}
		turn := prompt[strings.LastIndex(prompt, "<|im_start|>assistant"):]
		i, j := strings.Index(turn, tagOpen), strings.LastIndex(turn, tagClose)
		written := turn[i : j+len(tagClose)]
		for _, cc := range []struct {
			choice   toolChoice
			parallel bool
			text     string
			ok       bool
		}{
			{toolChoice{mode: "required"}, true, written, true},
			{toolChoice{mode: "required"}, false, written, false},
			{toolChoice{mode: "required"}, false, written[:strings.Index(written, tagClose)+len(tagClose)], true},
			{toolChoice{mode: "function", name: "get_weather"}, true, written[:strings.Index(written, tagClose)+len(tagClose)], true},
			{toolChoice{mode: "function", name: "get_time"}, true, written[:strings.Index(written, tagClose)+len(tagClose)], false},
		} {
			src, apiErr := toolGrammar(tools, cc.choice, cc.parallel, form)
			if apiErr != nil {
				t.Fatal(apiErr)
			}
			g, err := grammar.Parse(src)
			if err != nil {
				t.Fatalf("%s\n%v", src, err)
			}
			m, err := g.NewMatcher(f.Vocabulary())
			if err != nil {
				t.Fatal(err)
			}
			ok := true
			for k := range len(cc.text) {
				if err := m.Accept(int32(cc.text[k])); err != nil {
					t.Logf("rejected at %d: %q: %v", k, cc.text[:k+1], err)
					ok = false
					break
				}
			}
			ok = ok && m.Allows(enginetest.TokenIMEnd)
			if ok != cc.ok {
				t.Fatalf("%s %+v parallel %v: accepted %v, want %v\n%s\ngrammar:\n%s", c.template, cc.choice, cc.parallel, ok, cc.ok, cc.text, src)
			}
		}
	}
}
