package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// modelInput is a resolved checkpoint to read: a folder, optionally with LoRA adapters merged on the fly.
type modelInput struct {
	dir    string
	name   string
	source pipeline.TensorSource // nil: read the folder's safetensors directly
	ws     *workspace.Workspace  // nil outside a workspace
	inputs map[string]string     // fingerprints, for the workspace's up-to-date check
	closer func()
}

func (m *modelInput) close() {
	if m.closer != nil {
		m.closer()
	}
}

// key is the workspace key of a stage run on this input with the given options.
func (m *modelInput) key(opts map[string]any) string { return workspace.Key(m.inputs, opts) }

// findWorkspace returns the workspace of PHONELLM_WORKSPACE or the current folder, or nil when there is none.
func findWorkspace() (*workspace.Workspace, error) {
	dir := getenv("PHONELLM_WORKSPACE", ".")
	ws, err := workspace.Find(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return ws, err
}

// adapterRef is one --lora value: PATH or PATH:WEIGHT.
type adapterRef struct {
	Path   string
	Weight float64
}

func parseAdapterRefs(vals []string) ([]adapterRef, error) {
	var out []adapterRef
	for _, v := range vals {
		ref := adapterRef{Path: v, Weight: 1}
		if i := strings.LastIndex(v, ":"); i > 0 {
			if w, err := strconv.ParseFloat(v[i+1:], 64); err == nil {
				ref.Path, ref.Weight = v[:i], w
			}
		}
		if ref.Path == "" {
			return nil, usageError("--lora %q: empty path", v)
		}
		out = append(out, ref)
	}
	return out, nil
}

// resolveModelInput finds the checkpoint to read: --model DIR, else the workspace's newest merged checkpoint,
// else its base (with the project's adapters, merged on the fly). loras given on the command line are applied
// on the fly in every case.
func resolveModelInput(a *app, model string, loras []string) (*modelInput, error) {
	ws, err := findWorkspace()
	if err != nil {
		return nil, err
	}
	in := &modelInput{ws: ws, inputs: map[string]string{}}
	refs, err := parseAdapterRefs(loras)
	if err != nil {
		return nil, err
	}
	switch {
	case model != "":
		in.dir = model
	case ws == nil:
		return nil, usageError("no --model given and no workspace here (run 'phonellm init --base DIR' or pass --model)")
	default:
		if art, ok := ws.LatestArtifact(mergedKind, "merge"); ok && len(refs) == 0 {
			in.dir = art.Path
		} else {
			dir, err := resolveBase(a, ws.Root, ws.Project.Base)
			if err != nil {
				return nil, err
			}
			in.dir = dir
			if len(refs) == 0 {
				for _, p := range ws.Project.Adapters {
					refs = append(refs, adapterRef{Path: ws.Path(p), Weight: 1})
				}
			}
		}
		in.name = ws.Project.Name
	}
	if in.name == "" {
		in.name = filepath.Base(filepath.Clean(in.dir))
	}
	fp, err := workspace.Fingerprint(in.dir)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", in.dir, err)
	}
	in.inputs["model"] = fp
	if len(refs) > 0 {
		for i, r := range refs {
			fp, err := workspace.Fingerprint(r.Path)
			if err != nil {
				return nil, fmt.Errorf("adapter %s: %w", r.Path, err)
			}
			in.inputs[fmt.Sprintf("adapter%d", i)] = fmt.Sprintf("%s*%g", fp, r.Weight)
		}
		if err := in.mergeOnTheFly(a, refs); err != nil {
			return nil, err
		}
	}
	return in, nil
}
