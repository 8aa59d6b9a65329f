package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/runtime/enginetest"
)

var riskLevels = []string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"}

// streamText posts a streaming request and returns the concatenated
// content (chat) or text (completions) and the finish reason.
func streamText(t *testing.T, url string, body map[string]any) (string, string) {
	t.Helper()
	body["stream"] = true
	resp := post(t, url, "", body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var text strings.Builder
	finish := ""
	for _, ev := range readSSE(t, resp.Body) {
		if ev == "[DONE]" {
			break
		}
		var c struct {
			Error   any `json:"error"`
			Choices []struct {
				Text  string `json:"text"`
				Delta *struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Error != nil {
			t.Fatalf("event %s: %v", ev, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
			if ch.Delta != nil {
				text.WriteString(ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return text.String(), finish
}

// TestConstrainedOutput: each way of constraining the answer holds a model
// that wants to say something else to the allowed output, streamed and
// not, on both endpoints.
func TestConstrainedOutput(t *testing.T) {
	ts, _, _ := newServer(t, enginetest.Options{Reply: func(string) string { return "I think the risk is moderate." }}, Options{})
	chatURL, complURL := ts.URL+"/v1/chat/completions", ts.URL+"/v1/completions"
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"risk_level": map[string]any{"type": "integer", "minimum": 1, "maximum": 5},
		"reason":     map[string]any{"type": "string", "maxLength": 12},
		"flags":      map[string]any{"type": "array", "items": map[string]any{"enum": []string{"night", "amount"}}, "maxItems": 2},
	}, "required": []string{"risk_level", "reason", "flags"}}
	checkSchema := func(text string) {
		t.Helper()
		var v struct {
			Risk   *int     `json:"risk_level"`
			Reason *string  `json:"reason"`
			Flags  []string `json:"flags"`
		}
		d := json.NewDecoder(strings.NewReader(text))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil || v.Risk == nil || *v.Risk < 1 || *v.Risk > 5 || v.Reason == nil ||
			len([]rune(*v.Reason)) > 12 || v.Flags == nil || len(v.Flags) > 2 {
			t.Fatalf("answer %q does not satisfy the schema: %v", text, err)
		}
		for _, f := range v.Flags {
			if f != "night" && f != "amount" {
				t.Fatalf("answer %q: flag %q", text, f)
			}
		}
	}
	for _, c := range []struct {
		name  string
		extra map[string]any
		check func(string)
	}{
		{"choices", map[string]any{"choices": riskLevels}, func(s string) {
			if !slices.Contains(riskLevels, s) {
				t.Fatalf("choices answer %q", s)
			}
		}},
		{"grammar", map[string]any{"grammar": `root ::= "RISK_LEVEL: " [1-5]`}, func(s string) {
			if !slices.Contains(riskLevels, s) {
				t.Fatalf("grammar answer %q", s)
			}
		}},
		{"json_schema", map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "risk", "strict": true, "schema": schema}}}, checkSchema},
		{"json_object with a schema", map[string]any{"response_format": map[string]any{"type": "json_object", "schema": schema}}, checkSchema},
		{"llama-server json_schema", map[string]any{"json_schema": schema}, checkSchema},
		{"json_object", map[string]any{"response_format": map[string]any{"type": "json_object"}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, temp := range []float64{0, 1.5} {
				extra := map[string]any{"temperature": temp, "seed": 7, "max_tokens": 200}
				for k, v := range c.extra {
					extra[k] = v
				}
				r := decode[ChatResponse](t, post(t, chatURL, "", chatBody("rate it", extra)), 200)
				if c.name == "json_object" {
					// The fake rambles in an unbounded string until max_tokens:
					// what it wrote is the start of an object.
					if got := r.Choices[0].Message.Content; !strings.HasPrefix(got, "{") || *r.Choices[0].FinishReason != "length" {
						t.Fatalf("json_object answer %q (%s)", got, *r.Choices[0].FinishReason)
					}
					return
				}
				c.check(r.Choices[0].Message.Content)
				if *r.Choices[0].FinishReason != "stop" {
					t.Fatalf("finish %q", *r.Choices[0].FinishReason)
				}
				text, finish := streamText(t, chatURL, chatBody("rate it", extra))
				c.check(text)
				if temp == 0 && (text != r.Choices[0].Message.Content || finish != "stop") {
					t.Fatalf("streamed %q (%s), not streamed %q", text, finish, r.Choices[0].Message.Content)
				}
				body := map[string]any{"model": "fake", "prompt": "Risk: "}
				for k, v := range extra {
					body[k] = v
				}
				cr := decode[CompletionResponse](t, post(t, complURL, "", body), 200)
				c.check(cr.Choices[0].Text)
				text, _ = streamText(t, complURL, body)
				c.check(text)
			}
		})
	}
}

// TestConstraintErrors: bad schemas, grammars and choices are 400s naming
// the field, before any slot is taken; the server goes on serving.
func TestConstraintErrors(t *testing.T) {
	ts, f, _ := newServer(t, enginetest.Options{}, Options{})
	u := ts.URL + "/v1/chat/completions"
	check := func(extra map[string]any, param, code, inMessage string) {
		t.Helper()
		resp := post(t, u, "", chatBody("x", extra))
		if resp.StatusCode != 400 {
			t.Fatalf("%v: status %d", extra, resp.StatusCode)
		}
		e := decode[errorBody](t, resp, 400)
		if e.Error["param"] != param || (code != "" && e.Error["code"] != code) || !strings.Contains(e.Error["message"].(string), inMessage) {
			t.Fatalf("error %v, want param %q code %q mentioning %q", e.Error, param, code, inMessage)
		}
	}
	rf := func(schema any) map[string]any {
		return map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": schema}}}
	}
	check(rf(map[string]any{"type": "object", "not": map[string]any{}}), "response_format.json_schema.schema", "invalid_json_schema", `"not"`)
	check(rf(map[string]any{"type": "frog"}), "response_format.json_schema.schema", "invalid_json_schema", "frog")
	check(rf(map[string]any{"$ref": "#/$defs/missing"}), "response_format.json_schema.schema", "invalid_json_schema", "missing")
	check(rf(map[string]any{"type": "string", "pattern": "(unclosed"}), "response_format.json_schema.schema", "invalid_json_schema", "pattern")
	check(map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": "nope"}}, "response_format.json_schema", "", "schema")
	check(map[string]any{"response_format": map[string]any{"type": "xml"}}, "response_format.type", "", "xml")
	check(map[string]any{"json_schema": map[string]any{"type": "object", "uniqueItems": true}}, "json_schema", "invalid_json_schema", "uniqueItems")
	check(map[string]any{"grammar": `root ::= "a" (`}, "grammar", "invalid_grammar", "1:")
	check(map[string]any{"grammar": `root ::= undefined-rule`}, "grammar", "invalid_grammar", "undefined-rule")
	check(map[string]any{"grammar": `root ::= root "a"`}, "grammar", "invalid_grammar", "recurs")
	check(map[string]any{"grammar": `root ::= <|no-such-token|>`}, "grammar", "invalid_grammar", "no-such-token")
	check(map[string]any{"choices": []string{}}, "choices", "", "at least one")
	check(map[string]any{"choices": []string{"a\x00b"}}, "choices", "", "NUL")
	check(map[string]any{"choices": []string{"a"}, "grammar": `root ::= "a"`}, "choices", "", "both")
	check(map[string]any{"choices": []string{"a"}, "response_format": map[string]any{"type": "json_object"}}, "choices", "", "both")
	if f.Calls() != 0 {
		t.Fatalf("%d requests reached the engine", f.Calls())
	}
	decode[ChatResponse](t, post(t, u, "", chatBody("x", map[string]any{"choices": []string{"fine"}})), 200)
}

// TestConstraintFailsWhileGenerating: a grammar that leads the model where
// no token can go (here a token reference to an end-of-generation token
// that cannot end the text) stops that request with a 400 naming the
// field, or an error event when streaming, and frees its slot.
func TestConstraintFailsWhileGenerating(t *testing.T) {
	ts, _, s := newServer(t, enginetest.Options{Reply: func(string) string { return "abc" }}, Options{Parallel: 1})
	u := ts.URL + "/v1/chat/completions"
	bad := map[string]any{"grammar": `root ::= "a" <|im_end|> "b"`}
	e := decode[errorBody](t, post(t, u, "", chatBody("x", bad)), 400)
	if e.Error["param"] != "grammar" || !strings.Contains(e.Error["message"].(string), "allows no token") {
		t.Fatalf("error %v", e.Error)
	}
	stream := chatBody("x", bad)
	stream["stream"] = true
	resp := post(t, u, "", stream)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	if len(events) < 2 || !strings.Contains(events[len(events)-2], `"param":"grammar"`) || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream %q", events)
	}
	s.mu.Lock()
	busy := s.busy
	s.mu.Unlock()
	if busy != 0 {
		t.Fatalf("%d slots still busy", busy)
	}
	if r := decode[ChatResponse](t, post(t, u, "", chatBody("x", map[string]any{"grammar": `root ::= "a"`})), 200); r.Choices[0].Message.Content != "a" {
		t.Fatalf("next request: %+v", r.Choices[0])
	}
}
