package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() { register("build", newQuantizeCmd) }

type quantizeFlags struct {
	in, model, out        string
	loras                 []string
	threads               int
	dryRun, pure, requant bool
	outputType, embdType  string
	tensorTypes           []string
	keepMTP, force        bool
}

func newQuantizeCmd(a *app) *cobra.Command {
	var fl quantizeFlags
	cmd := &cobra.Command{
		Use:   "quantize [TYPE] [--in F16.gguf | --model DIR] [-o OUT.gguf]",
		Short: "Quantize to GGUF (q4_k_m, q8_0, …) with llama-quantize's per-tensor types, bit for bit",
		Long: `Quantize a model with the per-tensor type plan and the reference kernels of llama-quantize (no importance
matrix): the output's tensor bytes equal llama-quantize's for the same input and type.

The input is an F32/F16/BF16 GGUF (--in), a Hugging Face checkpoint converted on the fly without an intermediate
file (--model, optionally with --lora adapters merged on the fly), or, with neither, the workspace's newest
converted GGUF or merged checkpoint, else its base model with its adapters merged on the fly. TYPE defaults to
the workspace's quant (phonellm.yaml).

Types: ` + strings.Join(fileTypeNames(), ", ") + ` (case-insensitive).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			} else {
				ws, err := a.findWorkspace()
				if err != nil {
					return err
				}
				if ws == nil || ws.Project.Quant == "" {
					return usageError("no TYPE given and no workspace default (quant: in phonellm.yaml); valid types: %s", strings.Join(fileTypeNames(), ", "))
				}
				name = ws.Project.Quant
			}
			ft, err := parseQuantType(name)
			if err != nil {
				return err
			}
			ov, err := fl.overrides()
			if err != nil {
				return err
			}
			return runQuantize(a, fl, ft, ov)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.in, "in", "", "input GGUF (F32, F16 or BF16; quantized only with --allow-requantize)")
	f.StringVar(&fl.model, "model", "", "input Hugging Face checkpoint folder, converted on the fly")
	f.StringArrayVar(&fl.loras, "lora", nil, "merge a PEFT LoRA adapter on the fly (repeatable; PATH or PATH:WEIGHT)")
	f.StringVarP(&fl.out, "out", "o", "", "output file (default <name>-<TYPE>.gguf)")
	f.IntVar(&fl.threads, "threads", 0, "worker threads (default: all cores, or PHONELLM_THREADS)")
	f.BoolVar(&fl.dryRun, "dry-run", false, "print the per-tensor plan and sizes; write nothing")
	f.BoolVar(&fl.pure, "pure", false, "no mixture rules: every quantizable tensor gets the base type")
	f.BoolVar(&fl.requant, "allow-requantize", false, "allow re-quantizing already quantized tensors (loses quality)")
	f.StringVar(&fl.outputType, "output-tensor-type", "", "type for output.weight")
	f.StringVar(&fl.embdType, "token-embedding-type", "", "type for token_embd.weight")
	f.StringArrayVar(&fl.tensorTypes, "tensor-type", nil, "REGEX=TYPE override for matching tensors (repeatable, first match wins)")
	f.BoolVar(&fl.keepMTP, "keep-mtp", false, "with --model: keep the Qwen3.5 MTP block")
	f.BoolVar(&fl.force, "force", false, "quantize again even when the output is up to date")
	return cmd
}

func fileTypeNames() []string {
	var names []string
	for _, ft := range gguf.FileTypes() {
		if _, ok := plan.DefaultType(ft); ok {
			names = append(names, strings.ToLower(ft.String()))
		}
	}
	return names
}

// parseQuantType parses a quantization type name, suggesting the closest valid one for a near miss (q4km →
// q4_k_m).
func parseQuantType(name string) (gguf.FileType, error) {
	names := fileTypeNames()
	ft, err := gguf.ParseFileType(name)
	if err == nil {
		if _, ok := plan.DefaultType(ft); ok {
			return ft, nil
		}
		return 0, usageError("quantization type %s is not supported (valid: %s)", ft, strings.Join(names, ", "))
	}
	if s := didYouMean(name, names); s != "" {
		return 0, usageError("unknown quantization type %q; did you mean %s? (valid: %s)", name, s, strings.Join(names, ", "))
	}
	return 0, usageError("unknown quantization type %q (valid: %s)", name, strings.Join(names, ", "))
}

func (fl quantizeFlags) overrides() (plan.Overrides, error) {
	ov := plan.Overrides{Pure: fl.pure, AllowRequantize: fl.requant}
	if fl.outputType != "" {
		t, err := plan.ParseTargetType(fl.outputType)
		if err != nil {
			return ov, usageError("--output-tensor-type: %v", err)
		}
		ov.OutputType = &t
	}
	if fl.embdType != "" {
		t, err := plan.ParseTargetType(fl.embdType)
		if err != nil {
			return ov, usageError("--token-embedding-type: %v", err)
		}
		ov.TokenEmbdType = &t
	}
	for _, s := range fl.tensorTypes {
		r, err := plan.ParseTensorTypeRule(s)
		if err != nil {
			return ov, usageError("--tensor-type: %v", err)
		}
		ov.TensorTypes = append(ov.TensorTypes, r)
	}
	return ov, nil
}

func runQuantize(a *app, fl quantizeFlags, ft gguf.FileType, ov plan.Overrides) error {
	if fl.in != "" && (fl.model != "" || len(fl.loras) > 0) {
		return usageError("--in cannot be combined with --model or --lora (LoRA merges need the 16-bit checkpoint)")
	}
	threads := fl.threads
	if threads == 0 {
		fmt.Sscan(getenv("PHONELLM_THREADS", "0"), &threads)
	}
	ws, err := a.findWorkspace()
	if err != nil {
		return err
	}
	inGGUF, from, explicit := fl.in, "--in", fl.in != ""
	if !explicit && fl.model == "" && len(fl.loras) == 0 && ws != nil {
		inGGUF, from = workspaceGGUF(ws)
	}
	var (
		in     *modelInput
		inputs []workspace.Input
		name   string
	)
	if inGGUF != "" {
		if err := checkGGUFInput(inGGUF); err != nil {
			return err
		}
		gi, err := workspace.NewInput("gguf", inGGUF, "")
		if err != nil {
			return err
		}
		inputs = []workspace.Input{gi}
		name = ggufName(a, inGGUF)
	} else {
		in, err = resolveModelInput(a, fl.model, fl.loras)
		if err != nil {
			return err
		}
		defer in.close()
		inputs, name, explicit = in.inputs, in.name, in.explicit
	}
	outDir := "."
	if ws != nil {
		outDir = ws.Root
	}
	def := filepath.Join(outDir, fmt.Sprintf("%s-%s.gguf", name, ft))
	out := fl.out
	oneOff := explicit || oneOffOut(out, def)
	if out == "" {
		out = def
	}
	// open reads the input: the GGUF, or the checkpoint converted (and merged) on the fly.
	open := func() (*quantize.Source, error) {
		if inGGUF != "" {
			return quantize.OpenGGUF(inGGUF)
		}
		if err := in.open(a); err != nil {
			return nil, err
		}
		m, err := convert.Load(in.dir, convert.Options{Model: in.dir, OutType: convert.OutF16, KeepMTP: fl.keepMTP, Source: in.source, Name: in.name})
		if err != nil {
			return nil, err
		}
		return quantize.FromModel(m), nil
	}
	if fl.dryRun {
		src, err := open()
		if err != nil {
			return err
		}
		defer src.Close()
		res, err := quantize.Run(a.ctx, quantize.Options{Source: src, FileType: ft, Out: out, Threads: threads, Overrides: ov, DryRun: true}, a.reporter())
		if err != nil {
			return quantizeErr(err)
		}
		return a.io.Result(res, func(w io.Writer) { printQuantize(w, res, true) })
	}
	opts := map[string]any{"type": ft.String(), "pure": ov.Pure, "requant": ov.AllowRequantize, "tensor_types": fl.tensorTypes,
		"output_type": fl.outputType, "embd_type": fl.embdType, "out": out, "keep_mtp": fl.keepMTP}
	fromOf := map[string]string{"gguf": from}
	if in != nil {
		fromOf = in.stageFrom()
	}
	step := workspace.Step{Stage: "quantize", Inputs: inputs, Options: opts, OneOff: oneOff, Force: fl.force}
	var res quantize.Result
	skipped, err := runStage(a, ws, step, fromOf, &res, func() (quantize.Result, []pipeline.Artifact, error) {
		src, err := open()
		if err != nil {
			return quantize.Result{}, nil, err
		}
		defer src.Close()
		res, err := quantize.Run(a.ctx, quantize.Options{Source: src, FileType: ft, Out: out, Threads: threads, Overrides: ov}, a.reporter())
		if err != nil {
			return res, nil, quantizeErr(err)
		}
		return res, res.Artifacts, nil
	})
	if err != nil {
		return err
	}
	if !skipped {
		afterQuantize(a, ws, &res)
	}
	return a.io.Result(res, func(w io.Writer) { printQuantize(w, res, false) })
}

// quantizeErr adds what to do to an attempt at quantizing a quantized model.
func quantizeErr(err error) error {
	var rq *plan.RequantizeError
	if asErr(err, &rq) {
		return withHint(err, "the input is already quantized; quantize the F16/BF16 model instead, or pass --allow-requantize")
	}
	return err
}

// workspaceGGUF is the converted GGUF a plain quantize reads, with where it came from: the workspace's newest
// convert output, unless a merge ran after it (then the merged checkpoint is newer, and "" is returned so the
// caller reads that instead).
func workspaceGGUF(ws *workspace.Workspace) (string, string) {
	art, rec, ok := ws.LatestOutput("gguf", "convert")
	if !ok {
		return "", ""
	}
	if _, mrec, ok := ws.LatestOutput(mergedKind, "merge"); ok && mrec.Time.After(rec.Time) {
		return "", ""
	}
	return art.Path, "the workspace's convert output"
}

// ggufName is a GGUF's general.name when it is a plain file name, else the file's name without .gguf: the stem
// of the default output name.
func ggufName(a *app, path string) string {
	if f, err := gguf.OpenFile(path); err == nil {
		defer f.Close()
		// general.name comes from whoever made the file: it names the output only when it is a plain name
		// ("../../x" would put the output elsewhere).
		n := f.String("general.name")
		if quantize.OutputName(n) {
			return n
		}
		if n != "" {
			a.io.Warnf("general.name %q cannot name a file; the output is named after the input", n)
		}
	}
	return strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
}

// checkGGUFInput refuses an --in value that is a folder (a checkpoint goes to --model) or not there.
func checkGGUFInput(p string) error {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return pipeline.InputError(fmt.Errorf("--in %s: %w", p, err))
	case st.IsDir():
		return usageError("--in %s is a folder; a Hugging Face checkpoint folder goes to --model", p)
	}
	return nil
}

func printQuantize(w io.Writer, res quantize.Result, dry bool) {
	if dry {
		fmt.Fprint(w, res.Plan.Text())
		return
	}
	for _, art := range res.Artifacts {
		fmt.Fprintf(w, "%s\n", art.Path)
		bpw := ""
		if res.BitsPerWeight > 0 {
			bpw = fmt.Sprintf(" (%.2f bits per weight)", res.BitsPerWeight)
		}
		fmt.Fprintf(w, "  %s %s, %s%s, sha256 %s\n", res.Arch, res.FileType, ui.HumanBytes(art.Size), bpw, art.SHA256)
	}
	if res.Seconds > 0 {
		fmt.Fprintf(w, "  %.1f s, %.0f MB/s of input, %d threads\n", res.Seconds, res.InputMBps, res.Threads)
	}
}
