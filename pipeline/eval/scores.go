package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/phonellm/phonellm/runtime/grammar"
)

// Scores: when a task's answer is one of a fixed set of labels
// (RISK_LEVEL: 1 … 5), the endpoint's log-probabilities give each item a
// probability for every label, and with it calibration figures
// (calibration.go) and a score a business can put its own threshold on.
//
// Two ways to read the probabilities:
//
//   - "logprobs" (one request per item): the answer is constrained to the
//     labels' answers (or left free, for servers without constraints) and
//     requested with logprobs and 20 top_logprobs at temperature 0. At the
//     token where the answers part (after "RISK_LEVEL: "), the model's
//     probability of each alternative that leads to exactly one answer is
//     that label's; an alternative shared by several (a branch not taken)
//     splits evenly, and the sampled branch is followed to where it parts
//     again. The probabilities are renormalized over the labels: P(label |
//     the answer is one of them). A label outside the 20 alternatives gets
//     0 (on a model that spreads its probability thinly, use "each"). Exact
//     for labels that part at one token, as digits do, when all are among
//     the 20.
//   - "each" (one request per item and label): each answer is forced by a
//     grammar and its probability is the product of its tokens' (the
//     model's probability of that tokenization); the labels' are then
//     normalized. Slower, and exact for any labels.
//
// Both read the model's own distribution (before the constraint), which is
// what phonellm serve and llama-server report.

// Methods of reading scores.
const (
	MethodLogprobs = "logprobs"
	MethodEach     = "each"
)

// How score requests constrain the answer.
const (
	ConstrainGrammar = "grammar" // GBNF "grammar" field: phonellm serve and llama-server
	ConstrainChoices = "choices" // phonellm's "choices" extension
	ConstrainNone    = "none"    // free answer (any OpenAI-compatible server with logprobs)
)

// DefaultAnswer is the answer of a label in the fraud-review task.
const DefaultAnswer = "RISK_LEVEL: {label}"

// topAlternatives is the top_logprobs of score requests (OpenAI's maximum).
const topAlternatives = 20

// ScoreOptions turn on scored answers: the labels every item's answer is
// one of, and how to read their probabilities.
type ScoreOptions struct {
	// Labels are the answers' labels, in order (e.g. 1, 2, 3, 4, 5); none
	// means no scores.
	Labels []string `json:"labels,omitempty"`
	// Answer is the answer text of a label: "{label}" is replaced by it.
	// Default DefaultAnswer.
	Answer string `json:"answer,omitempty"`
	// Method is MethodLogprobs (default) or MethodEach.
	Method string `json:"method,omitempty"`
	// Constrain is ConstrainGrammar (default), ConstrainChoices or
	// ConstrainNone (MethodLogprobs only).
	Constrain string `json:"constrain,omitempty"`
	// HighRisk is the lowest label counted as high risk for the binary
	// figures (that label and those after it); default the second-highest
	// of three or more labels, else the highest.
	HighRisk string `json:"high_risk,omitempty"`
	// Bins of the calibration error; default 10.
	Bins int `json:"bins,omitempty"`
	// Cutoff is the P(high risk) at which an item is flagged; default 0.5.
	Cutoff float64 `json:"cutoff,omitempty"`
}

// Enabled reports whether scores are asked for.
func (o ScoreOptions) Enabled() bool { return len(o.Labels) > 0 }

func (o ScoreOptions) withDefaults() ScoreOptions {
	if o.Answer == "" {
		o.Answer = DefaultAnswer
	}
	if o.Method == "" {
		o.Method = MethodLogprobs
	}
	if o.Constrain == "" {
		o.Constrain = ConstrainGrammar
	}
	if o.HighRisk == "" && len(o.Labels) > 0 {
		o.HighRisk = o.Labels[max(len(o.Labels)-2, 0)]
		if len(o.Labels) < 3 {
			o.HighRisk = o.Labels[len(o.Labels)-1]
		}
	}
	if o.Bins == 0 {
		o.Bins = 10
	}
	if o.Cutoff == 0 {
		o.Cutoff = 0.5
	}
	return o
}

