package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
)

// Answers files: an endpoint's answers to a dataset, one JSON object per
// item in dataset order, so that a later run can compare another endpoint
// with them (Endpoint.File) without asking the first one again:
//
//	{"item": 1, "label": "5", "prediction": "5", "reply": "RISK_LEVEL: 5",
//	 "probs": {"1": 0.01, …, "5": 0.90}, "latency_ms": 812.5, "attempts": 1}
//
// A failed request has "error" instead of a reply. Probabilities are keyed by
// label, so files made with the labels in another order still compare.

type answerRecord struct {
	Item       int                `json:"item"`
	Label      string             `json:"label"`
	Prediction string             `json:"prediction"`
	Reply      string             `json:"reply"`
	Probs      map[string]float64 `json:"probs,omitempty"`
	LatencyMs  float64            `json:"latency_ms"`
	Attempts   int                `json:"attempts,omitempty"`
	Error      string             `json:"error,omitempty"`
}

// saveAnswers writes answers to path atomically.
func saveAnswers(path string, items []Item, answers []Answer, labels []string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i, a := range answers {
		rec := answerRecord{Item: i + 1, Label: items[i].Label, Prediction: a.Prediction, Reply: a.Reply,
			LatencyMs: float64(a.Latency) / float64(time.Millisecond), Attempts: a.Attempts}
		if a.Err != nil {
			rec.Error = a.Err.Error()
		}
		if a.Probs != nil {
			rec.Probs = map[string]float64{}
			for k, l := range labels {
				rec.Probs[l] = a.Probs[k]
			}
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	if _, err := fsx.WriteFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("eval: save answers: %w", err)
	}
	return nil
}

// loadAnswers reads an answers file made for items; labels order the
// probabilities (nil: scores are not read).
func loadAnswers(path string, items []Item, labels []string) ([]Answer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	out := make([]Answer, 0, len(items))
	err = eachJSONL(f, path, func(line int, raw []byte) error {
		var rec answerRecord
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&rec); err != nil {
			return &FormatError{File: path, Line: line, Msg: "not an answer record: " + err.Error()}
		}
		i := len(out)
		switch {
		case i >= len(items):
			return &FormatError{File: path, Line: line, Msg: fmt.Sprintf("more answers than the dataset's %d items", len(items))}
		case rec.Item != i+1:
			return &FormatError{File: path, Line: line, Msg: fmt.Sprintf("answer for item %d where item %d was expected", rec.Item, i+1)}
		case rec.Label != items[i].Label:
			return &FormatError{File: path, Line: line, Msg: fmt.Sprintf("item %d is labelled %q here and %q in the dataset: not answers to this dataset", i+1, rec.Label, items[i].Label)}
		case rec.LatencyMs < 0 || math.IsNaN(rec.LatencyMs) || rec.LatencyMs > 1e9 || rec.Attempts < 0:
			return &FormatError{File: path, Line: line, Msg: "latency_ms or attempts out of range"}
		}
		a := Answer{Prediction: rec.Prediction, Reply: rec.Reply, Attempts: rec.Attempts,
			Latency: time.Duration(rec.LatencyMs * float64(time.Millisecond))}
		if rec.Error != "" {
			a.Err, a.Prediction = errors.New(rec.Error), ""
		}
		if rec.Probs != nil && labels != nil {
			p := make([]float64, len(labels))
			sum := 0.0
			for k, l := range labels {
				v, ok := rec.Probs[l]
				if !ok || math.IsNaN(v) || v < 0 || v > 1 {
					return &FormatError{File: path, Line: line, Msg: fmt.Sprintf("probs: label %q missing or not a probability", l)}
				}
				p[k] = v
				sum += v
			}
			if len(rec.Probs) != len(labels) || math.Abs(sum-1) > 1e-6 {
				return &FormatError{File: path, Line: line, Msg: fmt.Sprintf("probs over %d labels summing to %v; want the %d labels %q summing to 1", len(rec.Probs), sum, len(labels), labels)}
			}
			a.Probs = p
		}
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) != len(items) {
		return nil, &FormatError{File: path, Msg: fmt.Sprintf("%d answers for the dataset's %d items", len(out), len(items))}
	}
	return out, nil
}
