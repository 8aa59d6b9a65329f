package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/spf13/cobra"
)

func init() { register("run", newDemoCmd) }

// demoSteps is the pipeline the demo runs, each step a phonellm command line run in-process against the demo
// workspace, exactly as a user would type it in the workspace folder.
func demoSteps() [][]string {
	return [][]string{
		{"inspect", "--tensors=false", "base"},
		{"merge"},
		{"quantize", "q4_k_m"},
		{"inspect", "--tensors=false", "tiny-fraud-Q4_K_M.gguf"},
		{"fit", "--ctx", "8192", "--all"},
		{"ship", "--replicas", "3", "--gateway-port", "0", "--prompt", "Assess this transaction: 3 card payments in 2 minutes from new devices."},
		{"fleet", "status"},
		{"fleet", "stop"},
	}
}

func newDemoCmd(a *app) *cobra.Command {
	var dir, preset string
	cmd := &cobra.Command{
		Use:   "demo [--dir DIR]",
		Short: "Run the whole pipeline on an embedded tiny model (generated, no download)",
		Long: `Generate a tiny random Qwen3.5-shaped checkpoint and LoRA adapter (deterministic, a few MB, built into
phonellm so nothing is downloaded), create a workspace for them, and run the pipeline stages one after the
other, printing each stage's result — the same commands you would type for a real model.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				d, err := os.MkdirTemp("", "phonellm-demo-")
				if err != nil {
					return err
				}
				dir = d
			}
			spec, ok := tinymodel.Preset(preset)
			if !ok {
				return usageError("unknown preset %q", preset)
			}
			spec.DType = tinymodel.BF16
			base, adapter := filepath.Join(dir, "base"), filepath.Join(dir, "adapter")
			a.io.Printf("%s generating tiny %s checkpoint and LoRA adapter in %s\n", a.io.Styled("accent", "▶"), preset, dir)
			if err := tinymodel.Generate(base, spec); err != nil {
				return err
			}
			if err := tinymodel.GenerateAdapter(adapter, spec, tinymodel.AdapterSpec{Rank: 8, Alpha: 16,
				TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}); err != nil {
				return err
			}
			steps := append([][]string{{"init", "--dir", dir, "--base", "base", "--lora", "adapter", "--name", "tiny-fraud",
				"--phone", "8gb", "--force"}}, demoSteps()...)
			for _, step := range steps {
				a.io.Printf("\n%s phonellm %s\n", a.io.Styled("accent", "▶"), joinArgs(step))
				// The steps run in the demo's workspace (runIn), not by changing this process's environment or
				// working directory; a file named in a step is in the workspace folder.
				if code := runIn(a.ctx, inWorkspace(dir, step), a.io, dir); code != exitOK {
					return withCode(code, fmt.Errorf("demo step 'phonellm %s' failed", joinArgs(step)), "")
				}
			}
			a.io.Printf("\n%s demo finished; the workspace is %s\n", a.io.Styled("ok", "✓"), dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "folder for the demo workspace (default: a new temporary folder)")
	cmd.Flags().StringVar(&preset, "preset", "qwen35", "tiny model preset (qwen2, qwen3, qwen3moe, qwen35, qwen35moe)")
	return cmd
}

// inWorkspace makes the file a step names (inspect's argument) a path in the workspace folder dir, as it is
// for a person who typed the step there.
func inWorkspace(dir string, step []string) []string {
	out := append([]string(nil), step...)
	if len(out) > 1 && out[0] == "inspect" {
		if last := out[len(out)-1]; !filepath.IsAbs(last) {
			out[len(out)-1] = filepath.Join(dir, last)
		}
	}
	return out
}

func joinArgs(args []string) string {
	s := ""
	for i, a := range args {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}