// Validate checks o.
func (o ScoreOptions) Validate() error {
	if !o.Enabled() {
		return nil
	}
	d := o.withDefaults()
	seen := map[string]bool{}
	for _, l := range d.Labels {
		if strings.TrimSpace(l) == "" || seen[l] {
			return fmt.Errorf("eval: labels %q: each must be non-empty and given once", d.Labels)
		}
		seen[l] = true
	}
	if len(d.Labels) < 2 {
		return fmt.Errorf("eval: scores need at least two labels, got %q", d.Labels)
	}
	if !strings.Contains(d.Answer, "{label}") {
		return fmt.Errorf("eval: answer %q has no {label}", d.Answer)
	}
	ans := d.answers()
	for i, a := range ans {
		for j, b := range ans {
			if i != j && a == b {
				return fmt.Errorf("eval: answers %q and %q are the same text", a, b)
			}
		}
	}
	switch d.Method {
	case MethodLogprobs, MethodEach:
	default:
		return fmt.Errorf("eval: score method %q: want %s or %s", d.Method, MethodLogprobs, MethodEach)
	}
	switch d.Constrain {
	case ConstrainGrammar, ConstrainChoices:
	case ConstrainNone:
		if d.Method == MethodEach {
			return fmt.Errorf("eval: score method %s forces each answer and needs a constraint (%s or %s)", MethodEach, ConstrainGrammar, ConstrainChoices)
		}
	default:
		return fmt.Errorf("eval: constrain %q: want %s, %s or %s", d.Constrain, ConstrainGrammar, ConstrainChoices, ConstrainNone)
	}
	if !seen[d.HighRisk] {
		return fmt.Errorf("eval: high-risk label %q is not among the labels %q", d.HighRisk, d.Labels)
	}
	if d.Bins < 1 || d.Bins > 1000 {
		return fmt.Errorf("eval: %d calibration bins: want 1 to 1000", d.Bins)
	}
	if math.IsNaN(d.Cutoff) || d.Cutoff <= 0 || d.Cutoff > 1 {
		return fmt.Errorf("eval: cutoff %v outside (0, 1]", d.Cutoff)
	}
	return nil
}

// answers are the labels' answer texts.
func (o ScoreOptions) answers() []string {
	out := make([]string, len(o.Labels))
	for i, l := range o.Labels {
		out[i] = strings.ReplaceAll(o.Answer, "{label}", l)
	}
	return out
}

// high marks the high-risk labels.
func (o ScoreOptions) high() []bool {
	out := make([]bool, len(o.Labels))
	on := false
	for i, l := range o.Labels {
		on = on || l == o.HighRisk
		out[i] = on
	}
	return out
}

// constraint returns the request fields that hold the answer to answers.
func constraintFields(how string, answers []string) (map[string]any, error) {
	switch how {
	case ConstrainNone:
		return nil, nil
	case ConstrainChoices:
		return map[string]any{"choices": answers}, nil
	}
	g, err := grammar.Choices(answers)
	if err != nil {
		return nil, fmt.Errorf("eval: answers: %w", err)
	}
	return map[string]any{"grammar": g.String()}, nil
}

// lpEntry is one token of an OpenAI chat logprobs content list.
type lpEntry struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
	Top     []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_logprobs"`
}

// text is a token's exact text: its bytes when the server sent them.
func tokenText(token string, b []int) string {
	if b == nil {
		return token
	}
	out := make([]byte, len(b))
	for i, x := range b {
		out[i] = byte(x)
	}
	return string(out)
}

// labelProbs reads the labels' probabilities from an answer's logprobs
// (see MethodLogprobs); ok is false when the answer does not reach the
// point where the answers part.
func labelProbs(answers []string, entries []lpEntry) (probs []float64, ok bool) {
	cp := answers[0]
	for _, a := range answers[1:] {
		n := 0
		for n < len(cp) && n < len(a) && cp[n] == a[n] {
			n++
		}
		cp = cp[:n]
	}
	// The step at which the text has just written the common prefix (at its
	// first occurrence; at the start when there is none).
	var text strings.Builder
	start := -1
	at := 0
	if cp != "" {
		full := ""
		for _, e := range entries {
			full += tokenText(e.Token, e.Bytes)
		}
		i := strings.Index(full, cp)
		if i < 0 {
			return nil, false
		}
		at = i + len(cp)
	}
	for s, e := range entries {
		if text.Len() == at {
			start = s
			break
		}
		text.WriteString(tokenText(e.Token, e.Bytes))
	}
	if start < 0 {
		return nil, false
	}
	live := make([]int, len(answers))
	for i := range live {
		live[i] = i
	}
	p, ok := splitProbs(answers, entries, start, cp, live)
	if !ok {
		return nil, false
	}
	out := make([]float64, len(answers))
	sum := 0.0
	for k, v := range p {
		out[k] = v
		sum += v
	}
	if sum <= 0 || math.IsNaN(sum) {
		return nil, false
	}
	for k := range out {
		out[k] /= sum
	}
	return out, true
}

