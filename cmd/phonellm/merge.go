package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/merge"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() { register("build", newMergeCmd) }

// mergedKind is the workspace artifact kind of a merged checkpoint folder.
const mergedKind = "merged-checkpoint"

func newMergeCmd(a *app) *cobra.Command {
	var base, out string
	var loras []string
	var shard int64
	var threads int
	var force bool
	cmd := &cobra.Command{
		Use:   "merge [--base DIR] --lora ADAPTER[:WEIGHT]... [-o OUT_DIR]",
		Short: "Merge PEFT LoRA adapters into the 16-bit base checkpoint (streaming)",
		Long: `Merge PEFT LoRA adapters into the base weights: W' = W + s·B·A with s = alpha/r (alpha/√r for rsLoRA,
per-module rank/alpha patterns), DoRA magnitude renormalisation, embedding LoRA, modules_to_save and LoRA bias.
Accumulated in f32 and rounded once to the base dtype. Every adapter tensor must find its base tensor, and an
adapter that would change nothing is an error. Tied embeddings changed by the adapter are written untied.

The output is a Hugging Face checkpoint folder (sharded safetensors, config, tokenizer, chat template and a
phonellm-merge.json provenance record), written tensor by tensor into a temporary folder and renamed at the end.
Without flags, the workspace's base and adapters are used. You can also skip this step: quantize and convert
merge on the fly with --lora.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			refs, err := parseAdapterRefs(loras)
			if err != nil {
				return err
			}
			ws, err := a.findWorkspace()
			if err != nil {
				return err
			}
			name, oneOff := "", false
			from := map[string]string{"base": "--base"}
			if base == "" {
				if ws == nil {
					return usageError("no --base given and no workspace here")
				}
				if base, err = resolveBase(a, ws.Root, ws.Project.Base); err != nil {
					return err
				}
				from["base"] = "the workspace's base"
				project := workspaceAdapters(ws)
				if len(refs) == 0 {
					refs = project
				} else if !sameAdapters(refs, project) {
					oneOff = true
				}
				name = ws.Project.Name
			} else {
				oneOff = true // merge.Run explains a GGUF or a file given as the base
			}
			if len(refs) == 0 {
				return usageError("no adapter: pass --lora DIR (or list adapters in phonellm.yaml)")
			}
			if name == "" {
				name = filepath.Base(filepath.Clean(base))
			}
			dir := filepath.Dir(filepath.Clean(base))
			if ws != nil {
				dir = ws.Root
			}
			def := filepath.Join(dir, name+"-merged")
			oneOff = oneOff || oneOffOut(out, def)
			if out == "" {
				out = def
			}
			bin, err := workspace.NewInput("base", base, "")
			if err != nil {
				return err
			}
			ads, err := adapterInputs(refs)
			if err != nil {
				return err
			}
			var mrefs []merge.AdapterRef
			for _, r := range refs {
				mrefs = append(mrefs, merge.AdapterRef{Path: r.Path, Weight: r.Weight})
			}
			step := workspace.Step{Stage: "merge", Inputs: append([]workspace.Input{bin}, ads...),
				Options: map[string]any{"out": out, "shard": shard}, OneOff: oneOff, Force: force}
			var res merge.Result
			skipped, err := runStage(a, ws, step, from, &res, func() (merge.Result, []pipeline.Artifact, error) {
				res, err := merge.Run(a.ctx, merge.Options{Base: base, Adapters: mrefs, Out: out, MaxShardBytes: shard, Threads: threads,
					HashCache: filepath.Join(phonellmHome(), "hashes")}, a.reporter())
				if err != nil {
					return res, nil, err
				}
				return res, append([]pipeline.Artifact{{Path: res.Out, Kind: mergedKind, Size: res.Bytes}}, res.Artifacts...), nil
			})
			if err != nil {
				return err
			}
			if res.Out == "" { // skipped, recorded before results were kept
				res.Out = out
			}
			if res.Untied && !skipped {
				a.io.Warnf("the adapter changes the tied embedding/lm_head: the merged checkpoint has both, untied (tie_word_embeddings=false)")
			}
			return a.io.Result(res, func(w io.Writer) {
				fmt.Fprintf(w, "%s\n", res.Out)
				if skipped && res.Report == nil {
					return
				}
				changed := 0
				if res.Report != nil {
					changed = len(res.Report.Tensors)
				}
				fmt.Fprintf(w, "  %d tensors changed by %d adapter(s), %s of tensors, %.1f s\n", changed, len(res.Adapters), ui.HumanBytes(res.Bytes), res.Seconds)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&base, "base", "", "base checkpoint folder (default: the workspace's base)")
	f.StringArrayVar(&loras, "lora", nil, "PEFT adapter folder, PATH or PATH:WEIGHT (repeatable, applied in order)")
	f.StringVarP(&out, "out", "o", "", "output folder (default <name>-merged next to the workspace)")
	f.Int64Var(&shard, "max-shard-size", 0, "bytes of tensors per safetensors shard (default 5 GB)")
	f.IntVar(&threads, "threads", 0, "worker threads (default: all cores)")
	f.BoolVar(&force, "force", false, "merge again even when the output is up to date")
	return cmd
}
