package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
	from   string                // how the folder was chosen, for -v
	source pipeline.TensorSource // nil: read the folder's safetensors directly
	ws     *workspace.Workspace  // nil outside a workspace
	inputs []workspace.Input     // what the stage reads, fingerprinted
	// explicit: the command line chose the model or adapters instead of the workspace (a one-off run).
	explicit bool
	refs     []adapterRef // merged on the fly by open
	closer   func()
}

// open prepares the tensor source: the adapters merged on the fly (merge.Wrap), when there are any. Stages call
// it only when they run (not when they are up to date).
func (m *modelInput) open(a *app) error {
	if len(m.refs) == 0 || m.source != nil {
		return nil
	}
	return m.mergeOnTheFly(a, m.refs)
}

func (m *modelInput) close() {
	if m.closer != nil {
		m.closer()
	}
}

// findWorkspace returns the workspace the command runs in (the app's, when one was given: demo), else the one
// of PHONELLM_WORKSPACE or the current folder, or nil when there is none.
func (a *app) findWorkspace() (*workspace.Workspace, error) {
	dir := a.workspace
	if dir == "" {
		dir = getenv("PHONELLM_WORKSPACE", ".")
	}
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

// workspaceAdapters are the adapters phonellm.yaml lists, at weight 1.
func workspaceAdapters(ws *workspace.Workspace) []adapterRef {
	var refs []adapterRef
	for _, p := range ws.Project.Adapters {
		refs = append(refs, adapterRef{Path: ws.Path(p), Weight: 1})
	}
	return refs
}

// sameAdapters reports whether two adapter lists name the same folders with the same weights, in order.
func sameAdapters(a, b []adapterRef) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !samePath(a[i].Path, b[i].Path) || a[i].Weight != b[i].Weight {
			return false
		}
	}
	return true
}

// samePath reports whether two paths name the same file or folder.
func samePath(a, b string) bool {
	x, err1 := filepath.Abs(a)
	y, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && x == y
}

// adapterInputs fingerprints adapters as stage inputs adapter0, adapter1, … (the weight is part of each).
func adapterInputs(refs []adapterRef) ([]workspace.Input, error) {
	var out []workspace.Input
	for i, r := range refs {
		if err := checkAdapterDir(r.Path); err != nil {
			return nil, err
		}
		in, err := workspace.NewInput(fmt.Sprintf("adapter%d", i), r.Path, strconv.FormatFloat(r.Weight, 'g', -1, 64))
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// checkAdapterDir refuses an adapter path that is not there or not a folder: a bad command-line value (exit 2),
// said in one line before any work starts.
func checkAdapterDir(p string) error {
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usageError("adapter %s: no such folder (--lora takes a PEFT adapter folder with adapter_config.json)", p)
	case err != nil:
		return fmt.Errorf("adapter %s: %w", p, err)
	case !st.IsDir():
		return usageError("adapter %s is a file, not a PEFT adapter folder (adapter_config.json + adapter_model.safetensors)", p)
	}
	return nil
}

// checkModelDir refuses a --model value that is not a Hugging Face checkpoint folder, naming what it is
// instead (a GGUF file goes to --in).
func checkModelDir(flag, p string) error {
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usageError("%s %s: no such folder", flag, p)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, p, err)
	case st.IsDir():
		return nil
	case isGGUFFile(p):
		hint := ""
		if flag == "--model" {
			hint = " (quantize reads a GGUF with --in)"
		}
		return usageError("%s %s is a GGUF file, not a Hugging Face checkpoint folder%s", flag, p, hint)
	}
	return usageError("%s %s is a file, not a Hugging Face checkpoint folder (config.json + safetensors)", flag, p)
}

// isGGUFFile reports whether the file starts with the GGUF magic.
func isGGUFFile(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	n, _ := f.Read(magic[:])
	return n == 4 && string(magic[:]) == "GGUF"
}

// resolveModelInput finds the checkpoint to read: --model DIR, else the workspace's merged checkpoint (when it
// is still on disk), else its base with the project's adapters merged on the fly. loras given on the command
// line are applied on the fly in every case (instead of the project's).
func resolveModelInput(a *app, model string, loras []string) (*modelInput, error) {
	ws, err := a.findWorkspace()
	if err != nil {
		return nil, err
	}
	in := &modelInput{ws: ws}
	refs, err := parseAdapterRefs(loras)
	if err != nil {
		return nil, err
	}
	switch {
	case model != "":
		if err := checkModelDir("--model", model); err != nil {
			return nil, err
		}
		in.dir, in.from, in.explicit = model, "--model", true
	case ws == nil:
		return nil, usageError("no --model given and no workspace here (run 'phonellm init --base DIR' or pass --model)")
	default:
		project := workspaceAdapters(ws)
		if len(refs) > 0 && !sameAdapters(refs, project) {
			in.explicit = true
		}
		if art, ok := ws.LatestArtifact(mergedKind, "merge"); ok && !in.explicit {
			in.dir, in.from, refs = art.Path, "the workspace's merge output", nil
		} else {
			dir, err := resolveBase(a, ws.Root, ws.Project.Base)
			if err != nil {
				return nil, err
			}
			in.dir, in.from = dir, "the workspace's base"
			if len(refs) == 0 {
				refs = project
			}
		}
		in.name = ws.Project.Name
	}
	if in.name == "" {
		in.name = filepath.Base(filepath.Clean(in.dir))
	}
	mi, err := workspace.NewInput("model", in.dir, "")
	if err != nil {
		return nil, err
	}
	in.inputs = append(in.inputs, mi)
	if len(refs) > 0 {
		ads, err := adapterInputs(refs)
		if err != nil {
			return nil, err
		}
		in.inputs = append(in.inputs, ads...)
		in.refs = refs
	}
	return in, nil
}
