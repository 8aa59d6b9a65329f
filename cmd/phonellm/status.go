package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() {
	register("build", newStatusCmd)
	register("build", newResetCmd)
}

type statusResult struct {
	Workspace string                  `json:"workspace"`
	Project   workspace.Project       `json:"project"`
	Stages    []workspace.StageStatus `json:"stages"`
}

func newStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the workspace's stage graph: each stage's inputs, output and whether it is up to date",
		Long: `Show the workspace's stages in pipeline order (merge → convert → quantize → eval, publish → ship): for each,
the inputs its newest run read, what it wrote, and its state:

  up to date  its inputs and outputs are as it left them; running it again does nothing
  stale       an input changed or is gone, or a stage it reads from ran again since: its next run redoes it
  missing     an output it wrote is gone or changed
  not run     the workspace has no run of it

One-off runs (inputs or an output given on the command line instead of the workspace's) are counted but never
feed later stages. 'phonellm reset STAGE' forgets a stage's runs; --force on merge, convert and quantize redoes
one that is up to date.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := a.requireWorkspace()
			if err != nil {
				return err
			}
			res := statusResult{Workspace: ws.Root, Project: ws.Project, Stages: ws.Status()}
			return a.io.Result(res, func(w io.Writer) { printWorkspaceStatus(w, ws, res) })
		},
	}
}

// requireWorkspace is findWorkspace for commands that make no sense without one.
func (a *app) requireWorkspace() (*workspace.Workspace, error) {
	ws, err := a.findWorkspace()
	if err == nil && ws == nil {
		err = usageError("no workspace here (run 'phonellm init --base DIR', or set PHONELLM_WORKSPACE)")
	}
	return ws, err
}

func printWorkspaceStatus(w io.Writer, ws *workspace.Workspace, r statusResult) {
	p := r.Project
	fmt.Fprintf(w, "workspace %s\n", filepath.Join(r.Workspace, workspace.FileName))
	fmt.Fprintf(w, "  base     %s\n", p.Base)
	for _, ad := range p.Adapters {
		fmt.Fprintf(w, "  adapter  %s\n", ad)
	}
	fmt.Fprintf(w, "  quant    %s, phone %s\n\n", p.Quant, p.Phone)
	for _, st := range r.Stages {
		out := ""
		if len(st.Outputs) > 0 {
			out = st.Outputs[0].Path
		}
		fmt.Fprintf(w, "%-9s %-11s %s\n", st.Stage, st.State, out)
		if st.Record != nil {
			if len(st.Inputs) > 0 {
				fmt.Fprintf(w, "          reads %s\n", describeInputs(st.Inputs))
			}
			fmt.Fprintf(w, "          ran %s\n", st.Record.Time.Local().Format("2006-01-02 15:04:05"))
		}
		if st.Why != "" {
			fmt.Fprintf(w, "          why: %s\n", st.Why)
		}
		if st.OneOffs > 0 {
			fmt.Fprintf(w, "          %d one-off run(s) recorded (not used by later stages)\n", st.OneOffs)
		}
	}
}

func newResetCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "reset [STAGE...]",
		Short: "Forget the recorded runs of stages (all stages without STAGE), so they run again",
		Long: `Forget what the workspace recorded about the given stages (every stage when none is given) in
.phonellm/state.json: their next runs start over, and later stages no longer read their outputs. Files are left
where they are; reset prints the outputs the forgotten runs wrote, so you can remove them yourself.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := a.requireWorkspace()
			if err != nil {
				return err
			}
			known := map[string]bool{}
			for _, g := range workspace.Stages {
				known[g.Name] = true
			}
			for _, r := range ws.State.Records {
				known[r.Stage] = true
			}
			var names []string
			for n := range known {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, s := range args {
				if !known[s] {
					hint := ""
					if m := didYouMean(s, names); m != "" {
						hint = fmt.Sprintf("; did you mean %s?", m)
					}
					return usageError("unknown stage %q%s (stages: %s)", s, hint, strings.Join(names, ", "))
				}
			}
			removed, err := ws.Reset(args...)
			if err != nil {
				return err
			}
			type forgot struct {
				Stage string   `json:"stage"`
				Files []string `json:"files,omitempty"` // outputs left on disk
			}
			var res []forgot
			for _, r := range removed {
				f := forgot{Stage: r.Stage}
				if len(r.Artifacts) > 0 { // the first is the stage's output (a merge's folder, not each shard)
					f.Files = []string{r.Artifacts[0].Path}
				}
				res = append(res, f)
			}
			return a.io.Result(res, func(w io.Writer) {
				if len(res) == 0 {
					fmt.Fprintln(w, "nothing recorded; nothing to forget")
					return
				}
				for _, f := range res {
					fmt.Fprintf(w, "forgot a %s run", f.Stage)
					if len(f.Files) > 0 {
						fmt.Fprintf(w, " (its files stay: %s)", strings.Join(f.Files, ", "))
					}
					fmt.Fprintln(w)
				}
			})
		},
	}
}
