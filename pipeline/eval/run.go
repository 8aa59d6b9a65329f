package eval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// Options say which checks to run. A check runs when its main input is set: Dist.Reference for the
// distribution check, Task.Dataset for the task check (against Task.Vs too when its BaseURL is set),
// Sensitivity.Reference for the per-tensor sensitivity check (slow: one quantization and one distribution
// check per tensor group).
type Options struct {
	Dist        DistOptions        `json:"distribution,omitzero"`
	Task        TaskOptions        `json:"task,omitzero"`
	Sensitivity SensitivityOptions `json:"sensitivity,omitzero"`
	Thresholds  Thresholds         `json:"thresholds,omitzero"`
}

// Validate checks o without touching files or the network.
func (o Options) Validate() error {
	dist, task := o.Dist.Reference != "" || o.Dist.Candidate != "", o.Task.Dataset != ""
	if sens := o.Sensitivity; sens.Reference != "" {
		if sens.Prompts == "" || sens.Load == nil {
			return errors.New("eval: sensitivity check needs a prompt set and a model loader")
		}
		if t, ok := plan.DefaultType(sens.FileType); !ok || !t.Quantized() {
			return fmt.Errorf("eval: sensitivity check: file type %s is not a quantized type", sens.FileType)
		}
	} else if !dist && !task {
		return errors.New("eval: nothing to check: give a reference and candidate model, or a labelled dataset and an endpoint")
	}
	if dist {
		if err := o.Dist.Validate(); err != nil {
			return err
		}
	}
	if task {
		if err := o.Task.Validate(); err != nil {
			return err
		}
	}
	if err := o.Thresholds.Validate(); err != nil {
		return err
	}
	if !dist && (o.Thresholds.MaxKLD > 0 || o.Thresholds.MinTop1 > 0) {
		return errors.New("eval: KLD and top-1 thresholds need the distribution check (a reference and a candidate model)")
	}
	if o.Thresholds.MaxF1Drop > 0 && (!task || o.Task.Vs.BaseURL == "" && o.Task.Vs.File == "") {
		return errors.New("eval: an F1-drop threshold needs the task check against a baseline endpoint (vs)")
	}
	return nil
}

// Result is the outcome of an eval run, for the CLI, the workspace state and the model card.
type Result struct {
	Distribution *DistResult `json:"distribution,omitempty"`
	Task         *TaskResult `json:"task,omitempty"`
	Vs           *TaskResult `json:"vs,omitempty"`
	Comparison   *Comparison `json:"comparison,omitempty"`
	// Sensitivity ranks tensor groups by the KLD they cost (see Sensitivity).
	Sensitivity *SensitivityResult `json:"sensitivity,omitempty"`
	// Candidate says how the candidate GGUF was made: the importance matrix (file, sha256, dataset, chunks)
	// and the automatic mix it was quantized with, as its metadata records them.
	Candidate  *quantize.Provenance `json:"candidate,omitempty"`
	Thresholds Thresholds           `json:"thresholds,omitzero"`
	// Pass is true when every set threshold holds; Reasons says why not.
	Pass    bool     `json:"pass"`
	Reasons []string `json:"reasons,omitempty"`
	Seconds float64  `json:"seconds"`
}

// Run runs the checks o asks for and applies the gate. A failed gate is not an error: Result.Pass is false
// and Result.Err() returns the *GateError.
func Run(ctx context.Context, o Options, rep pipeline.Reporter) (Result, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	begin := time.Now()
	res := Result{Thresholds: o.Thresholds}
	if o.Dist.Reference != "" {
		d, err := Distributions(ctx, o.Dist, rep)
		if err != nil {
			return Result{}, err
		}
		res.Distribution = &d
		if f, err := gguf.OpenFile(o.Dist.Candidate); err == nil {
			p := quantize.ReadProvenance(f)
			f.Close()
			res.Candidate = &p
		}
		rep.Note(pipeline.Info, fmt.Sprintf("KLD mean %.6f p99 %.6f max %.6f, top-1 %.2f %%, PPL %.4f → %.4f over %d positions",
			d.MeanKLD, d.P99KLD, d.MaxKLD, 100*d.Top1, d.PPLReference, d.PPLCandidate, d.Positions))
	}
	if o.Task.Dataset != "" {
		if o.Task.Vs.BaseURL != "" || o.Task.Vs.File != "" {
			m, v, c, err := CompareEndpoints(ctx, o.Task, rep)
			if err != nil {
				return Result{}, err
			}
			res.Task, res.Vs, res.Comparison = &m, &v, &c
		} else {
			m, err := ScoreTask(ctx, o.Task, o.Task.Endpoint, rep)
			if err != nil {
				return Result{}, err
			}
			res.Task = &m
		}
		for _, t := range []*TaskResult{res.Task, res.Vs} {
			if t != nil && t.Failed > 0 {
				rep.Note(pipeline.Warn, fmt.Sprintf("%s: %d of %d requests failed (counted as wrong); first: %s",
					t.Endpoint, t.Failed, t.Items, t.Errors[0]))
			}
			if t != nil && t.Scores != nil && t.Scores.Unscored > 0 {
				rep.Note(pipeline.Warn, fmt.Sprintf("%s: no label probabilities for %d of %d items (failed, or the answer did not reach the labels)",
					t.Endpoint, t.Scores.Unscored, t.Items))
			}
		}
	}
	if o.Sensitivity.Reference != "" {
		s, err := Sensitivity(ctx, o.Sensitivity, rep)
		if err != nil {
			return Result{}, err
		}
		res.Sensitivity = &s
	}
	res.Reasons = o.Thresholds.check(res)
	res.Pass = len(res.Reasons) == 0
	res.Seconds = time.Since(begin).Seconds()
	return res, nil
}
