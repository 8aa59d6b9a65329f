package auto

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
	"github.com/phonellm/phonellm/runtime/goengine"
)

func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	os.Exit(m.Run())
}

func goLoader(ctx context.Context, path string) (eval.LogitModel, error) {
	return goengine.Load(ctx, goengine.Options{Path: path, Threads: 1, ContextLength: 512, BatchSize: 128})
}

// tinyF16 converts a tiny preset to an F16 GGUF.
func tinyF16(t *testing.T, preset string) string {
	t.Helper()
	spec, _ := tinymodel.Preset(preset)
	spec.MTPLayers, spec.Vision = 0, false
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "hf")
	if err := tinymodel.Generate(ckpt, spec); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, preset+"-f16.gguf")
	if _, err := convert.Run(context.Background(), convert.Options{Model: ckpt, Out: out, OutType: convert.OutF16}, pipeline.Discard); err != nil {
		t.Fatal(err)
	}
	return out
}

var prompts = []eval.Prompt{
	{Text: "The bank flagged the payment because the account is new and the amount is large."},
	{Text: "Risk review: the beneficiary changed twice in one week and the device is unknown."},
	{Text: "Numbers like 12, 345 and 6789 appear in invoices; the customer asked for a higher limit."},
}

// TestAutoEndToEnd measures a tiny qwen35 model (hybrid layers: attn_qkv, ssm_out and attention groups), picks
// mixes for a size and a KLD bound, and checks: the file fits the size, its metadata carries the rules, the
// target and the prediction, quantizing again with those rules as --tensor-type gives the same bytes, the
// cached measurement is reused, and upstream llama.cpp loads the file.
func TestAutoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("quantizes and runs a tiny model many times")
	}
	ref := tinyF16(t, "qwen35")
	work := t.TempDir()
	mo := MeasureOptions{Reference: ref, Prompts: prompts, Load: goLoader, Ladder: []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ6_K},
		Bands: 2, Tokens: 128, WorkDir: work, Threads: 1}
	// The size of llama-quantize's Q4_K_M for the same model is the budget.
	src, err := quantize.OpenGGUF(ref)
	if err != nil {
		t.Fatal(err)
	}
	q4 := filepath.Join(work, "q4km.gguf")
	q4res, err := quantize.Run(context.Background(), quantize.Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: q4}, nil)
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	size := q4res.Artifacts[0].Size
	out := filepath.Join(work, "auto.gguf")
	cache := filepath.Join(work, "sens.json")
	res, err := Run(context.Background(), Options{Measure: mo, Target: Target{Size: size}, Out: out, Cache: cache}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Measurement
	kinds := map[string]bool{}
	for _, g := range m.Groups {
		kind := g.Name[strings.LastIndex(g.Name, " ")+1:]
		kinds[kind] = true
		if len(g.Choices) != 3 {
			t.Errorf("group %s: %d choices", g.Name, len(g.Choices))
		}
	}
	for _, k := range []string{"output", "attn", "attn_v", "attn_qkv", "attn_gate", "ssm_out", "ffn_gate_up", "ffn_down"} {
		if !kinds[k] {
			t.Errorf("no %s group (groups: %v)", k, kinds)
		}
	}
	if !res.Measured || m.Trials != 1+2*len(m.Groups) || m.BaseKLD <= 0 || m.Positions == 0 {
		t.Fatalf("measurement: measured %v, %d trials, base %g, %d positions", res.Measured, m.Trials, m.BaseKLD, m.Positions)
	}
	art := res.Quantize.Artifacts[0]
	if art.Size > size {
		t.Fatalf("file of %d bytes for a budget of %d", art.Size, size)
	}
	t.Logf("Q4_K_M %d bytes; auto %d bytes, %s, predicted KLD %.5f (all-Q8_0 %.5f)", size, art.Size, res.FileType, res.PredictedKLD, m.BaseKLD)
	for _, r := range res.Rows {
		t.Logf("  %-22s %-5s %8d B  ΔKLD %.5f", r.Group, r.Type, r.Bytes, r.DeltaKLD)
	}

	// The metadata reproduces the file.
	f, err := gguf.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	pv := quantize.ReadProvenance(f)
	f.Close()
	if pv.Mix == nil || len(pv.Mix.Rules) != len(m.Groups) || pv.Mix.Target != res.Target || pv.Mix.PredictedKLD <= 0 {
		t.Fatalf("provenance %+v", pv.Mix)
	}
	var rules []plan.TensorTypeRule
	for _, s := range pv.Mix.Rules {
		r, err := plan.ParseTensorTypeRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	ft, _ := gguf.ParseFileType(res.FileType)
	src, _ = quantize.OpenGGUF(ref)
	again := filepath.Join(work, "again.gguf")
	_, err = quantize.Run(context.Background(), quantize.Options{Source: src, FileType: ft, Out: again, Overrides: plan.Overrides{TensorTypes: rules},
		Meta: []gguf.KV{{Key: KeyTensorTypes, Value: gguf.Strings(pv.Mix.Rules)}, {Key: KeyTarget, Value: gguf.String(pv.Mix.Target)},
			{Key: KeyPredictedKLD, Value: gguf.Float32(float32(pv.Mix.PredictedKLD))}}}, nil)
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("quantizing with the recorded rules does not reproduce the file")
	}

	// Another target reuses the measurement; a KLD bound gives the smallest mix that meets it.
	res2, err := Run(context.Background(), Options{Measure: mo, Target: Target{MaxKLD: m.BaseKLD + 0.5*(res.PredictedKLD-m.BaseKLD)}, DryRun: true, Cache: cache}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Measured || res2.PredictedKLD > m.BaseKLD+0.5*(res.PredictedKLD-m.BaseKLD)+1e-12 {
		t.Errorf("max-kld: measured again %v, predicted %g", res2.Measured, res2.PredictedKLD)
	}
	// A phone: the largest mix whose estimated memory fits a profile sized between the Q4_K_M and Q8_0 files.
	q4f, _ := gguf.OpenFile(q4)
	est, err := fit.Estimate(q4f, fit.Options{Ctx: 512})
	q4f.Close()
	if err != nil {
		t.Fatal(err)
	}
	phone := fit.Profile{Name: "test", UsableBytes: est.Total + 300_000}
	fitOut := filepath.Join(work, "fit.gguf")
	rf, err := Run(context.Background(), Options{Measure: mo, Target: Target{Fit: &phone, FitOptions: fit.Options{Ctx: 512}}, Out: fitOut, Cache: cache}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ff, _ := gguf.OpenFile(fitOut)
	got, err := fit.Estimate(ff, fit.Options{Ctx: 512})
	ff.Close()
	if err != nil || got.Total > phone.UsableBytes || rf.Quantize.Artifacts[0].Size <= size {
		t.Errorf("fit target: needs %d of %d (%v); file %d bytes, Q4_K_M %d", got.Total, phone.UsableBytes, err, rf.Quantize.Artifacts[0].Size, size)
	}
	if rf.Target != "fit test" || rf.Measured {
		t.Errorf("fit result: target %q, measured again %v", rf.Target, rf.Measured)
	}

	// An impossible size is a failed check, not a crash.
	if _, err := Run(context.Background(), Options{Measure: mo, Target: Target{Size: 1000}, DryRun: true, Cache: cache}, nil); err == nil || !pipeline.IsCheckFailed(err) {
		t.Errorf("size 1000: %v", err)
	}

	// Upstream llama.cpp loads the mix.
	if testing.Short() {
		return
	}
	o := oracle.Shared(t)
	if _, err := o.Load(out); err != nil {
		t.Fatalf("llama.cpp rejects the automatic mix: %v", err)
	}
	if toks, err := o.Greedy(out, []int{5, 77, 301, 12}, 3); err != nil || len(toks) != 3 {
		t.Errorf("greedy on the mix: %v %v", toks, err)
	}
	o.Unload(out)
}
