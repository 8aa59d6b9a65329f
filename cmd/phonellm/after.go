package main

import (
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// afterQuantize checks a fresh quantization against the workspace's phone profile (16gb outside a workspace)
// and prints the verdict on stderr; the fit stage's result also goes into the quantize result's notes.
func afterQuantize(a *app, ws *workspace.Workspace, res *quantize.Result) {
	if res.DryRun || len(res.Artifacts) == 0 {
		return
	}
	o := fit.Options{Model: res.Artifacts[0].Path, Phone: "16gb"}
	if ws != nil {
		if ws.Project.Phone != "" {
			o.Phone = ws.Project.Phone
		}
		if ws.Project.Context > 0 {
			o.Ctx = ws.Project.Context
		}
		if ws.Project.Parallel > 0 {
			o.Parallel = ws.Project.Parallel
		}
	}
	fr, err := fit.Run(a.ctx, o, nil)
	if err != nil {
		a.io.Warnf("fit check skipped: %v", err)
		return
	}
	v := fr.Verdict
	mark := a.io.Styled("ok", "fits")
	if !v.Fits {
		mark = a.io.Styled("err", "does not fit")
	} else if v.Tight {
		mark = a.io.Styled("warn", "fits, tightly")
	}
	a.io.Printf("fit on a %s phone: %s (needs %s of %s; largest context %d)\n", v.Profile, mark,
		signedBytes(v.Needed), signedBytes(v.Usable), fr.MaxCtx)
	res.Fit = &fr.Verdict
}
