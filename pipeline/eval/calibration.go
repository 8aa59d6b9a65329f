package eval

import (
	"fmt"
	"math"
	"slices"
)

// Calibration figures of scored answers: for each item a probability over
// the task's fixed labels (from the endpoint's log-probabilities, see
// scores.go) and its true label.

// ScoreMetrics are the figures of one endpoint's scored answers.
type ScoreMetrics struct {
	// Method says how the probabilities were read ("logprobs" or "each").
	Method string `json:"method"`
	// Labels are the task's labels, in order; HighRisk those counted as
	// high risk for the binary figures.
	Labels   []string `json:"labels"`
	HighRisk []string `json:"high_risk"`
	// Scored items have a probability for every label; Unscored items
	// (failed requests, answers outside the labels) are left out of the
	// figures below.
	Scored   int `json:"scored"`
	Unscored int `json:"unscored"`
	// Accuracy of the most probable label over the scored items.
	Accuracy float64 `json:"accuracy"`
	// Brier is the multi-class Brier score: the mean over items of
	// Σ_k (p_k − y_k)², 0 (perfect) to 2.
	Brier float64 `json:"brier"`
	// LogLoss is the mean of −ln p(true label), each p at least 1e-15.
	LogLoss float64 `json:"log_loss"`
	// ECE is the expected calibration error of the most probable label:
	// Σ_b (n_b/N) |accuracy_b − confidence_b| over Bins equal-width bins of
	// the confidence (its probability).
	ECE         float64    `json:"ece"`
	Bins        int        `json:"bins"`
	Reliability []BinStats `json:"reliability"`
	// AUC is the ROC-AUC of P(high risk) (the summed probability of the
	// high-risk labels) for telling high-risk items from the rest; nil when
	// the items hold only one of the two.
	AUC *float64 `json:"auc"`
	// HighRiskBrier is the binary Brier score of P(high risk).
	HighRiskBrier float64 `json:"high_risk_brier"`
	// At Cutoff (flag an item when P(high risk) >= Cutoff): the share of
	// flagged items that are high risk, of high-risk items flagged, and of
	// the others flagged. Precision is 0 when nothing is flagged.
	Cutoff    float64 `json:"cutoff"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	FPR       float64 `json:"false_positive_rate"`
}

// BinStats is one bin of the reliability diagram.
type BinStats struct {
	Low        float64 `json:"low"`
	High       float64 `json:"high"`
	Count      int     `json:"count"`
	Confidence float64 `json:"confidence"` // mean confidence of the bin's items
	Accuracy   float64 `json:"accuracy"`   // share of them whose most probable label is right
}

// scoredItem is one item's probabilities (over the labels, summing to 1)
// and the index of its true label.
type scoredItem struct {
	probs []float64
	label int
}

// calibration computes the figures of scored items. labels are the task's
// labels; high marks the high-risk ones; bins (> 0) and cutoff configure
// ECE and the operating point.
func calibration(items []scoredItem, labels []string, high []bool, bins int, cutoff float64) ScoreMetrics {
	m := ScoreMetrics{Labels: labels, Scored: len(items), Bins: bins, Cutoff: cutoff}
	for i, h := range high {
		if h {
			m.HighRisk = append(m.HighRisk, labels[i])
		}
	}
	m.Reliability = make([]BinStats, bins)
	for b := range m.Reliability {
		m.Reliability[b].Low, m.Reliability[b].High = float64(b)/float64(bins), float64(b+1)/float64(bins)
	}
	if len(items) == 0 {
		return m
	}
	n := float64(len(items))
	var scores []float64
	var positive []bool
	var tp, fp, pos, neg int
	for _, it := range items {
		best := argmaxF64(it.probs)
		conf := it.probs[best]
		correct := best == it.label
		if correct {
			m.Accuracy++
		}
		for k, p := range it.probs {
			y := 0.0
			if k == it.label {
				y = 1
			}
			m.Brier += (p - y) * (p - y)
		}
		m.LogLoss -= math.Log(max(it.probs[it.label], 1e-15))
		b := min(int(conf*float64(bins)), bins-1)
		bs := &m.Reliability[b]
		bs.Count++
		bs.Confidence += conf
		if correct {
			bs.Accuracy++
		}
		s := 0.0
		for k, p := range it.probs {
			if high[k] {
				s += p
			}
		}
		isHigh := high[it.label]
		y := 0.0
		if isHigh {
			y = 1
			pos++
		} else {
			neg++
		}
		m.HighRiskBrier += (s - y) * (s - y)
		if s >= cutoff {
			if isHigh {
				tp++
			} else {
				fp++
			}
		}
		scores = append(scores, s)
		positive = append(positive, isHigh)
	}
	m.Accuracy /= n
	m.Brier /= n
	m.LogLoss /= n
	m.HighRiskBrier /= n
	for b := range m.Reliability {
		bs := &m.Reliability[b]
		if bs.Count == 0 {
			continue
		}
		bs.Confidence /= float64(bs.Count)
		bs.Accuracy /= float64(bs.Count)
		m.ECE += float64(bs.Count) / n * math.Abs(bs.Accuracy-bs.Confidence)
	}
	if tp+fp > 0 {
		m.Precision = float64(tp) / float64(tp+fp)
	}
	if pos > 0 {
		m.Recall = float64(tp) / float64(pos)
	}
	if neg > 0 {
		m.FPR = float64(fp) / float64(neg)
	}
	if auc, ok := rocAUC(scores, positive); ok {
		m.AUC = &auc
	}
	return m
}

// argmax is the index of the largest value (the first of equals).
func argmaxF64(p []float64) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}

// rocAUC is the area under the ROC curve of scores for telling positive
// items from negative ones: the probability that a random positive scores
// above a random negative, ties counting one half (the Mann-Whitney
// statistic, as scikit-learn's roc_auc_score computes it). ok is false
// when either class is empty.
func rocAUC(scores []float64, positive []bool) (auc float64, ok bool) {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case scores[a] < scores[b]:
			return -1
		case scores[a] > scores[b]:
			return 1
		}
		return 0
	})
	// Sum of the positives' ranks, equal scores sharing their mean rank.
	var rankSum float64
	var pos, neg int
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && scores[idx[j]] == scores[idx[i]] {
			j++
		}
		mean := float64(i+j+1) / 2 // ranks i+1..j
		for _, k := range idx[i:j] {
			if positive[k] {
				rankSum += mean
				pos++
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return 0, false
	}
	return (rankSum - float64(pos)*float64(pos+1)/2) / (float64(pos) * float64(neg)), true
}

// ScoreComparison sets two endpoints' scored answers side by side (main −
// vs, as Comparison does).
type ScoreComparison struct {
	// Agreement is the share of items scored by both whose most probable
	// label is the same.
	Agreement float64 `json:"agreement"`
	// MeanTV is the mean total variation distance between the two
	// probability vectors, ½ Σ_k |p_k − q_k| (0 same, 1 disjoint).
	MeanTV       float64  `json:"mean_tv"`
	BrierDelta   float64  `json:"brier_delta"`
	ECEDelta     float64  `json:"ece_delta"`
	LogLossDelta float64  `json:"log_loss_delta"`
	AUCDelta     *float64 `json:"auc_delta"`
	// Items scored by both.
	Items int `json:"items"`
}

func compareScores(main, vs ScoreMetrics, mp, vp [][]float64) ScoreComparison {
	c := ScoreComparison{BrierDelta: main.Brier - vs.Brier, ECEDelta: main.ECE - vs.ECE, LogLossDelta: main.LogLoss - vs.LogLoss}
	if main.AUC != nil && vs.AUC != nil {
		d := *main.AUC - *vs.AUC
		c.AUCDelta = &d
	}
	for i := range min(len(mp), len(vp)) {
		p, q := mp[i], vp[i]
		if p == nil || q == nil || len(p) != len(q) {
			continue
		}
		c.Items++
		if argmaxF64(p) == argmaxF64(q) {
			c.Agreement++
		}
		tv := 0.0
		for k := range p {
			tv += math.Abs(p[k] - q[k])
		}
		c.MeanTV += tv / 2
	}
	if c.Items > 0 {
		c.Agreement /= float64(c.Items)
		c.MeanTV /= float64(c.Items)
	}
	return c
}

// String summarizes the figures on one line.
func (m ScoreMetrics) String() string {
	auc := "n/a"
	if m.AUC != nil {
		auc = fmt.Sprintf("%.4f", *m.AUC)
	}
	return fmt.Sprintf("scored %d/%d (%s): accuracy %.3f, Brier %.4f, log-loss %.4f, ECE %.4f, ROC-AUC(high risk %v) %s, at P≥%.2f precision %.3f recall %.3f FPR %.3f",
		m.Scored, m.Scored+m.Unscored, m.Method, m.Accuracy, m.Brier, m.LogLoss, m.ECE, m.HighRisk, auc, m.Cutoff, m.Precision, m.Recall, m.FPR)
}
