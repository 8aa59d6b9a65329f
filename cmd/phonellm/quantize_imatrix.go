package main

import (
	"fmt"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/imatrix/calibrate"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// imatrixChoice is the importance matrix a quantize run uses: none (path ""), or a file and the name recorded in
// quantize.imatrix.file.
type imatrixChoice struct {
	path, name string
}

// load opens the importance matrix (nil for none); the caller closes it.
func (c imatrixChoice) load() (*imatrix.Importance, error) {
	if c.path == "" {
		return nil, nil
	}
	return imatrix.Load(c.path)
}

// quantizeImatrix decides the importance matrix of a quantize run: --imatrix FILE; none with --no-imatrix;
// otherwise, in a workspace, the imatrix stage's output — the stage runs first (skipped when up to date) when
// phonellm.yaml names calibration data and the input is the converted GGUF, else an earlier output is taken as
// it is. A file type that needs one and gets none is refused before anything is read.
func quantizeImatrix(a *app, ws *workspace.Workspace, fl quantizeFlags, inGGUF string, ft gguf.FileType) (imatrixChoice, error) {
	var c imatrixChoice
	switch {
	case fl.imatrix != "" && fl.noImatrix:
		return c, usageError("--imatrix and --no-imatrix exclude each other")
	case fl.imatrix != "":
		c = imatrixChoice{path: fl.imatrix, name: fl.imatrix}
	case fl.noImatrix || ws == nil:
	case ws.Project.Imatrix != "" && inGGUF != "":
		a.io.Printf("importance matrix from %s (phonellm.yaml imatrix:)\n", ws.Project.Imatrix)
		fl := imatrixFlags{chunkSize: calibrate.DefaultChunkSize, saveEvery: calibrate.DefaultSaveEvery}
		if own, _ := workspaceGGUF(ws); !samePath(own, inGGUF) {
			fl.model = inGGUF // a one-off input: its importance matrix is a one-off too
		}
		_, out, err := runImatrixStage(a, ws, fl)
		if err != nil {
			return c, fmt.Errorf("imatrix stage: %w", err)
		}
		c = imatrixChoice{path: out, name: ws.Rel(out)}
	default:
		if art, rec, ok := ws.LatestOutput("imatrix", "imatrix"); ok {
			c = imatrixChoice{path: art.Path, name: ws.Rel(art.Path)}
			if p := rec.InputPaths["model"]; inGGUF != "" && p != "" && !samePath(ws.Path(p), inGGUF) {
				a.io.Warnf("the workspace's importance matrix %s was computed from %s, not from %s", c.name, p, inGGUF)
			}
		} else if ws.Project.Imatrix != "" {
			a.io.Warnf("phonellm.yaml names calibration data (imatrix: %s) but there is no converted GGUF to compute it with; quantizing without (run 'phonellm convert' first)",
				ws.Project.Imatrix)
		}
	}
	if c.path == "" && plan.RequiresImatrix(ft) {
		return c, withHint(pipeline.InputError(fmt.Errorf("quantize: %s needs an importance matrix", ft)),
			"run phonellm imatrix first (calibration prompts of your task), then quantize with --imatrix FILE")
	}
	return c, nil
}
