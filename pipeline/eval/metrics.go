package eval

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// Unparsable and Failed are the predictions recorded in the confusion matrix for a reply without a match of
// the answer pattern and for a request that failed.
const (
	Unparsable = "(unparsable)"
	Failed     = "(failed)"
)

// TaskResult is one endpoint's score on a labelled dataset.
type TaskResult struct {
	Endpoint string  `json:"endpoint"`
	Model    string  `json:"model,omitempty"`
	Items    int     `json:"items"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
	// MacroF1 is the unweighted mean of the per-class F1 over Classes.
	MacroF1 float64 `json:"macro_f1"`
	// Unparsable counts replies without a match of the pattern; Failed counts requests that failed (both
	// count as wrong answers).
	Unparsable int `json:"unparsable"`
	Failed     int `json:"failed"`
	// Retries counts requests repeated after a transient failure.
	Retries int `json:"retries"`
	// Classes are the labels and parsed predictions (as scikit-learn's default), numerically sorted when
	// all are numbers.
	Classes []ClassMetrics `json:"classes"`
	// Confusion[label][prediction] counts items; predictions include Unparsable and Failed.
	Confusion map[string]map[string]int `json:"confusion"`
	// Latencies of the successful requests, in milliseconds.
	LatencyP50Ms float64  `json:"latency_p50_ms"`
	LatencyP95Ms float64  `json:"latency_p95_ms"`
	Errors       []string `json:"errors,omitempty"` // the first few request failures
	Seconds      float64  `json:"seconds"`
	// Scores are the calibration figures of scored answers (TaskOptions.Scores).
	Scores *ScoreMetrics `json:"scores,omitempty"`
}

// ClassMetrics are one class's figures. Precision (recall) is 0 when the class was never predicted (never
// the label), as scikit-learn's zero_division=0.
type ClassMetrics struct {
	Label     string  `json:"label"`
	Support   int     `json:"support"`   // items with this label
	Predicted int     `json:"predicted"` // items predicted as this class
	TP        int     `json:"tp"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

// Score computes the metrics of answers (in item order) against the items' labels.
func Score(items []Item, answers []Answer) TaskResult {
	r := TaskResult{Items: len(items), Confusion: map[string]map[string]int{}}
	var lat []float64
	classes := map[string]bool{}
	for i, it := range items {
		a := answers[i]
		r.Retries += max(a.Attempts-1, 0)
		pred := a.Prediction
		switch {
		case a.Err != nil:
			pred = Failed
			r.Failed++
			if len(r.Errors) < maxErrors {
				r.Errors = append(r.Errors, a.Err.Error())
			}
		case pred == "":
			pred = Unparsable
			r.Unparsable++
		default:
			classes[pred] = true
		}
		if a.Err == nil {
			lat = append(lat, float64(a.Latency)/float64(time.Millisecond))
		}
		classes[it.Label] = true
		if r.Confusion[it.Label] == nil {
			r.Confusion[it.Label] = map[string]int{}
		}
		r.Confusion[it.Label][pred]++
		if pred == it.Label {
			r.Correct++
		}
	}
	if r.Items > 0 {
		r.Accuracy = float64(r.Correct) / float64(r.Items)
	}
	names := make([]string, 0, len(classes))
	for c := range classes {
		names = append(names, c)
	}
	sortLabels(names)
	for _, c := range names {
		m := ClassMetrics{Label: c, TP: r.Confusion[c][c]}
		for _, n := range r.Confusion[c] {
			m.Support += n
		}
		for _, row := range r.Confusion {
			m.Predicted += row[c]
		}
		if m.Predicted > 0 {
			m.Precision = float64(m.TP) / float64(m.Predicted)
		}
		if m.Support > 0 {
			m.Recall = float64(m.TP) / float64(m.Support)
		}
		if m.Precision+m.Recall > 0 {
			m.F1 = 2 * m.Precision * m.Recall / (m.Precision + m.Recall)
		}
		r.MacroF1 += m.F1
		r.Classes = append(r.Classes, m)
	}
	if len(r.Classes) > 0 {
		r.MacroF1 /= float64(len(r.Classes))
	}
	slices.Sort(lat)
	r.LatencyP50Ms = quantile(lat, 0.50)
	r.LatencyP95Ms = quantile(lat, 0.95)
	return r
}

// sortLabels sorts numerically when every label is a number, else lexically.
func sortLabels(s []string) {
	numeric := true
	for _, x := range s {
		if _, err := strconv.ParseFloat(x, 64); err != nil {
			numeric = false
		}
	}
	slices.SortFunc(s, func(a, b string) int {
		if numeric {
			x, _ := strconv.ParseFloat(a, 64)
			y, _ := strconv.ParseFloat(b, 64)
			if c := cmp.Compare(x, y); c != 0 {
				return c
			}
		}
		return cmp.Compare(a, b)
	})
}

// Comparison sets two endpoints' scores on the same items side by side. Deltas are main − vs, so a quantized
// model under test (main) that lost quality against its baseline (vs) has a negative AccuracyDelta and a
// positive MacroF1Drop.
type Comparison struct {
	// Agreement is the fraction of items on which both endpoints gave the same answer (failures and
	// unparsable replies never agree).
	Agreement     float64 `json:"agreement"`
	AccuracyDelta float64 `json:"accuracy_delta"`
	// MacroF1Drop is vs.MacroF1 − main.MacroF1.
	MacroF1Drop float64 `json:"macro_f1_drop"`
	// LatencyP50Ratio is main's p50 latency over vs's (0 when either is unknown).
	LatencyP50Ratio float64 `json:"latency_p50_ratio,omitempty"`
	// Scores compares the two endpoints' label probabilities, when both were scored.
	Scores *ScoreComparison `json:"scores,omitempty"`
}

// Compare compares two endpoints' results and answers on the same items.
func Compare(main, vs TaskResult, ma, va []Answer) Comparison {
	c := Comparison{AccuracyDelta: main.Accuracy - vs.Accuracy, MacroF1Drop: vs.MacroF1 - main.MacroF1}
	same := 0
	for i := range min(len(ma), len(va)) {
		if ma[i].Err == nil && va[i].Err == nil && ma[i].Prediction != "" && ma[i].Prediction == va[i].Prediction {
			same++
		}
	}
	if n := min(len(ma), len(va)); n > 0 {
		c.Agreement = float64(same) / float64(n)
	}
	if main.LatencyP50Ms > 0 && vs.LatencyP50Ms > 0 {
		c.LatencyP50Ratio = main.LatencyP50Ms / vs.LatencyP50Ms
	}
	return c
}
