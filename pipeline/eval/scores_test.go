package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// entry builds a logprobs entry: token text, its probability, and the
// alternatives (text, probability), as an OpenAI server sends them.
func entry(tok string, p float64, alts ...any) lpEntry {
	e := lpEntry{Token: tok, Logprob: math.Log(p)}
	for i := 0; i < len(alts); i += 2 {
		t, q := alts[i].(string), alts[i+1].(float64)
		e.Top = append(e.Top, struct {
			Token   string  `json:"token"`
			Logprob float64 `json:"logprob"`
			Bytes   []int   `json:"bytes"`
		}{t, math.Log(q), nil})
	}
	return e
}

func TestLabelProbs(t *testing.T) {
	risk := []string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"}
	prefix := []lpEntry{entry("RISK", 0.9), entry("_LEVEL", 0.99), entry(":", 1), entry(" ", 0.8)}
	for _, c := range []struct {
		name    string
		answers []string
		entries []lpEntry
		want    []float64 // nil: not readable
	}{
		// At the digit: 4 (0.5), 5 (0.3), 3 (0.1), then a token outside the labels.
		{"one step", risk, append(prefix, entry("4", 0.5, "4", 0.5, "5", 0.3, "3", 0.1, "x", 0.05)), []float64{0, 0, 0.1 / 0.9, 0.5 / 0.9, 0.3 / 0.9}},
		// The answer after free text (constrain none), with a token spanning "RISK_LEVEL".
		{"after text", risk, []lpEntry{entry("I", 1), entry(" think", 1), entry(": ", 1), entry("RISK_LEVEL", 1), entry(":", 1), entry(" ", 1),
			entry("2", 0.6, "2", 0.6, "1", 0.2, "4", 0.2)}, []float64{0.2, 0.6, 0, 0.2, 0}},
		// Labels parting over two tokens: "1" leads to 10 or 11 (followed), "2" is 2.
		// P(10) = 0.6 × 0.75/1, P(11) = 0.6 × 0.25, P(2) = 0.4.
		{"two steps", []string{"10", "11", "2"}, []lpEntry{entry("1", 0.6, "1", 0.6, "2", 0.4), entry("0", 0.75, "0", 0.75, "1", 0.25)},
			[]float64{0.45, 0.15, 0.4}},
		// A branch not taken that leads to several labels splits evenly:
		// "1" (0.5) could be 10 or 11, "2" taken (0.5).
		{"branch not taken", []string{"10", "11", "2"}, []lpEntry{entry("2", 0.5, "2", 0.5, "1", 0.5)}, []float64{0.25, 0.25, 0.5}},
		// Bytes rather than text when the server sends them.
		{"bytes", []string{"é", "è"}, []lpEntry{{Token: "\uFFFD", Logprob: math.Log(0.5), Bytes: []int{0xc3}}, {Token: "\uFFFD", Logprob: math.Log(0.9), Bytes: []int{0xa9},
			Top: []struct {
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
				Bytes   []int   `json:"bytes"`
			}{{"\uFFFD", math.Log(0.9), []int{0xa9}}, {"\uFFFD", math.Log(0.1), []int{0xa8}}}}}, []float64{0.9, 0.1}},
		// Tokens without text among the alternatives (the end of generation,
		// control tokens) are no label's: <|im_end|> (0.3) and <|im_start|>
		// (0.1) do not split among the labels.
		{"empty alternatives", risk, append(prefix, entry("2", 0.4, "2", 0.4, "", 0.3, "", 0.1, "5", 0.2)), []float64{0, 0.4 / 0.6, 0, 0, 0.2 / 0.6}},
		// The answer never reaches the labels.
		{"no answer", risk, []lpEntry{entry("I", 1), entry(" refuse", 1)}, nil},
		// A token spanning the end of the shared prefix and the label: no step to read.
		{"straddle", risk, append(prefix[:3], entry(" 4", 1)), nil},
	} {
		got, ok := labelProbs(c.answers, c.entries)
		if ok != (c.want != nil) {
			t.Fatalf("%s: ok %v, probs %v", c.name, ok, got)
		}
		for k := range c.want {
			if math.Abs(got[k]-c.want[k]) > 1e-12 {
				t.Fatalf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
}

// writeDataset writes a generated labelled task: n items "case-i" with
// labels 1-5.
func writeDataset(t *testing.T, n int) (string, []string) {
	t.Helper()
	var sb strings.Builder
	labels := make([]string, n)
	for i := range n {
		labels[i] = fmt.Sprint(1 + (i*7)%5)
		fmt.Fprintf(&sb, `{"messages": [{"role": "user", "content": "case-%d"}], "label": %q}`+"\n", i, labels[i])
	}
	path := filepath.Join(t.TempDir(), "task.jsonl")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, labels
}

// servePhonellm runs phonellm's API over the fake engine, whose model
// "wants" to answer RISK_LEVEL: N with N from the prompt: the label, except
// for every fourth item (a wrong answer, so the figures are not trivial).
func servePhonellm(t *testing.T) string {
	t.Helper()
	re := regexp.MustCompile(`case-(\d+)`)
	f := enginetest.NewFake(enginetest.Options{ContextLength: 1024, Reply: func(p string) string {
		m := re.FindAllStringSubmatch(p, -1)
		var i int
		fmt.Sscan(m[len(m)-1][1], &i)
		level := 1 + (i*7)%5
		if i%4 == 3 {
			level = 1 + level%5
		}
		return fmt.Sprintf("RISK_LEVEL: %d", level)
	}})
	s := api.New(api.Options{})
	s.SetEngine(f)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestScoresFromPhonellm: a generated labelled task scored through
// phonellm's API by each method and constraint: every item gets a
// probability vector, the most probable label is the model's answer, and
// the calibration figures follow.
func TestScoresFromPhonellm(t *testing.T) {
	url := servePhonellm(t)
	dataset, _ := writeDataset(t, 24)
	for _, so := range []ScoreOptions{
		{Labels: []string{"1", "2", "3", "4", "5"}},
		{Labels: []string{"1", "2", "3", "4", "5"}, Constrain: ConstrainChoices},
		{Labels: []string{"1", "2", "3", "4", "5"}, Constrain: ConstrainNone},
		{Labels: []string{"1", "2", "3", "4", "5"}, Method: MethodEach, HighRisk: "5", Bins: 5, Cutoff: 0.3},
	} {
		o := TaskOptions{Dataset: dataset, Endpoint: Endpoint{BaseURL: url}, Scores: so, sleep: noSleep,
			Save: filepath.Join(t.TempDir(), "answers.jsonl")}
		r, err := ScoreTask(context.Background(), o, o.Endpoint, nil)
		if err != nil {
			t.Fatalf("%+v: %v", so, err)
		}
		s := r.Scores
		if s == nil || s.Scored != 24 || s.Unscored != 0 {
			t.Fatalf("%+v: scores %+v", so, s)
		}
		// 18 of 24 answers are right (every fourth is off by one).
		if r.Correct != 18 || math.Abs(s.Accuracy-0.75) > 1e-12 || s.AUC == nil || s.Brier <= 0 || s.Brier >= 2 || s.ECE < 0 || s.ECE > 1 {
			t.Fatalf("%+v: result %+v scores %+v", so, r, s)
		}
		want := ScoreOptions{Labels: so.Labels, HighRisk: so.HighRisk}.withDefaults().HighRisk
		if s.HighRisk[0] != want || s.Method != so.withDefaults().Method {
			t.Fatalf("%+v: %+v", so, s)
		}
		// The saved answers come back as the same figures.
		back, err := ScoreTask(context.Background(), TaskOptions{Dataset: dataset, Endpoint: Endpoint{File: o.Save}, Scores: so}, Endpoint{File: o.Save}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if back.Correct != r.Correct || math.Abs(back.Scores.Brier-s.Brier) > 1e-9 || math.Abs(*back.Scores.AUC-*s.AUC) > 1e-9 {
			t.Fatalf("from the file: %+v\nasked: %+v", back.Scores, s)
		}
		t.Logf("%s/%s: %s", s.Method, so.withDefaults().Constrain, s)
	}
}

// TestScoresGate: Run over a scored task and a saved baseline: the figures
// and the comparison are there, a gate on any of them passes or fails (a
// failure is a check failure, exit 4), and a gate on a figure the run lacks
// fails.
func TestScoresGate(t *testing.T) {
	url := servePhonellm(t)
	dataset, _ := writeDataset(t, 20)
	labels := []string{"1", "2", "3", "4", "5"}
	base := filepath.Join(t.TempDir(), "baseline.jsonl")
	task := TaskOptions{Dataset: dataset, Endpoint: Endpoint{BaseURL: url}, Scores: ScoreOptions{Labels: labels}, Save: base, sleep: noSleep}
	if _, err := Run(context.Background(), Options{Task: task}, pipeline.Discard); err != nil {
		t.Fatal(err)
	}
	gate := func(exprs ...string) []Gate {
		var out []Gate
		for _, e := range exprs {
			g, err := ParseGate(e)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, g)
		}
		return out
	}
	task.Save = ""
	task.Vs = Endpoint{File: base}
	res, err := Run(context.Background(), Options{Task: task, Thresholds: Thresholds{Gates: gate("auc>=0.5", "ece<=1", "vs.mean_tv<=1e-9", "vs.score_agreement>=1")}}, pipeline.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pass || res.Comparison == nil || res.Comparison.Scores == nil || res.Comparison.Scores.Items != 20 {
		t.Fatalf("pass %v %v, comparison %+v", res.Pass, res.Reasons, res.Comparison)
	}
	res, err = Run(context.Background(), Options{Task: task, Thresholds: Thresholds{Gates: gate("brier<=0.0001", "kld_mean<=1")}}, pipeline.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pass || len(res.Reasons) != 2 || !strings.Contains(res.Reasons[0], "brier") || !strings.Contains(res.Reasons[1], "no kld_mean") ||
		!pipeline.IsCheckFailed(res.Err()) || !errors.Is(res.Err(), ErrGateFailed) {
		t.Fatalf("pass %v reasons %q err %v", res.Pass, res.Reasons, res.Err())
	}
	// The JSON result carries the figures.
	b, _ := json.Marshal(res)
	for _, k := range []string{`"scores":{"method":"logprobs"`, `"auc":`, `"ece":`, `"brier":`, `"reliability":`, `"mean_tv":`} {
		if !strings.Contains(string(b), k) {
			t.Fatalf("result JSON lacks %s: %s", k, b)
		}
	}
}

func TestScoreAndGateErrors(t *testing.T) {
	for _, so := range []ScoreOptions{
		{Labels: []string{"1"}},
		{Labels: []string{"1", "1"}},
		{Labels: []string{"1", "2"}, Answer: "RISK"},
		{Labels: []string{"1", "2"}, Method: "vote"},
		{Labels: []string{"1", "2"}, Constrain: "regex"},
		{Labels: []string{"1", "2"}, Method: MethodEach, Constrain: ConstrainNone},
		{Labels: []string{"1", "2"}, HighRisk: "9"},
		{Labels: []string{"1", "2"}, Cutoff: 1.5},
		{Labels: []string{"1", "2"}, Bins: -1},
	} {
		if so.Validate() == nil {
			t.Fatalf("%+v validated", so)
		}
	}
	for _, s := range []string{"auc>0.5", "wisdom>=1", "auc>=x", "auc>=NaN", "ece<="} {
		if _, err := ParseGate(s); err == nil {
			t.Fatalf("gate %q parsed", s)
		}
	}
	// A dataset label outside the labels, and a foreign answers file.
	dataset, _ := writeDataset(t, 5)
	_, err := ScoreTask(context.Background(), TaskOptions{Dataset: dataset, Endpoint: Endpoint{BaseURL: servePhonellm(t)},
		Scores: ScoreOptions{Labels: []string{"1", "2", "3"}}, sleep: noSleep}, Endpoint{BaseURL: servePhonellm(t)}, nil)
	if err == nil || !strings.Contains(err.Error(), "not among the labels") {
		t.Fatalf("label outside the set: %v", err)
	}
	other, _ := writeDataset(t, 6)
	saved := filepath.Join(t.TempDir(), "a.jsonl")
	if _, err := ScoreTask(context.Background(), TaskOptions{Dataset: other, Endpoint: Endpoint{BaseURL: servePhonellm(t)}, Save: saved, sleep: noSleep},
		Endpoint{BaseURL: servePhonellm(t)}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = ScoreTask(context.Background(), TaskOptions{Dataset: dataset, Endpoint: Endpoint{File: saved}}, Endpoint{File: saved}, nil)
	var fe *FormatError
	if !errors.As(err, &fe) || !pipeline.IsInputError(err) {
		t.Fatalf("answers of another dataset: %v", err)
	}
}

// FuzzLabelProbs: any logprobs a server sends give either no scores or a
// probability vector over the labels.
func FuzzLabelProbs(f *testing.F) {
	f.Add(`[{"token":"RISK_LEVEL: ","logprob":-0.1},{"token":"4","logprob":-0.5,"top_logprobs":[{"token":"4","logprob":-0.5},{"token":"5","logprob":-1.2}]}]`, "RISK_LEVEL: {label}", "1,2,3,4,5")
	f.Add(`[{"token":"1","logprob":-0.5,"bytes":[49],"top_logprobs":[{"token":"2","logprob":-0.9,"bytes":[50]}]},{"token":"0","logprob":0}]`, "{label}", "10,11,2")
	f.Fuzz(func(t *testing.T, raw, answer, labels string) {
		var entries []lpEntry
		if json.Unmarshal([]byte(raw), &entries) != nil || len(entries) > 256 {
			return
		}
		so := ScoreOptions{Labels: strings.Split(labels, ","), Answer: answer}
		if so.Validate() != nil || len(so.Labels) > 32 {
			return
		}
		p, ok := labelProbs(so.withDefaults().answers(), entries)
		if !ok {
			return
		}
		sum := 0.0
		for _, v := range p {
			if math.IsNaN(v) || v < 0 || v > 1+1e-9 {
				t.Fatalf("probability %v in %v", v, p)
			}
			sum += v
		}
		if len(p) != len(so.Labels) || math.Abs(sum-1) > 1e-9 {
			t.Fatalf("%v sums to %v", p, sum)
		}
	})
}

// FuzzLoadAnswers: an answers file from a stranger is read or refused with
// a FormatError, never a panic, and what is read is consistent.
func FuzzLoadAnswers(f *testing.F) {
	f.Add(`{"item":1,"label":"1","prediction":"1","reply":"RISK_LEVEL: 1","probs":{"1":0.9,"2":0.1},"latency_ms":3}` + "\n" +
		`{"item":2,"label":"2","prediction":"","reply":"","error":"boom","latency_ms":0}`)
	f.Add(`{"item":1,"label":"1","probs":{"1":0.5}}`)
	dir := f.TempDir()
	items := []Item{{Label: "1"}, {Label: "2"}}
	f.Fuzz(func(t *testing.T, data string) {
		path := filepath.Join(dir, "a.jsonl")
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		ans, err := loadAnswers(path, items, []string{"1", "2"})
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("%q: %v is not a FormatError", data, err)
			}
			return
		}
		if len(ans) != len(items) {
			t.Fatalf("%d answers", len(ans))
		}
		for _, a := range ans {
			if a.Probs != nil && len(a.Probs) != 2 || a.Latency < 0 {
				t.Fatalf("answer %+v", a)
			}
		}
	})
}
