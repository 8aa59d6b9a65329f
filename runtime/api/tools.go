package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// Tools (OpenAI's function calling). The definitions go to the model's
// chat template, which describes them in the model's own words; the
// answer's <tool_call> blocks become tool_calls (toolparse.go). tool_choice
// "none" keeps the definitions in the prompt (as llama-server and vLLM do)
// but reads the answer as text; "auto" lets the model choose; "required"
// and a named function constrain the answer to calls whose arguments
// satisfy the tools' parameter schemas, in the form the model's template
// uses (the JSON form, or Qwen3.5's XML form).

// maxTools bounds the tools of a request (OpenAI's limit).
const maxTools = 128

// toolNameRE is OpenAI's rule for function names.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// tool is a checked function definition.
type tool struct {
	name   string
	params json.RawMessage // the parameters schema; nil when absent
	raw    json.RawMessage // the definition as the client sent it
}

// toolChoice is a request's tool_choice.
type toolChoice struct {
	mode string // "none", "auto", "required" or "function"
	name string // the function, for mode "function"
}

// parseTools checks the tools of a request.
func parseTools(raw []json.RawMessage) ([]tool, *httpx.Error) {
	if len(raw) > maxTools {
		return nil, httpx.BadRequest("tools", "array_above_max_length", "Invalid 'tools': at most %d tools, got %d.", maxTools, len(raw))
	}
	out := make([]tool, 0, len(raw))
	seen := map[string]bool{}
	for i, r := range raw {
		var def struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		param := fmt.Sprintf("tools[%d]", i)
		if err := json.Unmarshal(r, &def); err != nil {
			return nil, httpx.BadRequest(param, "", "Invalid '%s': want {\"type\": \"function\", \"function\": {...}}: %s", param, httpx.CapText(err.Error(), 200))
		}
		if def.Type != "function" || def.Function == nil {
			return nil, httpx.BadRequest(param+".type", "", "Invalid '%s': only {\"type\": \"function\", \"function\": {...}} tools are supported.", param)
		}
		name := def.Function.Name
		if !toolNameRE.MatchString(name) {
			return nil, httpx.BadRequest(param+".function.name", "", "Invalid '%s.function.name': %q must be 1 to 64 letters, digits, '_' or '-'.", param, httpx.CapText(name, 80))
		}
		if seen[name] {
			return nil, httpx.BadRequest(param+".function.name", "", "Invalid '%s.function.name': the function %q is defined twice.", param, name)
		}
		seen[name] = true
		params := bytes.TrimSpace(def.Function.Parameters)
		if bytes.Equal(params, []byte("null")) {
			params = nil
		}
		if len(params) > 0 && params[0] != '{' {
			return nil, httpx.BadRequest(param+".function.parameters", "", "Invalid '%s.function.parameters': must be a JSON Schema object.", param)
		}
		out = append(out, tool{name: name, params: params, raw: r})
	}
	return out, nil
}

// parseToolChoice reads tool_choice: "none", "auto", "required" or
// {"type": "function", "function": {"name": …}}, which must name one of
// tools. Absent, it is "auto" with tools and "none" without.
func parseToolChoice(raw json.RawMessage, tools []tool) (toolChoice, *httpx.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		if len(tools) == 0 {
			return toolChoice{mode: "none"}, nil
		}
		return toolChoice{mode: "auto"}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto":
			if len(tools) == 0 {
				return toolChoice{mode: "none"}, nil
			}
			return toolChoice{mode: s}, nil
		case "required":
			if len(tools) == 0 {
				return toolChoice{}, httpx.BadRequest("tool_choice", "", "Invalid 'tool_choice': \"required\" needs tools.")
			}
			return toolChoice{mode: s}, nil
		}
		return toolChoice{}, httpx.BadRequest("tool_choice", "", "Invalid 'tool_choice': %q; want \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}.", httpx.CapText(s, 80))
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
		return toolChoice{}, httpx.BadRequest("tool_choice", "", "Invalid 'tool_choice': want \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}.")
	}
	for _, t := range tools {
		if t.name == named.Function.Name {
			return toolChoice{mode: "function", name: t.name}, nil
		}
	}
	return toolChoice{}, httpx.BadRequest("tool_choice.function.name", "", "Invalid 'tool_choice': the function %q is not among the request's tools.", httpx.CapText(named.Function.Name, 80))
}

