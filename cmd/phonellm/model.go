package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/hfhub"
)

// resolveGGUF turns a serve/bench/fit MODEL argument into a local GGUF path: a file, "hf://org/repo/file.gguf
// [@rev]" (downloaded resumably into the HF cache and verified by size and sha256; a corrupt or truncated cache
// entry is re-fetched), or, when empty, the workspace's newest quantized (else converted) GGUF.
func resolveGGUF(a *app, arg string) (string, error) {
	if strings.HasPrefix(arg, "hf://") {
		ref, err := hfhub.ParseRef(arg)
		if err != nil {
			return "", usageError("%v", err)
		}
		rep := a.reporter()
		step := "download " + ref.String()
		rep.Begin(step, -1)
		loc, err := hfhub.New().Download(a.ctx, ref.Repo, ref.Revision, ref.File, rep.Add)
		rep.End(step, err)
		if err != nil {
			return "", remoteErr(err)
		}
		return loc.Path, nil
	}
	if arg != "" {
		if _, err := os.Stat(arg); err != nil {
			return "", err
		}
		// Check the header now, so a wrong file is a one-line input error (exit 3) before anything binds or loads.
		f, err := gguf.OpenFile(arg)
		if err != nil {
			return "", err
		}
		f.Close()
		return arg, nil
	}
	ws, err := a.findWorkspace()
	if err != nil {
		return "", err
	}
	if ws == nil {
		return "", usageError("no MODEL given and no workspace here (pass a GGUF file or hf://org/repo/file.gguf)")
	}
	if art, rec, ok := ws.LatestOutput("gguf", "quantize", "convert"); ok {
		if a.io.Verbose {
			a.io.Printf("reads model %s (the workspace's %s output)\n", art.Path, rec.Stage)
		}
		return art.Path, nil
	}
	return "", pipeline.InputError(fmt.Errorf("workspace %s has no GGUF yet: run 'phonellm quantize' first", ws.Root))
}
