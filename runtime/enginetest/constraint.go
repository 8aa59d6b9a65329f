package enginetest

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// riskLevels are the answers of the reviewer's contract (issue 18).
var riskLevels = []string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"}

// runConstraint: greedy and seeded sampling under a choices constraint
// produce only allowed answers and stop as soon as one is complete; a JSON
// schema's output parses; a constraint the vocabulary cannot follow fails
// the request with an input error.
func runConstraint(t *testing.T, e engine.Engine, prompt string) {
	choices, err := grammar.Choices(riskLevels)
	if err != nil {
		t.Fatal(err)
	}
	params := []engine.SamplingParams{engine.Greedy(), engine.DefaultSampling()}
	for seed := range uint64(6) {
		p := engine.SamplingParams{Temperature: 1.5, Seed: &seed}
		params = append(params, p)
	}
	for _, p := range params {
		var streamed strings.Builder
		r, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, Sampling: p, MaxTokens: 64, Constraint: choices},
			func(tok engine.Token) error { streamed.WriteString(tok.Text); return nil })
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if !slices.Contains(riskLevels, r.Text) || r.FinishReason != engine.FinishStop || streamed.String() != r.Text {
			t.Fatalf("sampling %+v: %q (%s, streamed %q), want one of %q", p, r.Text, r.FinishReason, streamed.String(), riskLevels)
		}
	}

	schema := `{"type":"object","properties":{"risk_level":{"type":"integer","minimum":1,"maximum":5},"ok":{"type":"boolean"}},"required":["risk_level","ok"]}`
	g, err := grammar.FromJSONSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(3) {
		p := engine.SamplingParams{Temperature: 1, Seed: &seed}
		r, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, Sampling: p, MaxTokens: 48, Constraint: g}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.FinishReason != engine.FinishStop {
			continue // the model may ramble in whitespace-free strings; cut off is fine
		}
		var v struct {
			Risk *int  `json:"risk_level"`
			OK   *bool `json:"ok"`
		}
		if err := json.Unmarshal([]byte(r.Text), &v); err != nil || v.Risk == nil || *v.Risk < 1 || *v.Risk > 5 || v.OK == nil {
			t.Fatalf("schema output %q: %v", r.Text, err)
		}
	}

	bad, err := grammar.Parse("root ::= <[999999999]>")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Generate(context.Background(), engine.Request{Prompt: prompt, Constraint: bad}, nil)
	var ie interface{ InputError() bool }
	if err == nil || !errors.As(err, &ie) || !ie.InputError() {
		t.Fatalf("token outside the vocabulary: %v, want an input error", err)
	}
}

// runRefusesConstraint: an engine without constrained decoding or logprob
// records refuses requests that ask for them instead of ignoring the ask.
func runRefusesConstraint(t *testing.T, e engine.Engine, prompt string) {
	choices, err := grammar.Choices(riskLevels)
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]engine.Request{
		"constraint": {Prompt: prompt, MaxTokens: 8, Constraint: choices},
		"logprobs":   {Prompt: prompt, MaxTokens: 8, Logprobs: &engine.LogprobOptions{Top: 3}},
	} {
		if r, err := e.Generate(context.Background(), req, nil); err == nil {
			t.Fatalf("%s: generated %q instead of refusing", name, r.Text)
		}
	}
}

// runLogprobs: every generated token carries its record, consistent with
// the response and with itself.
func runLogprobs(t *testing.T, e engine.Engine, prompt string) {
	var streamed []*engine.StepLogprobs
	r, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 8, Logprobs: &engine.LogprobOptions{Top: 3}},
		func(tok engine.Token) error {
			if tok.ID >= 0 {
				streamed = append(streamed, tok.Logprobs)
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Logprobs) != len(r.Tokens) || len(streamed) != len(r.Tokens) {
		t.Fatalf("%d tokens, %d records, %d streamed", len(r.Tokens), len(r.Logprobs), len(streamed))
	}
	var pieces strings.Builder
	for _, lp := range r.Logprobs {
		pieces.WriteString(lp.Token.Piece)
	}
	if pieces.String() != r.Text {
		t.Fatalf("the records' pieces spell %q, the text is %q", pieces.String(), r.Text)
	}
	for i, lp := range r.Logprobs {
		if lp.Token.ID != r.Tokens[i] || streamed[i] == nil || streamed[i].Token != lp.Token || len(lp.Top) != 3 {
			t.Fatalf("record %d: %+v for token %d", i, lp, r.Tokens[i])
		}
		var sum float64
		for j, x := range lp.Top {
			if x.Logprob > 0 || j > 0 && x.Logprob > lp.Top[j-1].Logprob {
				t.Fatalf("record %d: top %+v", i, lp.Top)
			}
			sum += math.Exp(x.Logprob)
		}
		if sum > 1+1e-6 || lp.Token.Logprob > 0 || lp.Token.Logprob < lp.Top[2].Logprob && slices.ContainsFunc(lp.Top, func(x engine.TokenLogprob) bool { return x.ID == lp.Token.ID }) {
			t.Fatalf("record %d: %+v", i, lp)
		}
	}
	// Greedy picks the top token.
	r, err = e.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 4, Logprobs: &engine.LogprobOptions{Top: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, lp := range r.Logprobs {
		if lp.Top[0].ID != r.Tokens[i] || lp.Top[0].Logprob != lp.Token.Logprob {
			t.Fatalf("greedy token %d is not its step's most likely: %+v", r.Tokens[i], lp)
		}
	}
}
