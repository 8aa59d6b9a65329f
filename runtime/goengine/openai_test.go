package goengine

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/gateway"
)

// TestOpenAIClientContract is issue 18's acceptance check with the official
// OpenAI client (npm openai, pinned in testdata/js/oracle) against the API
// over a random tiny model, directly and through the gateway: structured
// output parses every time and satisfies the schema (100 random prompts),
// logprobs with top_logprobs 5 agree with the engine's own logits (its full
// distribution, from the eval machinery's Logits) to 1e-4 in probability,
// streamed entries equal the answer's entries not streamed,
// and a forced tool call's arguments satisfy the tool's schema, streamed
// and not.
func TestOpenAIClientContract(t *testing.T) {
	dir := oracle.RequireModule(t, "PHONELLM_OPENAI_DIR", "openai/index.mjs")
	tmpl, err := os.ReadFile("../../internal/jinja/testdata/templates/Qwen-Qwen3-0.6B.jinja")
	if err != nil {
		t.Fatal(err)
	}
	e := load(t, tinySpec{arch: "qwen3", seed: 71, template: string(tmpl)}, Options{ID: "tiny", Parallel: 2, ContextLength: 2048})
	s := api.New(api.Options{})
	s.SetEngine(e)
	direct := httptest.NewServer(s.Handler())
	defer direct.Close()
	g, err := gateway.New(gateway.Options{HealthInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetReplicas([]gateway.Replica{{URL: direct.URL}}); err != nil {
		t.Fatal(err)
	}
	through := httptest.NewServer(g)
	defer through.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if r := g.Replicas(); len(r) == 1 && r[0].Live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica never became live behind the gateway")
		}
	}
	ids := pieceIDs(e.Vocabulary())
	for _, base := range []string{direct.URL, through.URL} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard only
		cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "openai_contract.mjs"), dir, base+"/v1", "100")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: client: %v\n%s", base, err, stderr.String())
		}
		var got struct {
			Objects  []json.RawMessage
			Failures []any
			Logprobs struct {
				Messages []engine.Message
				Content  []api.TokenLogprobOut
				Text     string
			}
			StreamedLogprobs struct {
				Content []api.TokenLogprobOut
				Text    string
			}
			Tool struct {
				Name, Arguments, ID, Finish string
				Content                     *string
			}
			StreamedTool struct {
				Calls  []struct{ Name, Arguments, ID string }
				Finish string
			}
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %s: %v", base, out, err)
		}
		if len(got.Failures) > 0 || len(got.Objects) != 100 {
			t.Fatalf("%s: %d objects parsed, failures %v", base, len(got.Objects), got.Failures)
		}
		for i, o := range got.Objects {
			if err := checkRiskObject(o); err != "" {
				t.Fatalf("%s: object %d %s: %s", base, i, o, err)
			}
		}
		t.Logf("%s: first objects %s %s; tool call %s(%s)", base, got.Objects[0], got.Objects[1], got.Tool.Name, got.Tool.Arguments)
		checkLogprobs(t, e, ids, got.Logprobs.Messages, got.Logprobs.Content, got.Logprobs.Text)
		if sl := got.StreamedLogprobs; sl.Text != got.Logprobs.Text || !sameLogprobs(sl.Content, got.Logprobs.Content) {
			t.Fatalf("%s: streamed logprobs %q %+v, not streamed %q %+v", base, sl.Text, sl.Content, got.Logprobs.Text, got.Logprobs.Content)
		}
		if got.Tool.Name != "report_risk" || got.Tool.Finish != "tool_calls" || got.Tool.Content != nil || !strings.HasPrefix(got.Tool.ID, "call_") {
			t.Fatalf("%s: tool call %+v", base, got.Tool)
		}
		if err := checkReport(got.Tool.Arguments); err != "" {
			t.Fatalf("%s: tool arguments %s: %s", base, got.Tool.Arguments, err)
		}
		sc := got.StreamedTool
		if len(sc.Calls) != 1 || sc.Calls[0].Name != "report_risk" || sc.Finish != "tool_calls" || sc.Calls[0].Arguments != got.Tool.Arguments {
			t.Fatalf("%s: streamed %+v, not streamed %+v", base, sc, got.Tool)
		}
	}
}

