package eval

import (
	"errors"
	"fmt"
	"strings"
)

// Thresholds make the gate. A zero threshold is not checked (to forbid any F1 drop, set a tiny
// MaxF1Drop such as 1e-9).
type Thresholds struct {
	// MaxKLD is the highest mean KL divergence (nats) allowed.
	MaxKLD float64 `json:"max_kld,omitempty"`
	// MinTop1 is the lowest top-1 agreement allowed, as a fraction (0.9 = 90 %).
	MinTop1 float64 `json:"min_top1,omitempty"`
	// MaxF1Drop is the largest macro-F1 loss allowed against the Vs endpoint (fraction, 0.02 = 2 points).
	MaxF1Drop float64 `json:"max_f1_drop,omitempty"`
	// Gates are thresholds on any figure (gates.go), e.g. auc>=0.85.
	Gates []Gate `json:"gates,omitempty"`
}

// Validate checks t.
func (t Thresholds) Validate() error {
	switch {
	case t.MaxKLD < 0:
		return fmt.Errorf("eval: max KLD %g is negative", t.MaxKLD)
	case t.MinTop1 < 0 || t.MinTop1 > 1:
		return fmt.Errorf("eval: min top-1 %g outside [0, 1] (a fraction: 0.9 is 90 %%)", t.MinTop1)
	case t.MaxF1Drop < 0 || t.MaxF1Drop > 1:
		return fmt.Errorf("eval: max F1 drop %g outside [0, 1]", t.MaxF1Drop)
	}
	for _, g := range t.Gates {
		if _, err := ParseGate(g.String()); err != nil || (g.Op != ">=" && g.Op != "<=") {
			return fmt.Errorf("eval: gate %s is not valid", g)
		}
	}
	return nil
}

// check returns the reasons r fails t.
func (t Thresholds) check(r Result) []string {
	var why []string
	if d := r.Distribution; d != nil && d.NonFinite > 0 {
		// A broken model fails whatever the thresholds (none set included).
		why = append(why, fmt.Sprintf("the candidate's logits are NaN or infinite at %d of %d positions (first: %s)",
			d.NonFinite, d.NonFinite+d.Positions, d.FirstNonFinite))
	}
	if d := r.Distribution; d != nil {
		if t.MaxKLD > 0 && d.MeanKLD > t.MaxKLD {
			why = append(why, fmt.Sprintf("mean KLD %.6f above the %.6f allowed", d.MeanKLD, t.MaxKLD))
		}
		if t.MinTop1 > 0 && d.Top1 < t.MinTop1 {
			why = append(why, fmt.Sprintf("top-1 agreement %.2f %% below the %.2f %% required", 100*d.Top1, 100*t.MinTop1))
		}
	}
	if c := r.Comparison; c != nil && t.MaxF1Drop > 0 && c.MacroF1Drop > t.MaxF1Drop {
		why = append(why, fmt.Sprintf("macro-F1 %.4f is %.4f below the baseline's %.4f (at most %.4f allowed)",
			r.Task.MacroF1, c.MacroF1Drop, r.Vs.MacroF1, t.MaxF1Drop))
	}
	return append(why, checkGates(t.Gates, r)...)
}

// ErrGateFailed is matched (errors.Is) by the error of a Result that did not pass.
var ErrGateFailed = errors.New("eval: quality gate failed")

// GateError lists why a Result did not pass.
type GateError struct{ Reasons []string }

func (e *GateError) Error() string {
	return "eval: quality gate failed: " + strings.Join(e.Reasons, "; ")
}

// Is makes errors.Is(err, ErrGateFailed) true.
func (e *GateError) Is(target error) bool { return target == ErrGateFailed }

// CheckFailed classifies the error (pipeline.IsCheckFailed): the gate ran and said no.
func (e *GateError) CheckFailed() bool { return true }

// Err is nil when r passed, else a *GateError with the reasons (the CLI exits non-zero on it).
func (r Result) Err() error {
	if r.Pass {
		return nil
	}
	return &GateError{Reasons: r.Reasons}
}