// splitProbs divides probability 1 among the live answers from step s,
// where the text so far is prefix.
func splitProbs(answers []string, entries []lpEntry, s int, prefix string, live []int) (map[int]float64, bool) {
	if len(live) == 1 {
		return map[int]float64{live[0]: 1}, true
	}
	if s >= len(entries) {
		return nil, false
	}
	e := entries[s]
	consistent := func(cand string) []int {
		var out []int
		for _, k := range live {
			if strings.HasPrefix(answers[k], cand) || strings.HasPrefix(cand, answers[k]) {
				out = append(out, k)
			}
		}
		return out
	}
	taken := tokenText(e.Token, e.Bytes)
	takenSet := consistent(prefix + taken)
	if len(takenSet) == 0 {
		return nil, false
	}
	if len(takenSet) == len(live) {
		// Not parting here (the token only spells more of what the live
		// answers share): go on.
		return splitProbs(answers, entries, s+1, prefix+taken, live)
	}
	type alt struct {
		text string
		lp   float64
	}
	alts := []alt{{taken, e.Logprob}}
	for _, a := range e.Top {
		t := tokenText(a.Token, a.Bytes)
		// A token without text (end of generation, a control token) writes
		// none of the answers: its probability is no label's.
		if t != "" && !slices.ContainsFunc(alts, func(x alt) bool { return x.text == t }) {
			alts = append(alts, alt{t, a.Logprob})
		}
	}
	out := map[int]float64{}
	for i, a := range alts {
		set := consistent(prefix + a.text)
		if len(set) == 0 || math.IsNaN(a.lp) {
			continue
		}
		p := math.Exp(min(a.lp, 0)) // a server's log-probability above 0 is at most certainty
		switch {
		case len(set) == 1:
			out[set[0]] += p
		case i == 0:
			sub, ok := splitProbs(answers, entries, s+1, prefix+a.text, set)
			if !ok {
				return nil, false
			}
			for k, q := range sub {
				out[k] += p * q
			}
		default:
			for _, k := range set {
				out[k] += p / float64(len(set))
			}
		}
	}
	return out, true
}

// scoreItem asks ep for one item's label probabilities.
func scoreItem(ctx context.Context, client *http.Client, url string, ep Endpoint, it Item, o TaskOptions) (reply string, probs []float64, err error) {
	so := o.Scores.withDefaults()
	answers := so.answers()
	maxTokens := o.MaxTokens
	if so.Method == MethodEach {
		lps := make([]float64, len(answers))
		for k, a := range answers {
			fields, err := constraintFields(so.Constrain, []string{a})
			if err != nil {
				return "", nil, err
			}
			n := maxTokens
			if n == 0 {
				n = 16 + len(a) // the answer's tokens, at most one per byte, and room for a stray one
			}
			r, err := chat(ctx, client, url, ep, it.Messages, n, fields)
			if err != nil {
				return "", nil, err
			}
			if r.text != a {
				return r.text, nil, fmt.Errorf("eval: the server did not hold the answer to %q (answered %q): does it take %q?", a, httpCap(r.text), so.Constrain)
			}
			if r.logprobs == nil {
				return r.text, nil, errors.New("eval: the server sent no logprobs")
			}
			for _, e := range r.logprobs {
				lps[k] += min(e.Logprob, 0)
			}
			if math.IsNaN(lps[k]) || math.IsInf(lps[k], 0) {
				return r.text, nil, fmt.Errorf("eval: the server's log-probabilities of %q sum to %v", a, lps[k])
			}
		}
		return answers[argmaxF64(lps)], normalizeLogprobs(lps), nil
	}
	fields, err := constraintFields(so.Constrain, answers)
	if err != nil {
		return "", nil, err
	}
	if fields == nil {
		fields = map[string]any{} // no constraint, logprobs still
	}
	if maxTokens == 0 {
		maxTokens = 64
		if so.Constrain == ConstrainNone {
			maxTokens = 512
		}
	}
	r, err := chat(ctx, client, url, ep, it.Messages, maxTokens, fields)
	if err != nil {
		return "", nil, err
	}
	if r.logprobs == nil {
		return r.text, nil, nil // no scores from this server: the answer still counts
	}
	p, ok := labelProbs(answers, r.logprobs)
	if !ok {
		return r.text, nil, nil
	}
	return r.text, p, nil
}

func normalizeLogprobs(lps []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range lps {
		m = math.Max(m, v)
	}
	out := make([]float64, len(lps))
	sum := 0.0
	for i, v := range lps {
		out[i] = math.Exp(v - m)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func httpCap(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// scoreMetrics computes the figures of answers whose probabilities were
// read (nil Probs: unscored).
func scoreMetrics(o ScoreOptions, items []Item, answers []Answer) (*ScoreMetrics, error) {
	so := o.withDefaults()
	index := map[string]int{}
	for i, l := range so.Labels {
		index[l] = i
	}
	var scored []scoredItem
	unscored := 0
	for i, it := range items {
		k, ok := index[it.Label]
		if !ok {
			return nil, fmt.Errorf("eval: item %d's label %q is not among the labels %q", i+1, it.Label, so.Labels)
		}
		p := answers[i].Probs
		if answers[i].Err != nil || len(p) != len(so.Labels) {
			unscored++
			continue
		}
		scored = append(scored, scoredItem{probs: p, label: k})
	}
	m := calibration(scored, so.Labels, so.high(), so.Bins, so.Cutoff)
	m.Method, m.Unscored = so.Method, unscored
	return &m, nil
}

// labelOf is the label a probability vector picks.
func labelOf(labels []string, p []float64) string { return labels[argmaxF64(p)] }
