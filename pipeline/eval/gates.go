package eval

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Gate is a threshold on any figure of a Result: "auc>=0.85",
// "ece<=0.05", "vs.brier_delta<=0.01". A figure the run did not produce
// (no scores, no vs endpoint, an AUC over one class) or that is NaN fails
// its gate: a check that could not be made does not pass.
type Gate struct {
	Metric string  `json:"metric"`
	Op     string  `json:"op"` // ">=" or "<="
	Value  float64 `json:"value"`
}

func (g Gate) String() string {
	return g.Metric + g.Op + strconv.FormatFloat(g.Value, 'g', -1, 64)
}

// metricDoc lists the figures a gate may name, with what they are.
var metricDoc = []struct{ name, doc string }{
	{"kld_mean", "mean KL divergence (nats), distribution check"},
	{"kld_p99", "99th percentile KL divergence"},
	{"kld_max", "largest KL divergence"},
	{"top1", "top-1 agreement (fraction)"},
	{"ppl_candidate", "candidate perplexity"},
	{"accuracy", "task accuracy (fraction)"},
	{"macro_f1", "task macro-F1"},
	{"unparsable_rate", "share of answers without a match of the pattern"},
	{"failed_rate", "share of requests that failed"},
	{"latency_p95_ms", "95th percentile request latency"},
	{"brier", "multi-class Brier score of the label probabilities"},
	{"log_loss", "mean −ln p(true label)"},
	{"ece", "expected calibration error"},
	{"auc", "ROC-AUC of P(high risk)"},
	{"high_risk_brier", "binary Brier score of P(high risk)"},
	{"precision", "precision of high-risk flags at the cutoff"},
	{"recall", "recall of high-risk flags at the cutoff"},
	{"fpr", "false-positive rate of high-risk flags at the cutoff"},
	{"scored_rate", "share of items whose label probabilities were read"},
	{"vs.agreement", "share of items both endpoints answer alike"},
	{"vs.accuracy_delta", "accuracy minus vs's"},
	{"vs.macro_f1_drop", "vs's macro-F1 minus this one's"},
	{"vs.score_agreement", "share of scored items with the same most probable label"},
	{"vs.mean_tv", "mean total variation between the two probability vectors"},
	{"vs.brier_delta", "Brier minus vs's"},
	{"vs.ece_delta", "ECE minus vs's"},
	{"vs.log_loss_delta", "log-loss minus vs's"},
	{"vs.auc_delta", "AUC minus vs's"},
}

// Metrics lists the figure names a Gate may use, with their meaning, one per line.
func Metrics() string {
	var sb strings.Builder
	for _, m := range metricDoc {
		fmt.Fprintf(&sb, "%-20s %s\n", m.name, m.doc)
	}
	return sb.String()
}

// ParseGate reads "METRIC>=VALUE" or "METRIC<=VALUE".
func ParseGate(s string) (Gate, error) {
	for _, op := range []string{">=", "<="} {
		name, val, ok := strings.Cut(s, op)
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		if !slices.ContainsFunc(metricDoc, func(m struct{ name, doc string }) bool { return m.name == name }) {
			return Gate{}, fmt.Errorf("eval: gate %q: unknown figure %q (see the list in phonellm eval --help)", s, name)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return Gate{}, fmt.Errorf("eval: gate %q: %q is not a number", s, strings.TrimSpace(val))
		}
		return Gate{Metric: name, Op: op, Value: v}, nil
	}
	return Gate{}, fmt.Errorf("eval: gate %q: want FIGURE>=VALUE or FIGURE<=VALUE (e.g. auc>=0.85)", s)
}

// metric returns a figure of r; ok is false when r does not have it.
func metric(r Result, name string) (v float64, ok bool) {
	if vs, isVs := strings.CutPrefix(name, "vs."); isVs {
		c := r.Comparison
		if c == nil {
			return 0, false
		}
		switch vs {
		case "agreement":
			return c.Agreement, true
		case "accuracy_delta":
			return c.AccuracyDelta, true
		case "macro_f1_drop":
			return c.MacroF1Drop, true
		}
		s := c.Scores
		if s == nil {
			return 0, false
		}
		switch vs {
		case "score_agreement":
			return s.Agreement, true
		case "mean_tv":
			return s.MeanTV, true
		case "brier_delta":
			return s.BrierDelta, true
		case "ece_delta":
			return s.ECEDelta, true
		case "log_loss_delta":
			return s.LogLossDelta, true
		case "auc_delta":
			if s.AUCDelta == nil {
				return 0, false
			}
			return *s.AUCDelta, true
		}
		return 0, false
	}
	if d := r.Distribution; d != nil {
		switch name {
		case "kld_mean":
			return d.MeanKLD, true
		case "kld_p99":
			return d.P99KLD, true
		case "kld_max":
			return d.MaxKLD, true
		case "top1":
			return d.Top1, true
		case "ppl_candidate":
			return d.PPLCandidate, true
		}
	}
	t := r.Task
	if t == nil {
		return 0, false
	}
	rate := func(n int) float64 {
		if t.Items == 0 {
			return 0
		}
		return float64(n) / float64(t.Items)
	}
	switch name {
	case "accuracy":
		return t.Accuracy, true
	case "macro_f1":
		return t.MacroF1, true
	case "unparsable_rate":
		return rate(t.Unparsable), true
	case "failed_rate":
		return rate(t.Failed), true
	case "latency_p95_ms":
		return t.LatencyP95Ms, true
	}
	s := t.Scores
	if s == nil || s.Scored == 0 {
		return 0, false
	}
	switch name {
	case "brier":
		return s.Brier, true
	case "log_loss":
		return s.LogLoss, true
	case "ece":
		return s.ECE, true
	case "auc":
		if s.AUC == nil {
			return 0, false
		}
		return *s.AUC, true
	case "high_risk_brier":
		return s.HighRiskBrier, true
	case "precision":
		return s.Precision, true
	case "recall":
		return s.Recall, true
	case "fpr":
		return s.FPR, true
	case "scored_rate":
		return float64(s.Scored) / float64(s.Scored+s.Unscored), true
	}
	return 0, false
}

// checkGates returns why r fails gates.
func checkGates(gates []Gate, r Result) []string {
	var why []string
	for _, g := range gates {
		v, ok := metric(r, g.Metric)
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("%s: this run has no %s", g, g.Metric))
		case math.IsNaN(v):
			why = append(why, fmt.Sprintf("%s: %s is not a number", g, g.Metric))
		case g.Op == ">=" && v < g.Value, g.Op == "<=" && v > g.Value:
			why = append(why, fmt.Sprintf("%s: %s is %.6g", g, g.Metric, v))
		}
	}
	return why
}
