package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() { register("build", newInitCmd) }

type initResult struct {
	Workspace string            `json:"workspace"`
	Project   workspace.Project `json:"project"`
	BaseDir   string            `json:"base_dir"`
	Arch      string            `json:"architecture"`
}

func newInitCmd(a *app) *cobra.Command {
	var p workspace.Project
	var dir string
	var force bool
	cmd := &cobra.Command{
		Use:   "init --base DIR|HF_ID",
		Short: "Create a workspace (phonellm.yaml) so later commands find their inputs",
		Long: `Create a workspace: a phonellm.yaml that names the base model (a local Hugging Face checkpoint folder
or a Hub id such as Qwen/Qwen3.5-4B), the LoRA adapters, the quantization type, the phone profile and where to
publish and ship. Later commands (merge, convert, quantize, fit, publish, ship) read it, and record what they
produce in .phonellm/state.json so unchanged stages are skipped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if p.Base == "" {
				return usageError("--base is required (a checkpoint folder or a Hub id)")
			}
			if p.Name == "" {
				p.Name = strings.ToLower(filepath.Base(strings.TrimSuffix(p.Base, "/")))
			}
			res := initResult{}
			baseDir, err := resolveBase(a, dir, p.Base)
			if err != nil {
				return err
			}
			ck, err := checkpoint.Open(baseDir)
			if err != nil {
				return err
			}
			res.Arch = ck.Architecture()
			ck.Close()
			ws, err := workspace.Init(dir, p, force)
			if err != nil {
				return err
			}
			res.Workspace, res.Project, res.BaseDir = ws.Root, ws.Project, baseDir
			return a.io.Result(res, func(w io.Writer) {
				fmt.Fprintf(w, "workspace %s\n  base     %s (%s)\n", filepath.Join(ws.Root, workspace.FileName), p.Base, res.Arch)
				for _, ad := range p.Adapters {
					fmt.Fprintf(w, "  adapter  %s\n", ad)
				}
				fmt.Fprintf(w, "  quant    %s, phone %s\n", p.Quant, p.Phone)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", ".", "workspace folder")
	f.StringVar(&p.Base, "base", "", "base model: checkpoint folder or Hub id (org/name[@revision])")
	f.StringVar(&p.Name, "name", "", "model name used in output file names (default: from the base)")
	f.StringSliceVar(&p.Adapters, "lora", nil, "PEFT LoRA adapter folder (repeat to apply several in order)")
	f.StringVar(&p.Quant, "quant", "q4_k_m", "default quantization type")
	f.StringVar(&p.Phone, "phone", "16gb", "phone profile for the fit check")
	f.StringVar(&p.Hub.Repo, "repo", "", "Hugging Face repo to publish to (org/name)")
	f.BoolVar(&force, "force", false, "replace an existing phonellm.yaml")
	return cmd
}

// resolveBase returns a local checkpoint folder for base: the folder itself, or the Hub snapshot it was
// downloaded to.
func resolveBase(a *app, wsDir, base string) (string, error) {
	local := base
	if !filepath.IsAbs(local) {
		local = filepath.Join(wsDir, base)
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		return local, nil
	}
	if looksLikeHubID(base) {
		return downloadBase(a, base)
	}
	return "", pipeline.InputError(fmt.Errorf("base %q: no such folder, and not a Hub id (org/name)", base))
}

func looksLikeHubID(s string) bool {
	id, _, _ := strings.Cut(s, "@")
	parts := strings.Split(id, "/")
	return len(parts) == 2 && parts[0] != "" && parts[1] != "" && !strings.HasPrefix(s, ".") && !strings.HasPrefix(s, "/")
}
