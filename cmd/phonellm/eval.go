package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/phonellm/phonellm/runtime/goengine"
	"github.com/spf13/cobra"
)

func init() { register("run", newEvalCmd) }

func newEvalCmd(a *app) *cobra.Command {
	var o eval.Options
	var endpoint, vs, model, vsModel, keyEnv, vsKeyEnv string
	var ctxLen, threads int
	var labels string
	var gates []string
	cmd := &cobra.Command{
		Use:   "eval [--reference F16.gguf --candidate Q4_K_M.gguf --prompts FILE] [--dataset TASK.jsonl --endpoint URL [--vs URL]]",
		Short: "Quality gate: KL divergence vs the reference model, and task accuracy/F1 on labelled prompts",
		Long: `Two checks, each optional, and a gate over both.

Distribution: run the reference GGUF (F16/BF16, or F32 for small models) and the candidate (e.g. Q4_K_M) over a
text or JSONL prompt set and compare their next-token distributions at every position, streaming (one window of
logits at a time, no logits file): KL divergence (mean, median, p99, max), top-1 agreement, perplexity of both.

Task: score an OpenAI-compatible endpoint (phonellm serve, the gateway, or another provider) on labelled JSONL
({"messages":[…], "label":"5"}) with an answer pattern (default RISK_LEVEL:\s*(\d+)): accuracy, per-class
precision/recall/F1, macro-F1, latency p50/p95. --vs scores a second endpoint side by side. --save FILE keeps
the endpoint's answers; a file saved so stands in for --endpoint or --vs later (same dataset).

Scores: with --labels 1,2,3,4,5 every answer is one of "RISK_LEVEL: 1" … "RISK_LEVEL: 5" (--answer) and the
endpoint's log-probabilities give each item a probability per label: one request held to the answers by a GBNF
grammar (--constrain grammar: phonellm serve and llama-server; choices: phonellm's extension; none: any server
with logprobs) read where the answers part, or with --score-method each one forced request per label. The most
probable label is the prediction, and eval reports the Brier score, log-loss, expected calibration error (with a
reliability table), ROC-AUC for "high risk" (--high-risk 4: that label and above) and precision/recall/FPR when
an item is flagged at P(high risk) >= --cutoff.

Thresholds (--max-kld, --min-top1, --max-f1-drop, and --gate on any figure) make eval exit 4 when they fail, so
ship can run it first. --gate takes FIGURE>=VALUE or FIGURE<=VALUE, repeatable; a figure the run did not
produce fails its gate. The figures:

` + eval.Metrics(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Dist.Reference == "" && o.Task.Dataset == "" {
				return usageError("nothing to evaluate: give --reference/--candidate/--prompts and/or --dataset/--endpoint")
			}
			if o.Dist.Reference != "" {
				if o.Dist.Candidate == "" {
					p, err := pickCandidate(a, o.Dist.Reference)
					if err != nil {
						return err
					}
					o.Dist.Candidate = p
				}
				o.Dist.Load = func(ctx context.Context, path string) (eval.LogitModel, error) {
					return goengine.Load(ctx, goengine.Options{Path: path, ContextLength: ctxLen, Threads: threads})
				}
			}
			if o.Task.Dataset != "" {
				if endpoint == "" {
					return usageError("--dataset needs --endpoint URL (or an answers file saved with --save)")
				}
				o.Task.Endpoint = endpointOf(endpoint, model, os.Getenv(keyEnv))
				if vs != "" {
					o.Task.Vs = endpointOf(vs, vsModel, os.Getenv(vsKeyEnv))
				}
			}
			if labels != "" {
				o.Task.Scores.Labels = strings.Split(labels, ",")
				for i, l := range o.Task.Scores.Labels {
					o.Task.Scores.Labels[i] = strings.TrimSpace(l)
				}
			}
			if err := o.Task.Scores.Validate(); err != nil {
				return usageError("%v", err)
			}
			for _, g := range gates {
				gate, err := eval.ParseGate(g)
				if err != nil {
					return usageError("--gate: %v", err)
				}
				o.Thresholds.Gates = append(o.Thresholds.Gates, gate)
			}
			res, err := eval.Run(a.ctx, o, a.reporter())
			if err != nil {
				var ce *eval.CandidateError
				if errors.As(err, &ce) {
					return withCode(exitBadInput, err, "the gate compares a quantized candidate with its float reference: --candidate MODEL-Q4_K_M.gguf")
				}
				return err
			}
			if ws, _ := a.findWorkspace(); ws != nil {
				key := workspace.Key(map[string]string{"candidate": o.Dist.Candidate, "dataset": o.Task.Dataset}, map[string]any{"endpoint": endpoint, "vs": vs})
				if err := ws.Record(workspace.Record{Stage: "eval", Key: key, Options: map[string]any{"result": res}}); err != nil {
					a.io.Warnf("workspace state not updated: %v", err)
				}
			}
			if err := a.io.Result(res, func(w io.Writer) { printEval(w, res) }); err != nil {
				return err
			}
			if gerr := res.Err(); gerr != nil {
				if errors.Is(gerr, eval.ErrGateFailed) {
					return withCode(exitVerdict, gerr, "")
				}
				return gerr
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dist.Reference, "reference", "", "reference GGUF (F16/BF16/F32)")
	f.StringVar(&o.Dist.Candidate, "candidate", "", "candidate GGUF (default: the workspace's newest quantized model that is not the reference)")
	f.StringVar(&o.Dist.Prompts, "prompts", "", "prompt set: text, one prompt per blank-line-separated paragraph, or .jsonl with text or messages")
	f.IntVar(&ctxLen, "ctx", 8192, "evaluation window in tokens (a 7k-token prompt needs 8192)")
	f.IntVar(&threads, "threads", 0, "engine threads (default: all cores)")
	f.StringVar(&o.Task.Dataset, "dataset", "", "labelled JSONL: {\"messages\":[…], \"label\":\"5\"}")
	f.StringVar(&o.Task.Pattern, "pattern", "", `answer pattern with one capture group (default RISK_LEVEL:\s*(\d+))`)
	f.StringVar(&endpoint, "endpoint", "", "OpenAI-compatible base URL to score (e.g. http://127.0.0.1:8090)")
	f.StringVar(&model, "model", "", "model name to request from --endpoint")
	f.StringVar(&keyEnv, "api-key-env", "PHONELLM_API_KEY", "environment variable with --endpoint's API key")
	f.StringVar(&vs, "vs", "", "second endpoint to score side by side")
	f.StringVar(&vsModel, "vs-model", "", "model name to request from --vs")
	f.StringVar(&vsKeyEnv, "vs-api-key-env", "", "environment variable with --vs's API key")
	f.IntVar(&o.Task.Concurrency, "concurrency", 4, "requests in flight per endpoint")
	f.Float64Var(&o.Thresholds.MaxKLD, "max-kld", 0, "fail when the mean KL divergence is above this (nats)")
	f.Float64Var(&o.Thresholds.MinTop1, "min-top1", 0, "fail when top-1 agreement is below this fraction (0.9 = 90 %)")
	f.Float64Var(&o.Thresholds.MaxF1Drop, "max-f1-drop", 0, "fail when macro-F1 is this much below --vs's (fraction)")
	f.StringVar(&o.Task.Save, "save", "", "write --endpoint's answers (and scores) to this JSONL file, for a later --vs FILE")
	f.StringVar(&labels, "labels", "", "the answers' labels, comma-separated (e.g. 1,2,3,4,5): read their probabilities and report calibration")
	f.StringVar(&o.Task.Scores.Answer, "answer", "", `a label's answer, {label} replaced (default "RISK_LEVEL: {label}")`)
	f.StringVar(&o.Task.Scores.Method, "score-method", "", "how to read the labels' probabilities: logprobs (one request) or each (one forced request per label)")
	f.StringVar(&o.Task.Scores.Constrain, "constrain", "", "how score requests hold the answer: grammar (default), choices (phonellm) or none")
	f.StringVar(&o.Task.Scores.HighRisk, "high-risk", "", "lowest label counted as high risk for ROC-AUC and the cutoff (default: the second-highest)")
	f.Float64Var(&o.Task.Scores.Cutoff, "cutoff", 0, "flag an item as high risk when P(high risk) is at least this (default 0.5)")
	f.IntVar(&o.Task.Scores.Bins, "bins", 0, "bins of the expected calibration error (default 10)")
	f.StringArrayVar(&gates, "gate", nil, "fail (exit 4) unless FIGURE>=VALUE or FIGURE<=VALUE holds, e.g. auc>=0.85 (repeatable; figures listed above)")
	return cmd
}

// pickCandidate is the candidate when --candidate is not given: the workspace's newest GGUF that is quantized
// and is not the reference (eval.PickCandidate), never a float model or the reference itself.
func pickCandidate(a *app, reference string) (string, error) {
	ws, err := a.findWorkspace()
	if err != nil {
		return "", err
	}
	if ws == nil {
		return "", usageError("no --candidate and no workspace here: give the quantized model to check (--candidate MODEL-Q4_K_M.gguf)")
	}
	var models []string // newest first; one-off outputs (-o elsewhere) are not the workspace's
	for i := len(ws.State.Records) - 1; i >= 0; i-- {
		if ws.State.Records[i].OneOff {
			continue
		}
		for _, art := range ws.State.Records[i].Artifacts {
			if art.Kind == "gguf" {
				models = append(models, ws.Path(art.Path))
			}
		}
	}
	pick, skipped, err := eval.PickCandidate(reference, models)
	if err != nil {
		var ce *eval.CandidateError
		if errors.As(err, &ce) {
			return "", withCode(exitUsage, err, "quantize first ('phonellm quantize q4_k_m') or give --candidate MODEL.gguf")
		}
		return "", err
	}
	if a.io.Verbose {
		for _, s := range skipped {
			a.io.Printf("candidate: skipped %s\n", s)
		}
	}
	a.io.Printf("candidate: %s (the workspace's newest quantized model)\n", pick)
	return pick, nil
}

// endpointOf reads --endpoint or --vs: an http(s) URL, or an answers file saved with --save.
func endpointOf(v, model, key string) eval.Endpoint {
	if strings.HasPrefix(v, "http://") || strings.HasPrefix(v, "https://") {
		return eval.Endpoint{BaseURL: v, Model: model, APIKey: key}
	}
	return eval.Endpoint{File: v, Model: model}
}

func printEval(w io.Writer, r eval.Result) {
	if d := r.Distribution; d != nil {
		fmt.Fprintf(w, "distribution: %s vs %s (%d positions, %d prompts)\n", d.Candidate, d.Reference, d.Positions, d.Prompts)
		if d.NonFinite > 0 {
			fmt.Fprintf(w, "  candidate logits NaN/Inf at %d positions (first: %s)\n", d.NonFinite, d.FirstNonFinite)
		}
		fmt.Fprintf(w, "  KLD mean %.6f  median %.6f  p99 %.6f  max %.6f\n", d.MeanKLD, d.MedianKLD, d.P99KLD, d.MaxKLD)
		fmt.Fprintf(w, "  top-1 agreement %.2f %%, RMS Δp %.4f, perplexity %.3f → %.3f\n", 100*d.Top1, d.RMSDeltaTop, d.PPLReference, d.PPLCandidate)
		if c := r.Candidate; c != nil {
			if im := c.Imatrix; im != nil {
				fmt.Fprintf(w, "  candidate %s, importance matrix %s (sha256 %s, dataset %s, %d chunks)\n", c.FileType, im.File, im.SHA256, im.Dataset, im.Chunks)
			}
			if m := c.Mix; m != nil {
				fmt.Fprintf(w, "  automatic mix for %s: %d --tensor-type rules, predicted KLD %.6f (measured %.6f)\n", m.Target, len(m.Rules), m.PredictedKLD, d.MeanKLD)
			}
		}
	}
	for _, t := range []*eval.TaskResult{r.Task, r.Vs} {
		if t == nil {
			continue
		}
		fmt.Fprintf(w, "task: %s: accuracy %.3f, macro-F1 %.3f, %d/%d correct, %d unparsable, %d failed, latency p50 %.0f ms p95 %.0f ms\n",
			t.Endpoint, t.Accuracy, t.MacroF1, t.Correct, t.Items, t.Unparsable, t.Failed, t.LatencyP50Ms, t.LatencyP95Ms)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  class\tprecision\trecall\tF1\tsupport")
		for _, c := range t.Classes {
			fmt.Fprintf(tw, "  %s\t%.3f\t%.3f\t%.3f\t%d\n", c.Label, c.Precision, c.Recall, c.F1, c.Support)
		}
		tw.Flush()
		if s := t.Scores; s != nil {
			fmt.Fprintf(w, "  scores: %s\n", s)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  confidence\titems\tmean confidence\taccuracy")
			for _, b := range s.Reliability {
				if b.Count > 0 {
					fmt.Fprintf(tw, "  %.2f-%.2f\t%d\t%.3f\t%.3f\n", b.Low, b.High, b.Count, b.Confidence, b.Accuracy)
				}
			}
			tw.Flush()
		}
	}
	if c := r.Comparison; c != nil {
		fmt.Fprintf(w, "vs: agreement %.3f, accuracy Δ %+.3f, macro-F1 drop %+.3f\n", c.Agreement, c.AccuracyDelta, c.MacroF1Drop)
		if s := c.Scores; s != nil {
			auc := "n/a"
			if s.AUCDelta != nil {
				auc = fmt.Sprintf("%+.4f", *s.AUCDelta)
			}
			fmt.Fprintf(w, "vs scores: same most probable label %.3f, mean total variation %.4f, Brier Δ %+.4f, ECE Δ %+.4f, log-loss Δ %+.4f, AUC Δ %s (%d items)\n",
				s.Agreement, s.MeanTV, s.BrierDelta, s.ECEDelta, s.LogLossDelta, auc, s.Items)
		}
	}
	if r.Pass {
		fmt.Fprintln(w, "gate: pass")
	} else {
		fmt.Fprintf(w, "gate: FAIL: %v\n", r.Reasons)
	}
}
