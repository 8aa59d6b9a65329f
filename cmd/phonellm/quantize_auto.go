package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize/auto"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/phonellm/phonellm/runtime/goengine"
	"github.com/spf13/cobra"
)

type autoFlags struct {
	in, prompts, out, imatrix string
	noImatrix, dryRun, force  bool
	size, phone, ladder       string
	bpw, maxKLD               float64
	bands, tokens, window     int
	ctx, parallel, threads    int
}

func newQuantizeAutoCmd(a *app) *cobra.Command {
	var fl autoFlags
	cmd := &cobra.Command{
		Use:   "auto (--size SIZE | --bpw N | --fit PHONE | --max-kld X) [--in F16.gguf] [--prompts FILE] [-o OUT.gguf]",
		Short: "Choose per-tensor types for a size, a phone or a quality bound, from measured sensitivities",
		Long: `Measure how much each group of tensors (the output head, and per band of layers the attention projections,
attn_v, Qwen3.5's attn_qkv and ssm_out, the feed-forward matrices, …) adds to the KL divergence when it alone is
quantized lower, on the calibration prompts against the unquantized model; then choose one type per group: the
least predicted KLD whose file fits --size (bytes; k/M/G suffixes, or KiB/MiB/GiB), --bpw, or the memory of a
--fit phone profile with the workspace's context and slots — or the smallest file whose predicted KLD stays
under --max-kld. The mix is printed as a table and written as --tensor-type rules into the file's metadata
(phonellm.quantize.tensor_types), so 'phonellm quantize TYPE --tensor-type …' reproduces it; the file is an
ordinary GGUF of llama.cpp's types. The workspace's importance matrix is used as quantize uses it.

Measuring quantizes and evaluates the model once per group and type (the reference's logits are computed once):
minutes for a small model, hours for a large one. The sensitivities are kept next to the output and reused when
only the target changes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runQuantizeAuto(a, fl) },
	}
	f := cmd.Flags()
	f.StringVar(&fl.size, "size", "", "largest output file (e.g. 478000000, 480MB, 1.5GiB)")
	f.Float64Var(&fl.bpw, "bpw", 0, "largest size in bits per weight")
	f.StringVar(&fl.phone, "fit", "", "phone profile the model must fit, with --ctx and --parallel (e.g. 16gb)")
	f.Float64Var(&fl.maxKLD, "max-kld", 0, "smallest mix whose predicted mean KLD stays under this")
	f.StringVar(&fl.in, "in", "", "unquantized GGUF (F16/BF16/F32; default: the workspace's converted GGUF)")
	f.StringVar(&fl.prompts, "prompts", "", "calibration prompts (default: phonellm.yaml's imatrix data)")
	f.StringVarP(&fl.out, "out", "o", "", "output file (default <name>-auto.gguf)")
	f.StringVar(&fl.imatrix, "imatrix", "", "importance matrix to quantize with (default: the workspace's)")
	f.BoolVar(&fl.noImatrix, "no-imatrix", false, "quantize without an importance matrix")
	f.StringVar(&fl.ladder, "ladder", "", "types to measure, comma-separated (default q2_k,q3_k,iq4_xs,q4_k,q5_k,q6_k,q8_0)")
	f.IntVar(&fl.bands, "bands", 4, "layer bands per tensor kind")
	f.IntVar(&fl.tokens, "tokens", 1024, "positions evaluated per measurement")
	f.IntVar(&fl.window, "window", 2048, "evaluation window in tokens")
	f.IntVar(&fl.ctx, "ctx", 0, "with --fit: context tokens per slot (default: the workspace's, else 4096)")
	f.IntVar(&fl.parallel, "parallel", 0, "with --fit: parallel slots (default: the workspace's, else 1)")
	f.IntVar(&fl.threads, "threads", 0, "threads (default: all cores)")
	f.BoolVar(&fl.dryRun, "dry-run", false, "measure and choose, but write no model")
	f.BoolVar(&fl.force, "force", false, "measure and quantize again even when up to date")
	return cmd
}

// parseSize reads a byte count with an optional unit: k, M, G, T (powers of 1000; KB, MB … too) or KiB, MiB,
// GiB, TiB (powers of 1024).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	mul := map[string]float64{"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}[unit]
	if mul == 0 || v*mul > 1<<62 {
		return 0, fmt.Errorf("invalid size %q (units: k, M, G, T or KiB, MiB, GiB, TiB)", s)
	}
	return int64(v * mul), nil
}

func runQuantizeAuto(a *app, fl autoFlags) error {
	var t auto.Target
	var err error
	n := 0
	if fl.size != "" {
		if t.Size, err = parseSize(fl.size); err != nil {
			return usageError("--size: %v", err)
		}
		n++
	}
	if fl.bpw != 0 {
		t.BPW = fl.bpw
		n++
	}
	if fl.maxKLD != 0 {
		t.MaxKLD = fl.maxKLD
		n++
	}
	ws, err := a.findWorkspace()
	if err != nil {
		return err
	}
	if fl.phone != "" {
		p, err := fit.Builtin().Lookup(fl.phone)
		if err != nil {
			return usageError("--fit: %v", err)
		}
		t.Fit = &p
		t.FitOptions = fit.Options{Ctx: fl.ctx, Parallel: fl.parallel}
		if ws != nil && t.FitOptions.Ctx == 0 {
			t.FitOptions.Ctx = ws.Project.Context
		}
		if ws != nil && t.FitOptions.Parallel == 0 {
			t.FitOptions.Parallel = ws.Project.Parallel
		}
		n++
	}
	if n != 1 {
		return usageError("give exactly one target: --size, --bpw, --fit or --max-kld")
	}
	ref, from := fl.in, "--in"
	if ref == "" && ws != nil {
		ref, from = workspaceGGUF(ws)
	}
	if ref == "" {
		return usageError("no unquantized model: pass --in F16.gguf (in a workspace, run 'phonellm convert' first)")
	}
	if err := checkGGUFInput(ref); err != nil {
		return err
	}
	promptsPath := fl.prompts
	if promptsPath == "" && ws != nil && ws.Project.Imatrix != "" {
		promptsPath = ws.Path(ws.Project.Imatrix)
	}
	if promptsPath == "" {
		return usageError("no calibration prompts: pass --prompts FILE, or set imatrix: in phonellm.yaml")
	}
	prompts, err := eval.ReadPrompts(promptsPath)
	if err != nil {
		return err
	}
	var ladder []gguf.Type
	if fl.ladder != "" {
		for _, name := range strings.Split(fl.ladder, ",") {
			ty, err := plan.ParseTargetType(strings.TrimSpace(name))
			if err != nil || !ty.Quantized() {
				return usageError("--ladder: %q is not a quantized type", name)
			}
			ladder = append(ladder, ty)
		}
	}
	threads := fl.threads
	if threads == 0 {
		fmt.Sscan(getenv("PHONELLM_THREADS", "0"), &threads)
	}
	im, err := quantizeImatrix(a, ws, quantizeFlags{imatrix: fl.imatrix, noImatrix: fl.noImatrix}, ref, gguf.FileTypeQ8_0)
	if err != nil {
		return err
	}
	outDir := filepath.Dir(ref)
	if ws != nil {
		outDir = ws.Root
	}
	def := filepath.Join(outDir, ggufName(a, ref)+"-auto.gguf")
	out := fl.out
	oneOff := fl.in != "" || oneOffOut(out, def)
	if out == "" {
		out = def
	}
	inputs := []workspace.Input{}
	for _, in := range []struct{ name, path string }{{"gguf", ref}, {"prompts", promptsPath}, {"imatrix", im.path}} {
		if in.path == "" {
			continue
		}
		i, err := workspace.NewInput(in.name, in.path, "")
		if err != nil {
			return err
		}
		inputs = append(inputs, i)
	}
	load := func(ctx context.Context, path string) (eval.LogitModel, error) {
		return goengine.Load(ctx, goengine.Options{Path: path, ContextLength: fl.window, Threads: threads})
	}
	o := auto.Options{
		Measure: auto.MeasureOptions{Reference: ref, Prompts: prompts, Load: load, Ladder: ladder, Bands: fl.bands,
			Tokens: fl.tokens, Window: fl.window, WorkDir: filepath.Dir(out), Threads: threads},
		Target: t, Out: out, ImatrixName: im.name, Cache: out + ".sensitivity.json", DryRun: fl.dryRun,
	}
	run := func() (auto.Result, []pipeline.Artifact, error) {
		imx, err := im.load()
		if err != nil {
			return auto.Result{}, nil, err
		}
		defer imx.Close()
		o.Measure.Imatrix = imx
		if fl.force {
			o.Cache = ""
		}
		r, err := auto.Run(a.ctx, o, a.reporter())
		if err != nil {
			return r, nil, quantizeErr(err)
		}
		return r, r.Quantize.Artifacts, nil
	}
	var res auto.Result
	if fl.dryRun {
		if res, _, err = run(); err != nil {
			return err
		}
	} else {
		opts := map[string]any{"auto": t.String(), "out": out, "ladder": fl.ladder, "bands": fl.bands, "tokens": fl.tokens,
			"window": fl.window, "imatrix": im.name}
		step := workspace.Step{Stage: "quantize", Inputs: inputs, Options: opts, OneOff: oneOff, Force: fl.force}
		skipped, err := runStage(a, ws, step, map[string]string{"gguf": from}, &res, run)
		if err != nil {
			return err
		}
		if !skipped {
			afterQuantize(a, ws, &res.Quantize)
		}
	}
	return a.io.Result(res, func(w io.Writer) { printAuto(w, res) })
}

func printAuto(w io.Writer, r auto.Result) {
	if m := r.Measurement; m != nil {
		how := "measured"
		if !r.Measured {
			how = "read from the cache"
		}
		fmt.Fprintf(w, "sensitivities %s: %d groups, %d trials on %d positions; all-Q8_0 KLD %.6f\n", how, len(m.Groups), m.Trials, m.Positions, m.BaseKLD)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "group\ttensors\ttype\tsize\tpredicted ΔKLD")
	var total int64
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.6f\n", row.Group, row.Tensors, row.Type, ui.HumanBytes(row.Bytes), row.DeltaKLD)
		total += row.Bytes
	}
	tw.Flush()
	fmt.Fprintf(w, "target %s: groups %s, predicted mean KLD %.6f (%s)\n", r.Target, ui.HumanBytes(total), r.PredictedKLD, r.FileType)
	if len(r.Quantize.Artifacts) > 0 {
		printQuantize(w, r.Quantize, false)
		fmt.Fprintf(w, "  %d --tensor-type rules in %s\n", len(r.Rules), auto.KeyTensorTypes)
	}
}
