package main

import (
	"encoding/json"
	"fmt"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// runStage runs one stage through the workspace (workspace.Workspace.Run: fingerprint → up to date? → run →
// record), the one way merge, convert and quantize do it. With -v it names every input the stage reads and
// where it came from; a skipped run says so and hands back the recorded result in res, so the output is the
// same as when the stage ran. ws may be nil (no workspace): the stage just runs.
func runStage[R any](a *app, ws *workspace.Workspace, step workspace.Step, from map[string]string, res *R,
	run func() (R, []pipeline.Artifact, error)) (skipped bool, err error) {
	if a.io.Verbose {
		for _, in := range step.Inputs {
			via := ""
			if f := from[in.Name]; f != "" {
				via = " (" + f + ")"
			}
			a.io.Printf("%s reads %s %s%s\n", step.Stage, in.Name, in.Path, via)
		}
		if ws != nil && step.OneOff {
			a.io.Printf("%s: one-off run (inputs or output from the command line): recorded, but later stages keep reading the workspace's own outputs\n", step.Stage)
		}
	}
	rec, skipped, err := ws.Run(step, a.reporter(), func() ([]pipeline.Artifact, any, error) {
		r, arts, err := run()
		if err != nil {
			return nil, nil, err
		}
		*res = r
		return arts, r, nil
	})
	if err != nil || !skipped {
		return skipped, err
	}
	if len(rec.Result) == 0 || json.Unmarshal(rec.Result, res) != nil {
		// Recorded by an older phonellm without the result: the caller shows what it can from the record.
		var zero R
		*res = zero
	}
	out := ""
	if len(rec.Artifacts) > 0 {
		out = ws.Path(rec.Artifacts[0].Path) + " "
	}
	a.io.Printf("%s%s is up to date (inputs and options unchanged since %s); nothing to do (--force redoes it)\n",
		out, step.Stage, rec.Time.Local().Format("2006-01-02 15:04"))
	return true, nil
}

// stageFrom says, per input name, where a model input came from (for -v).
func (m *modelInput) stageFrom() map[string]string {
	from := map[string]string{"model": m.from}
	for _, in := range m.inputs {
		if in.Name != "model" {
			from[in.Name] = "merged on the fly"
		}
	}
	return from
}

// oneOffOut reports whether an output path given with -o differs from the workspace's default for it.
func oneOffOut(out, def string) bool { return out != "" && !samePath(out, def) }

// describeInputs is a one-line list of a record's inputs for status output.
func describeInputs(ins []workspace.Input) string {
	s := ""
	for i, in := range ins {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s", in.Name, in.Path)
	}
	return s
}
