package goengine

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/realvocab"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/runtime/api"
)

// TestContractRealVocab: the reviewer's contract over Qwen3's real
// vocabulary and chat template (a tiny random model carrying both,
// converted by phonellm's converter), where <tool_call> is one token of
// its own and most tokens span several grammar symbols: a forced tool call
// (non-streamed, and streamed as deltas that assemble to the same call)
// has arguments that satisfy the tool's schema, choices answer exactly one
// of the strings, and structured output satisfies its schema.
func TestContractRealVocab(t *testing.T) {
	if testing.Short() {
		t.Skip("converts a model with a 151,936-token vocabulary")
	}
	tmpl, err := os.ReadFile("../../internal/jinja/testdata/templates/Qwen-Qwen3-0.6B.jinja")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	if err := realvocab.WriteCheckpoint(realvocab.ModelsDir(t), ckpt); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ckpt, "chat_template.jinja"), tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "qwen3-realvocab.gguf")
	if _, err := convert.Run(t.Context(), convert.Options{Model: ckpt, Out: model, OutType: convert.OutF32}, pipeline.Discard); err != nil {
		t.Fatal(err)
	}
	e, err := Load(t.Context(), Options{Path: model, ID: "tiny", Threads: 1, Parallel: 2, ContextLength: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if toks, err := e.Tokenize(t.Context(), "<tool_call>", false); err != nil || len(toks) != 1 || e.Vocabulary().Piece(toks[0]) != "<tool_call>" {
		t.Fatalf("<tool_call> is not a token of its own here: %v %v", toks, err)
	}
	s := api.New(api.Options{})
	s.SetEngine(e)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	u := ts.URL + "/v1/chat/completions"

	tools := json.RawMessage(`[{"type":"function","function":{"name":"report_risk","description":"Report the risk of a transaction.",
		"parameters":{"type":"object","properties":{"risk_level":{"type":"integer","minimum":1,"maximum":5},
		"channel":{"type":"string","enum":["card","wire","wallet"]},"note":{"type":"string","maxLength":10}},
		"required":["risk_level","channel","note"]}}}]`)
	for seed := range 4 {
		body := map[string]any{"model": "tiny", "messages": []map[string]string{{"role": "user", "content": "Card payment of 900 EUR at 3am. Report the risk."}},
			"tools": tools, "tool_choice": map[string]any{"type": "function", "function": map[string]string{"name": "report_risk"}},
			"temperature": 1, "seed": seed, "max_tokens": 200}
		var r api.ChatResponse
		postJSON(t, u, body, &r)
		c := r.Choices[0]
		if len(c.Message.ToolCalls) != 1 || *c.FinishReason != "tool_calls" || c.Message.Content != "" {
			t.Fatalf("seed %d: %+v finish %s", seed, c.Message, *c.FinishReason)
		}
		call := c.Message.ToolCalls[0].Function
		if call.Name != "report_risk" {
			t.Fatalf("seed %d: call %+v", seed, call)
		}
		if err := checkReport(call.Arguments); err != "" {
			t.Fatalf("seed %d: arguments %s: %s", seed, call.Arguments, err)
		}
		// Streamed: the deltas assemble to the same call.
		body["stream"] = true
		name, args := streamCall(t, u, body)
		if name != call.Name || args != call.Arguments {
			t.Fatalf("seed %d: streamed %s(%s), not streamed %s(%s)", seed, name, args, call.Name, call.Arguments)
		}
		if seed == 0 {
			t.Logf("forced call report_risk(%s)", call.Arguments)
		}
	}

	levels := []string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"}
	schema := json.RawMessage(`{"type":"object","properties":{"risk_level":{"type":"integer","minimum":1,"maximum":5},
		"reason":{"type":"string","maxLength":16},"flagged":{"type":"boolean"},
		"signals":{"type":"array","items":{"type":"string","enum":["night","amount","device","country"]},"maxItems":3}},
		"required":["risk_level","reason","flagged","signals"],"additionalProperties":false}`)
	for seed := range 6 {
		msgs := []map[string]string{{"role": "user", "content": "Rate the fraud risk: wallet transfer at night."}}
		var r api.ChatResponse
		postJSON(t, u, map[string]any{"model": "tiny", "messages": msgs, "choices": levels, "temperature": 1.5, "seed": seed}, &r)
		if got := r.Choices[0].Message.Content; !strings.HasPrefix(got, "RISK_LEVEL: ") || len(got) != len(levels[0]) || got[12] < '1' || got[12] > '5' {
			t.Fatalf("seed %d: choices answer %q", seed, got)
		}
		postJSON(t, u, map[string]any{"model": "tiny", "messages": msgs, "temperature": 1, "seed": seed, "max_tokens": 400,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "risk", "strict": true, "schema": schema}}}, &r)
		if err := checkRiskObject(json.RawMessage(r.Choices[0].Message.Content)); err != "" {
			t.Fatalf("seed %d: structured output %q: %s", seed, r.Choices[0].Message.Content, err)
		}
	}
}

func postJSON(t *testing.T, url string, body, into any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw.Bytes())
	}
	if err := json.Unmarshal(raw.Bytes(), into); err != nil {
		t.Fatalf("%s: %v", raw.Bytes(), err)
	}
}

// streamCall reads a streamed answer of one tool call: its name (first
// delta, with the id) and its arguments (the following deltas).
func streamCall(t *testing.T, url string, body map[string]any) (name, args string) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	id := ""
	for _, line := range strings.Split(raw.String(), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c api.ChatResponse
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if len(c.Choices) == 0 || c.Choices[0].Delta == nil {
			continue
		}
		for _, d := range c.Choices[0].Delta.ToolCalls {
			switch {
			case d.Index == nil || *d.Index != 0:
				t.Fatalf("delta %+v: want one call, index 0", d)
			case d.ID != "":
				if id != "" || d.Function.Name == "" {
					t.Fatalf("a second first delta %+v", d)
				}
				id, name = d.ID, d.Function.Name
			case id == "" || d.Function.Name != "":
				t.Fatalf("delta %+v before or beside the first", d)
			}
			args += d.Function.Arguments
		}
	}
	return name, args
}
