package eval

import (
	"math"
	"testing"
)

// TestCalibrationHandComputed checks every figure on four items worked out
// by hand (labels 1, 2, 3; "3" is high risk; two confidence bins).
func TestCalibrationHandComputed(t *testing.T) {
	items := []scoredItem{
		{[]float64{0.7, 0.2, 0.1}, 0}, // right, confidence 0.7
		{[]float64{0.2, 0.5, 0.3}, 2}, // wrong (says 2), confidence 0.5
		{[]float64{0.1, 0.1, 0.8}, 2}, // right, confidence 0.8
		{[]float64{0.3, 0.3, 0.4}, 1}, // wrong (says 3), confidence 0.4
	}
	m := calibration(items, []string{"1", "2", "3"}, []bool{false, false, true}, 2, 0.5)
	// Brier: 0.09+0.04+0.01, 0.04+0.25+0.49, 0.01+0.01+0.04, 0.09+0.49+0.16 = 1.72 over 4.
	// Log-loss: −(ln 0.7 + ln 0.3 + ln 0.8 + ln 0.3) / 4.
	// ECE: bin [0, .5) holds the fourth item (confidence 0.4, accuracy 0): 0.4 × 1/4;
	// bin [.5, 1] the others: confidence (0.7+0.5+0.8)/3 = accuracy 2/3, so 0.
	// P(high) = 0.1 (no), 0.3 (yes), 0.8 (yes), 0.4 (no): AUC 3/4 (0.3 loses to 0.4);
	// binary Brier (0.01+0.49+0.04+0.16)/4; at 0.5 only the third is flagged.
	switch {
	case m.Scored != 4 || !nearly(m.Accuracy, 0.5):
		t.Fatalf("scored %d accuracy %v", m.Scored, m.Accuracy)
	case !nearly(m.Brier, 1.72/4):
		t.Fatalf("Brier %v", m.Brier)
	case !nearly(m.LogLoss, -(math.Log(0.7)+math.Log(0.3)+math.Log(0.8)+math.Log(0.3))/4):
		t.Fatalf("log-loss %v", m.LogLoss)
	case !nearly(m.ECE, 0.1):
		t.Fatalf("ECE %v %+v", m.ECE, m.Reliability)
	case m.Reliability[0].Count != 1 || m.Reliability[1].Count != 3 || !nearly(m.Reliability[1].Confidence, 2.0/3) || !nearly(m.Reliability[1].Accuracy, 2.0/3):
		t.Fatalf("reliability %+v", m.Reliability)
	case m.AUC == nil || !nearly(*m.AUC, 0.75):
		t.Fatalf("AUC %v", m.AUC)
	case !nearly(m.HighRiskBrier, 0.7/4):
		t.Fatalf("high-risk Brier %v", m.HighRiskBrier)
	case !nearly(m.Precision, 1) || !nearly(m.Recall, 0.5) || !nearly(m.FPR, 0):
		t.Fatalf("at 0.5: precision %v recall %v FPR %v", m.Precision, m.Recall, m.FPR)
	case len(m.HighRisk) != 1 || m.HighRisk[0] != "3":
		t.Fatalf("high risk %v", m.HighRisk)
	}
	// At 0.35 the fourth item is flagged too.
	m = calibration(items, []string{"1", "2", "3"}, []bool{false, false, true}, 2, 0.35)
	if !nearly(m.Precision, 0.5) || !nearly(m.Recall, 0.5) || !nearly(m.FPR, 0.5) {
		t.Fatalf("at 0.35: precision %v recall %v FPR %v", m.Precision, m.Recall, m.FPR)
	}
	// A perfect, certain model.
	m = calibration([]scoredItem{{[]float64{1, 0, 0}, 0}, {[]float64{0, 0, 1}, 2}}, []string{"1", "2", "3"}, []bool{false, false, true}, 10, 0.5)
	if m.Brier != 0 || m.ECE != 0 || m.Accuracy != 1 || *m.AUC != 1 || m.LogLoss != 0 || m.Reliability[9].Count != 2 {
		t.Fatalf("perfect model %+v", m)
	}
	// Only one class: no AUC.
	m = calibration([]scoredItem{{[]float64{0.5, 0.5}, 0}}, []string{"a", "b"}, []bool{false, true}, 10, 0.5)
	if m.AUC != nil {
		t.Fatalf("AUC %v with no positive item", *m.AUC)
	}
	// No items.
	if m := calibration(nil, []string{"a"}, []bool{true}, 10, 0.5); m.Scored != 0 || m.AUC != nil || m.Brier != 0 {
		t.Fatalf("no items %+v", m)
	}
}

func TestROCAUC(t *testing.T) {
	for _, c := range []struct {
		scores []float64
		pos    []bool
		want   float64
		ok     bool
	}{
		// Pairs (pos, neg): (.5,.5) ties ½, (.5,.2) 1, (.9,.5) 1, (.9,.2) 1.
		{[]float64{0.5, 0.5, 0.2, 0.9}, []bool{true, false, false, true}, 3.5 / 4, true},
		{[]float64{0.1, 0.2, 0.3}, []bool{false, false, true}, 1, true},
		{[]float64{0.1, 0.2, 0.3}, []bool{true, false, false}, 0, true},
		{[]float64{0.4, 0.4, 0.4, 0.4}, []bool{true, false, true, false}, 0.5, true},
		{[]float64{0.1, 0.2}, []bool{true, true}, 0, false},
	} {
		got, ok := rocAUC(c.scores, c.pos)
		if ok != c.ok || ok && !nearly(got, c.want) {
			t.Fatalf("%v %v: %v %v, want %v %v", c.scores, c.pos, got, ok, c.want, c.ok)
		}
	}
}

func TestCompareScores(t *testing.T) {
	auc1, auc2 := 0.8, 0.7
	main := ScoreMetrics{Brier: 0.3, ECE: 0.05, LogLoss: 0.6, AUC: &auc1}
	vs := ScoreMetrics{Brier: 0.2, ECE: 0.02, LogLoss: 0.5, AUC: &auc2}
	// Item 1: same argmax, TV ½(0.1+0.1) = 0.1; item 2: different argmax, TV ½(0.6+0.6) = 0.6;
	// item 3 unscored on one side.
	c := compareScores(main, vs, [][]float64{{0.6, 0.4}, {0.8, 0.2}, nil}, [][]float64{{0.7, 0.3}, {0.2, 0.8}, {1, 0}})
	if c.Items != 2 || !nearly(c.Agreement, 0.5) || !nearly(c.MeanTV, 0.35) || !nearly(c.BrierDelta, 0.1) || !nearly(c.ECEDelta, 0.03) ||
		!nearly(c.LogLossDelta, 0.1) || c.AUCDelta == nil || !nearly(*c.AUCDelta, 0.1) {
		t.Fatalf("%+v", c)
	}
}

func nearly(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
