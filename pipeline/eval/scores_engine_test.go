package eval

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/tinygguf"
	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/goengine"
)

// TestScoresAgainstEngineLogits: the label probabilities eval reads
// through phonellm's API from a real (random tiny) model are the model's:
// with "each", the softmax of the engine's own logits (runtime/goengine's
// Logits, the distribution check's machinery) over the five digits after
// "RISK_LEVEL: ", to 1e-4; with "logprobs", the same distribution
// renormalized over the labels among the 20 alternatives the API returns
// (the others read as 0, as documented), and its most probable label is the
// answer the constrained request gave.
func TestScoresAgainstEngineLogits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tiny model")
	}
	// The default tiny vocabulary spells "RISK_LEVEL: N" one byte per token
	// (its merges are lower case), so every label's forced answer takes the
	// same path up to its digit.
	const tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
		"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := tinygguf.Write(model, tinygguf.Spec{Arch: "qwen3", Seed: 29, Template: tmpl}); err != nil {
		t.Fatal(err)
	}
	e, err := goengine.Load(context.Background(), goengine.Options{Path: model, Threads: 1, ContextLength: 512, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := api.New(api.Options{})
	s.SetEngine(e)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	const n = 10
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, `{"messages": [{"role": "user", "content": "Transaction %d: %d EUR at night. Risk?"}], "label": "%d"}`+"\n", i, 100*i+7, 1+i%5)
	}
	dataset := filepath.Join(t.TempDir(), "task.jsonl")
	if err := os.WriteFile(dataset, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	items, err := ReadItems(dataset)
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{"1", "2", "3", "4", "5"}
	score := func(method string) []Answer {
		o := TaskOptions{Dataset: dataset, Endpoint: Endpoint{BaseURL: ts.URL}, Scores: ScoreOptions{Labels: labels, Method: method}, sleep: noSleep}
		re, _ := o.pattern()
		r, answers, err := scoreItems(context.Background(), o, o.Endpoint, items, re, "", nil)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if r.Scores == nil || r.Scores.Scored != n {
			t.Fatalf("%s: scores %+v", method, r.Scores)
		}
		return answers
	}
	each, lp := score(MethodEach), score(MethodLogprobs)

	present := 0
	for i, it := range items {
		// The engine's distribution at the digit: the prompt as the API renders
		// it, then the answer's shared prefix, one byte per token.
		prompt, err := e.ApplyChatTemplate(context.Background(), it.Messages, engine.TemplateOptions{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		toks, err := e.Tokenize(context.Background(), prompt, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range []byte("RISK_LEVEL: ") {
			toks = append(toks, int32(b))
		}
		want := make([]float64, len(labels))
		err = e.Logits(context.Background(), toks, func(pos int, logits []float32) error {
			if pos != len(toks)-1 {
				return nil
			}
			m := math.Inf(-1)
			for _, l := range labels {
				m = math.Max(m, float64(logits[l[0]]))
			}
			sum := 0.0
			for k, l := range labels {
				want[k] = math.Exp(float64(logits[l[0]]) - m)
				sum += want[k]
			}
			for k := range want {
				want[k] /= sum
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for k := range labels {
			if d := math.Abs(each[i].Probs[k] - want[k]); d >= 1e-4 {
				t.Fatalf("item %d, each: P(%s) = %v, the engine's logits give %v (%v against %v)", i, labels[k], each[i].Probs[k], want[k], each[i].Probs, want)
			}
		}
		// logprobs: the labels it saw, renormalized; 0 for the others.
		seen := 0.0
		for k := range labels {
			if lp[i].Probs[k] > 0 {
				seen += want[k]
			}
		}
		for k := range labels {
			w := 0.0
			if lp[i].Probs[k] > 0 {
				w = want[k] / seen
			}
			if d := math.Abs(lp[i].Probs[k] - w); d >= 1e-4 {
				t.Fatalf("item %d, logprobs: P(%s) = %v, want %v (%v; the engine's %v)", i, labels[k], lp[i].Probs[k], w, lp[i].Probs, want)
			}
		}
		if seen > 1-1e-9 {
			present++
		}
		if got := "RISK_LEVEL: " + labelOf(labels, lp[i].Probs); lp[i].Reply != got {
			t.Fatalf("item %d: answered %q, the most probable label gives %q", i, lp[i].Reply, got)
		}
	}
	t.Logf("%d of %d items had every label among the 20 alternatives", present, n)
}
