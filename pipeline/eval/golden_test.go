package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/golden"
)

// TestResultGolden pins the JSON shape of a Result (what the workspace state and the model card store):
// a distribution check on fake models and a task check against a baseline, with the run-dependent fields
// (durations, latencies, server addresses) cleared.
func TestResultGolden(t *testing.T) {
	base := map[string]string{}
	for c, l := range labels {
		base[c] = "RISK_LEVEL: " + l
	}
	_, quant := newFake(t, "", "tiny-q4", quantReplies)
	_, ref := newFake(t, "", "tiny-f16", base)
	models := map[string]LogitModel{
		"f16.gguf":    &fakeModel{vocab: 300, ctx: 64, chunk: 8, failAt: -1},
		"q4_k_m.gguf": &fakeModel{vocab: 300, ctx: 64, chunk: 8, noise: 0.3, seed: 5, failAt: -1},
	}
	o := Options{
		Dist: DistOptions{Reference: "f16.gguf", Candidate: "q4_k_m.gguf", Prompts: "testdata/prompts.jsonl", Load: fakeLoader(models)},
		Task: TaskOptions{Dataset: "testdata/task.jsonl", Concurrency: 2, sleep: noSleep,
			Endpoint: Endpoint{BaseURL: quant.URL, Model: "tiny-q4"}, Vs: Endpoint{BaseURL: ref.URL, Model: "tiny-f16"}},
		Thresholds: Thresholds{MaxKLD: 0.05, MinTop1: 0.9, MaxF1Drop: 0.02},
	}
	r, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Seconds, r.Distribution.Seconds = 0, 0
	// math.Exp and math.Log may differ in the last bit between architectures: keep 9 significant digits.
	d := r.Distribution
	for _, f := range []*float64{&d.MeanKLD, &d.MedianKLD, &d.P99KLD, &d.MaxKLD, &d.Top1, &d.RMSDeltaTop, &d.PPLReference, &d.PPLCandidate} {
		*f, _ = strconv.ParseFloat(strconv.FormatFloat(*f, 'g', 9, 64), 64)
	}
	for _, tr := range []*TaskResult{r.Task, r.Vs} {
		tr.Seconds, tr.LatencyP50Ms, tr.LatencyP95Ms = 0, 0, 0
		tr.Endpoint = "http://endpoint"
		tr.Errors = nil
	}
	r.Comparison.LatencyP50Ratio = 0
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	const path = "testdata/result.golden.json"
	if golden.Update() {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Result JSON differs from %s (run with -update after checking):\n%s", path, got)
	}
}