// sameLogprobs compares two answers' entries: the same tokens and
// alternatives, probabilities within 1e-4 (the second request reuses the
// first one's cached prompt, whose last position may then be computed in a
// different batch, which moves the first step's logits in the last bits).
func sameLogprobs(a, b []api.TokenLogprobOut) bool {
	near := func(x, y float64) bool { return math.Abs(math.Exp(x)-math.Exp(y)) < 1e-4 }
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Token != y.Token || !reflect.DeepEqual(x.Bytes, y.Bytes) || !near(x.Logprob, y.Logprob) || len(x.TopLogprobs) != len(y.TopLogprobs) {
			return false
		}
		for j := range x.TopLogprobs {
			p, q := x.TopLogprobs[j], y.TopLogprobs[j]
			if p.Token != q.Token || !reflect.DeepEqual(p.Bytes, q.Bytes) || !near(p.Logprob, q.Logprob) {
				return false
			}
		}
	}
	return true
}

// checkRiskObject checks an object against the script's schema,
// independently of the grammar that produced it.
func checkRiskObject(raw json.RawMessage) string {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil {
		return err.Error()
	}
	if len(v) != 4 {
		return "want exactly the four properties"
	}
	var level int
	var reason string
	var flagged bool
	var signals []string
	switch {
	case json.Unmarshal(v["risk_level"], &level) != nil || level < 1 || level > 5:
		return "risk_level"
	case json.Unmarshal(v["reason"], &reason) != nil || len([]rune(reason)) > 16:
		return "reason"
	case json.Unmarshal(v["flagged"], &flagged) != nil:
		return "flagged"
	case json.Unmarshal(v["signals"], &signals) != nil || signals == nil || len(signals) > 3:
		return "signals"
	}
	for _, s := range signals {
		if !slices.Contains([]string{"night", "amount", "device", "country"}, s) {
			return "signal " + s
		}
	}
	return ""
}

func checkReport(args string) string {
	var v map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return err.Error()
	}
	var level int
	var channel, note string
	switch {
	case len(v) != 3:
		return "want exactly the three parameters"
	case json.Unmarshal(v["risk_level"], &level) != nil || level < 1 || level > 5:
		return "risk_level"
	case json.Unmarshal(v["channel"], &channel) != nil || !slices.Contains([]string{"card", "wire", "wallet"}, channel):
		return "channel"
	case json.Unmarshal(v["note"], &note) != nil || len([]rune(note)) > 10:
		return "note"
	}
	return ""
}

// pieceIDs maps each non-empty piece to the tokens that spell it.
func pieceIDs(v *engine.Vocabulary) map[string][]int32 {
	out := map[string][]int32{}
	for i := range int32(v.Size()) {
		if p := v.Piece(i); p != "" {
			out[p] = append(out[p], i)
		}
	}
	return out
}

// checkLogprobs compares an answer's logprobs with the softmax of the
// engine's logits for the same context.
func checkLogprobs(t *testing.T, e *Engine, ids map[string][]int32, msgs []engine.Message, content []api.TokenLogprobOut, text string) {
	t.Helper()
	prompt, err := e.ApplyChatTemplate(context.Background(), msgs, engine.TemplateOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	toks, err := e.Tokenize(context.Background(), prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(content) != 8 {
		t.Fatalf("%d logprob entries for 8 tokens (%q)", len(content), text)
	}
	idOf := func(b []int) []int32 {
		p := make([]byte, len(b))
		for i, x := range b {
			p[i] = byte(x)
		}
		return ids[string(p)]
	}
	var gen []int32
	for i, c := range content {
		cand := idOf(c.Bytes)
		if len(cand) != 1 || len(c.TopLogprobs) != 5 {
			t.Fatalf("entry %d %+v: %d tokens spell it", i, c, len(cand))
		}
		gen = append(gen, cand[0])
	}
	all := append(slices.Clone(toks), gen...)
	checked := 0
	err = e.Logits(context.Background(), all[:len(all)-1], func(pos int, logits []float32) error {
		step := pos - (len(toks) - 1)
		if step < 0 {
			return nil
		}
		maxl := math.Inf(-1)
		for _, v := range logits {
			maxl = math.Max(maxl, float64(v))
		}
		var sum float64
		for _, v := range logits {
			sum += math.Exp(float64(v) - maxl)
		}
		p := func(id int32) float64 { return math.Exp(float64(logits[id])-maxl) / sum }
		check := func(b []int, lp float64) {
			cand := idOf(b)
			if len(cand) == 0 {
				return // a control token: no piece to name it by
			}
			best := math.Inf(1)
			for _, id := range cand {
				best = math.Min(best, math.Abs(math.Exp(lp)-p(id)))
			}
			if best >= 1e-4 {
				t.Fatalf("step %d token %v: the API says p=%v, the logits %v", step, b, math.Exp(lp), p(cand[0]))
			}
			checked++
		}
		check(content[step].Bytes, content[step].Logprob)
		for _, a := range content[step].TopLogprobs {
			check(a.Bytes, a.Logprob)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 8*5 {
		t.Fatalf("only %d probabilities checked", checked)
	}
}
