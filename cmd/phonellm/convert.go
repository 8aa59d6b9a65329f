package main

import (
	"fmt"
	"io"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() { register("build", newConvertCmd) }

func newConvertCmd(a *app) *cobra.Command {
	var o convert.Options
	var outType string
	var loras []string
	var force bool
	cmd := &cobra.Command{
		Use:   "convert [--model DIR] [--outtype f16|bf16|f32] [-o OUT.gguf]",
		Short: "Convert a Hugging Face checkpoint to an unquantized GGUF (F32, F16 or BF16)",
		Long: `Convert a Hugging Face checkpoint (Qwen2, Qwen3, Qwen3-MoE, Qwen3.5 and Qwen3.5-MoE) to GGUF with the
keys, tensor names and transforms of upstream llama.cpp's convert_hf_to_gguf.py. The vision tower is skipped and
the Qwen3.5 MTP block is dropped unless --keep-mtp. Without --model, the workspace's merged checkpoint (or its
base) is converted. --lora applies adapters on the fly, without writing a merged checkpoint.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := convert.ParseOutType(outType)
			if err != nil {
				return usageError("%v", err)
			}
			o.OutType = t
			in, err := resolveModelInput(a, o.Model, loras)
			if err != nil {
				return err
			}
			defer in.close()
			o.Model = in.dir
			oneOff := in.explicit || cmd.Flags().Changed("name")
			if in.ws != nil {
				oneOff = oneOff || oneOffOut(o.Out, in.ws.Root)
				if o.Out == "" {
					o.Out = in.ws.Root
				}
			}
			if o.Name == "" {
				o.Name = in.name
			}
			step := workspace.Step{Stage: "convert", Inputs: in.inputs, OneOff: oneOff, Force: force,
				Options: map[string]any{"outtype": string(o.OutType), "out": o.Out, "name": o.Name, "keep_mtp": o.KeepMTP}}
			var res convert.Result
			if _, err := runStage(a, in.ws, step, in.stageFrom(), &res, func() (convert.Result, []pipeline.Artifact, error) {
				if err := in.open(a); err != nil {
					return convert.Result{}, nil, err
				}
				o.Source = in.source
				res, err := convert.Run(a.ctx, o, a.reporter())
				return res, res.Artifacts, err
			}); err != nil {
				return err
			}
			return a.io.Result(res, func(w io.Writer) {
				for _, art := range res.Artifacts {
					fmt.Fprintf(w, "%s\n", art.Path)
					fmt.Fprintf(w, "  %s %s, %d tensors, %s parameters, %s, sha256 %s\n", res.Arch, res.OutType,
						res.Tensors, humanCount(res.Params), ui.HumanBytes(art.Size), art.SHA256)
				}
				if res.Dropped > 0 {
					fmt.Fprintf(w, "  %d checkpoint tensors not converted (vision tower, MTP block, rotary caches)\n", res.Dropped)
				}
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Model, "model", "", "Hugging Face checkpoint folder (default: the workspace's)")
	f.StringVar(&outType, "outtype", "auto", "output type: f32, f16, bf16, or auto (bf16 checkpoints → bf16, else f16)")
	f.StringVarP(&o.Out, "out", "o", "", "output file or folder (default: <name>-<TYPE>.gguf in the workspace or model folder)")
	f.BoolVar(&o.KeepMTP, "keep-mtp", false, "keep the Qwen3.5 multi-token-prediction block (needs llama.cpp ≥ b9180 on the phone)")
	f.StringVar(&o.Name, "name", "", "general.name and output file name (default: from the model)")
	f.StringArrayVar(&loras, "lora", nil, "apply a PEFT LoRA adapter on the fly (repeatable; PATH or PATH:WEIGHT)")
	f.BoolVar(&force, "force", false, "convert again even when the output is up to date")
	return cmd
}
