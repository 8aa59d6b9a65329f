package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
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
	keepMTP               bool
}

func newQuantizeCmd(a *app) *cobra.Command {
	var fl quantizeFlags
	cmd := &cobra.Command{
		Use:   "quantize TYPE [--in F16.gguf | --model DIR] [-o OUT.gguf]",
		Short: "Quantize to GGUF (q4_k_m, q8_0, …) with llama-quantize's per-tensor types, bit for bit",
		Long: `Quantize a model with the per-tensor type plan and the reference kernels of llama-quantize (no importance
matrix): the output's tensor bytes equal llama-quantize's for the same input and type.

The input is an F32/F16/BF16 GGUF (--in), a Hugging Face checkpoint converted on the fly without an intermediate
file (--model, optionally with --lora adapters merged on the fly), or, with neither, the workspace's newest
converted GGUF, merged checkpoint or base model.

Types: ` + strings.Join(fileTypeNames(), ", ") + ` (case-insensitive).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ft, err := gguf.ParseFileType(args[0])
			if err != nil {
				return usageError("%v", err)
			}
			if _, ok := plan.DefaultType(ft); !ok {
				return usageError("quantization type %s is not supported (valid: %s)", ft, strings.Join(fileTypeNames(), ", "))
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
	var (
		src    *quantize.Source
		ws     *workspace.Workspace
		inputs = map[string]string{}
		name   string
		outDir = "."
	)
	inGGUF := fl.in
	if inGGUF == "" && fl.model == "" && len(fl.loras) == 0 {
		w, err := findWorkspace()
		if err != nil {
			return err
		}
		if w != nil {
			if art, ok := w.LatestArtifact("gguf", "convert"); ok {
				inGGUF = art.Path
			}
		}
	}
	if inGGUF != "" {
		s, err := quantize.OpenGGUF(inGGUF)
		if err != nil {
			return err
		}
		src = s
		fp, err := workspace.Fingerprint(inGGUF)
		if err != nil {
			return err
		}
		inputs["gguf"] = fp
		if n := s.KVString("general.name"); n != "" {
			name = n
		} else {
			name = strings.TrimSuffix(filepath.Base(inGGUF), filepath.Ext(inGGUF))
		}
		ws, _ = findWorkspace()
	} else {
		in, err := resolveModelInput(a, fl.model, fl.loras)
		if err != nil {
			return err
		}
		defer in.close()
		m, err := convert.Load(in.dir, convert.Options{Model: in.dir, OutType: convert.OutF16, KeepMTP: fl.keepMTP, Source: in.source, Name: in.name})
		if err != nil {
			return err
		}
		src = quantize.FromModel(m)
		ws, inputs, name = in.ws, in.inputs, in.name
	}
	defer src.Close()
	if ws != nil {
		outDir = ws.Root
	}
	out := fl.out
	if out == "" {
		out = filepath.Join(outDir, fmt.Sprintf("%s-%s.gguf", name, ft))
	}
	opts := map[string]any{"type": ft.String(), "pure": ov.Pure, "requant": ov.AllowRequantize, "tensor_types": fl.tensorTypes,
		"output_type": fl.outputType, "embd_type": fl.embdType, "out": out}
	key := workspace.Key(inputs, opts)
	if ws != nil && !fl.dryRun {
		if rec := ws.UpToDate("quantize", key); rec != nil {
			a.io.Printf("%s is up to date (inputs unchanged); nothing to do\n", rec.Artifacts[0].Path)
			res := quantize.Result{Input: src.Name, Arch: src.Arch, FileType: ft.String(), Artifacts: rec.Artifacts}
			return a.io.Result(res, func(w io.Writer) { printQuantize(w, res, false) })
		}
	}
	res, err := quantize.Run(a.ctx, quantize.Options{Source: src, FileType: ft, Out: out, Threads: threads, Overrides: ov, DryRun: fl.dryRun}, a.reporter())
	if err != nil {
		var rq *plan.RequantizeError
		if asErr(err, &rq) {
			return withHint(err, "the input is already quantized; quantize the F16/BF16 model instead, or pass --allow-requantize")
		}
		return err
	}
	if ws != nil && !fl.dryRun {
		if err := ws.Record(workspace.Record{Stage: "quantize", Key: key, Inputs: inputs, Options: opts, Artifacts: res.Artifacts}); err != nil {
			a.io.Warnf("workspace state not updated: %v", err)
		}
	}
	afterQuantize(a, ws, &res)
	return a.io.Result(res, func(w io.Writer) { printQuantize(w, res, fl.dryRun) })
}

func printQuantize(w io.Writer, res quantize.Result, dry bool) {
	if dry {
		fmt.Fprint(w, res.Plan.Text())
		return
	}
	for _, art := range res.Artifacts {
		fmt.Fprintf(w, "%s\n", art.Path)
		fmt.Fprintf(w, "  %s %s, %s (%.2f bits per weight), sha256 %s\n", res.Arch, res.FileType, ui.HumanBytes(art.Size), res.BitsPerWeight, art.SHA256)
	}
	if res.Seconds > 0 {
		fmt.Fprintf(w, "  %.1f s, %.0f MB/s of input, %d threads\n", res.Seconds, res.InputMBps, res.Threads)
	}
}