// stringParams lists, per tool, the parameters its schema declares as
// strings (the XML form keeps their values as text).
func stringParams(tools []tool) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, t := range tools {
		var s struct {
			Properties map[string]struct {
				Type json.RawMessage `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(t.params, &s) != nil {
			continue
		}
		for k, p := range s.Properties {
			if string(bytes.TrimSpace(p.Type)) == `"string"` {
				if out[t.name] == nil {
					out[t.name] = map[string]bool{}
				}
				out[t.name][k] = true
			}
		}
	}
	return out
}

// callForm is how a model's template writes tool calls.
type callForm uint8

const (
	formJSON callForm = iota // <tool_call>{"name": …, "arguments": …}</tool_call>
	formXML                  // <tool_call><function=…><parameter=…>…</tool_call>
)

func (f callForm) String() string {
	if f == formXML {
		return "xml"
	}
	return "json"
}

const probeTool = "phonellm_probe_tool"

// detectCallForm renders a conversation with one past tool call through the
// model's template and looks at how it wrote the call. A template that
// renders no call (or refuses the probe) gets the JSON form, the format of
// Qwen2.5/Qwen3 and of llama.cpp's generic handling.
func detectCallForm(ctx context.Context, e engine.Engine) (callForm, error) {
	def := json.RawMessage(`{"type": "function", "function": {"name": "` + probeTool + `", "description": "Probe.", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}`)
	msgs := []engine.Message{
		{Role: "user", Content: "Probe."},
		{Role: "assistant", ToolCalls: []engine.ToolCall{{ID: "call_0", Type: "function", Function: engine.ToolCallFunction{Name: probeTool, Arguments: `{"x": 1}`}}}},
		{Role: "tool", ToolCallID: "call_0", Content: "2"},
	}
	out, err := e.ApplyChatTemplate(ctx, msgs, engine.TemplateOptions{Tools: []json.RawMessage{def}})
	if err != nil {
		if ctx.Err() != nil {
			return formJSON, ctx.Err()
		}
		return formJSON, nil
	}
	if strings.Contains(out, xmlFuncOpen+probeTool+">") {
		return formXML, nil
	}
	return formJSON, nil
}

// toolGrammar is the constraint of a forced call: exactly one call of the
// named function (mode "function"), or one or more calls of any tool
// (mode "required"; one only when parallel calls are off), in form.
func toolGrammar(tools []tool, choice toolChoice, parallel bool, form callForm) (string, *httpx.Error) {
	var sb strings.Builder
	var alts []string
	for i, t := range tools {
		if choice.mode == "function" && t.name != choice.name {
			continue
		}
		param := fmt.Sprintf("tools[%d].function.parameters", i)
		rule := fmt.Sprintf("call%d", i)
		var err error
		if form == formXML {
			err = xmlCallRules(&sb, rule, fmt.Sprintf("p%d-", i), t)
		} else {
			err = jsonCallRules(&sb, rule, fmt.Sprintf("p%d-", i), t)
		}
		if err != nil {
			return "", httpx.BadRequest(param, "invalid_json_schema", "Invalid '%s' (needed to constrain the call): %s", param, httpx.CapText(err.Error(), 400))
		}
		alts = append(alts, rule)
	}
	root := "tool-call"
	if choice.mode == "required" && parallel {
		root = `tool-call ("\n" tool-call)*`
	}
	head := "root ::= " + root + "\n"
	if form == formXML {
		head += `tool-call ::= "<tool_call>\n" (` + strings.Join(alts, " | ") + `) "</tool_call>"` + "\n"
	} else {
		head += `tool-call ::= "<tool_call>\n" (` + strings.Join(alts, " | ") + `) "</tool_call>"` + "\n" +
			`call-ws ::= | " " | "\n"{1,2} [ \t]{0,20}` + "\n"
	}
	return head + sb.String(), nil
}

// paramsSchema is a tool's parameters, or the schema of no parameters.
func paramsSchema(t tool) []byte {
	if len(t.params) == 0 {
		return []byte(`{"type": "object", "properties": {}}`)
	}
	return t.params
}

// jsonCallRules writes rule ::= {"name": "NAME", "arguments": ARGS} with
// ARGS the parameters schema's grammar, its rules under prefix.
func jsonCallRules(sb *strings.Builder, rule, prefix string, t tool) error {
	args, err := grammar.JSONSchemaGBNF(paramsSchema(t))
	if err != nil {
		return err
	}
	if args, err = grammar.Namespace(args, prefix); err != nil {
		return err
	}
	name, _ := json.Marshal(t.name)
	fmt.Fprintf(sb, `%s ::= "{" call-ws "\"name\"" call-ws ":" call-ws %s call-ws "," call-ws "\"arguments\"" call-ws ":" call-ws %sroot "}" call-ws`+"\n",
		rule, grammar.Literal(string(name)), prefix)
	sb.WriteString(args)
	return nil
}

// xmlCallRules writes rule ::= <function=NAME> and its parameters in the
// order of the schema's properties, the required ones always, each
// <parameter=K>\nVALUE\n</parameter>\n: a string parameter's value is text
// without "</parameter>" (or one of its enum/const values), any other the
// grammar of its schema (rules under prefix+K). Keywords that constrain a
// string further (pattern, lengths, format) are not enforced on such text,
// as in llama.cpp.
func xmlCallRules(sb *strings.Builder, rule, prefix string, t tool) error {
	var s struct {
		Properties  json.RawMessage `json:"properties"`
		Required    []string        `json:"required"`
		Defs        json.RawMessage `json:"$defs"`
		Definitions json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal(paramsSchema(t), &s); err != nil {
		return fmt.Errorf("not a JSON Schema object: %v", err)
	}
	props, err := orderedObject(s.Properties)
	if err != nil {
		return fmt.Errorf("/properties: %v", err)
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	var seq []string
	for i, p := range props {
		if !xmlKeyRE.MatchString(p.key) {
			return fmt.Errorf("/properties: the parameter name %q cannot be written in the XML call form", p.key)
		}
		val, err := xmlValueRule(sb, fmt.Sprintf("%sv%d-", prefix, i), p.value, s.Defs, s.Definitions)
		if err != nil {
			return fmt.Errorf("/properties/%s%v", p.key, err)
		}
		item := fmt.Sprintf(`%s "\n</parameter>\n"`, val)
		item = grammar.Literal("<parameter="+p.key+">\n") + " " + item
		if !required[p.key] {
			item = "(" + item + ")?"
		}
		seq = append(seq, item)
	}
	body := strings.Join(seq, " ")
	if len(props) == 0 && len(bytes.TrimSpace(s.Properties)) == 0 {
		// Free-form parameters: any names, text values.
		body = `(` + `"<parameter=" [a-zA-Z0-9_.-]+ ">\n" ` + prefix + `text "\n</parameter>\n")*`
		fmt.Fprintf(sb, "%stext ::= %s\n", prefix, excluding(prefix+"text", xmlParamClose, sb))
	}
	fmt.Fprintf(sb, `%s ::= %s %s "</function>\n"`+"\n", rule, grammar.Literal(xmlFuncOpen+t.name+">\n"), body)
	return nil
}

var xmlKeyRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// xmlValueRule writes the rules of one XML parameter's value and returns
// the rule to use.
func xmlValueRule(sb *strings.Builder, prefix string, schema, defs, definitions json.RawMessage) (string, error) {
	var s struct {
		Type  json.RawMessage   `json:"type"`
		Enum  []json.RawMessage `json:"enum"`
		Const json.RawMessage   `json:"const"`
	}
	_ = json.Unmarshal(schema, &s)
	if string(bytes.TrimSpace(s.Type)) == `"string"` {
		var lits []string
		for _, v := range append(s.Enum, s.Const) {
			var str string
			if len(v) > 0 && json.Unmarshal(v, &str) == nil {
				lits = append(lits, grammar.Literal(str))
			}
		}
		if len(lits) > 0 {
			fmt.Fprintf(sb, "%sroot ::= %s\n", prefix, strings.Join(lits, " | "))
		} else {
			fmt.Fprintf(sb, "%sroot ::= %s\n", prefix, excluding(prefix+"x", xmlParamClose, sb))
		}
		return prefix + "root", nil
	}
	// The value's own schema, with the definitions its $refs may name.
	sub := map[string]json.RawMessage{}
	if err := json.Unmarshal(schema, &sub); err != nil {
		if !bytes.Equal(bytes.TrimSpace(schema), []byte("true")) {
			return "", fmt.Errorf(": not a schema object")
		}
	}
	if len(defs) > 0 {
		if _, ok := sub["$defs"]; !ok {
			sub["$defs"] = defs
		}
	}
	if len(definitions) > 0 {
		if _, ok := sub["definitions"]; !ok {
			sub["definitions"] = definitions
		}
	}
	doc, err := marshalOrdered(schema, sub)
	if err != nil {
		return "", err
	}
	src, err := grammar.JSONSchemaGBNF(doc)
	if err != nil {
		var se *grammar.SchemaError
		if errors.As(err, &se) {
			return "", fmt.Errorf("%s: %s", se.Path, se.Msg)
		}
		return "", err
	}
	if src, err = grammar.Namespace(src, prefix); err != nil {
		return "", err
	}
	sb.WriteString(src)
	return prefix + "root", nil
}

// marshalOrdered writes sub (a schema's keys plus added definitions)
// keeping the original schema's key order, which the grammar converter
// follows for properties.
func marshalOrdered(orig json.RawMessage, sub map[string]json.RawMessage) ([]byte, error) {
	keys, err := orderedObject(orig)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	n := 0
	write := func(k string, v json.RawMessage) {
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(v)
	}
	done := map[string]bool{}
	for _, kv := range keys {
		write(kv.key, kv.value)
		done[kv.key] = true
	}
	extra := make([]string, 0, len(sub))
	for k := range sub {
		if !done[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		write(k, sub[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

type keyValue struct {
	key   string
	value json.RawMessage
}

// orderedObject returns a JSON object's members in order (nil for an
// absent or null value).
func orderedObject(raw json.RawMessage) ([]keyValue, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte("true")) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not an object")
	}
	var out []keyValue
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, keyValue{k, v})
	}
	return out, nil
}

// excluding writes the rules of any text that does not contain s (s's
// first byte must not occur again in s, as for "</parameter>") and returns
// the first rule's name. The rules are states of the matcher for s: state
// k has matched s[:k].
func excluding(name, s string, sb *strings.Builder) string {
	// The rules, one per state; each may end (the text ends there).
	first := s[:1]
	for k := range len(s) {
		var alts []string
		alts = append(alts, `""`)
		// Any character other than s[0] and (for k > 0) s[k] resets.
		set := []string{classEscape(s[0])}
		if k > 0 && s[k] != s[0] {
			set = append(set, classEscape(s[k]))
		}
		alts = append(alts, "[^"+strings.Join(set, "")+"] "+name+"0")
		if k == 0 {
			alts = append(alts, grammar.Literal(first)+" "+name+"1")
		} else {
			alts = append(alts, grammar.Literal(first)+" "+name+"1")
			if k+1 < len(s) {
				alts = append(alts, grammar.Literal(s[k:k+1])+" "+name+strconv.Itoa(k+1))
			}
		}
		fmt.Fprintf(sb, "%s%d ::= %s\n", name, k, strings.Join(alts, " | "))
	}
	return name + "0"
}

func classEscape(b byte) string {
	switch b {
	case '\\', ']', '[', '^', '-', '"':
		return `\` + string(b)
	case '\n':
		return `\n`
	}
	return string(b)
}
