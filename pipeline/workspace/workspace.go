package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline"
	"go.yaml.in/yaml/v3"
)

// FileName is the project file at the root of a workspace.
const FileName = "phonellm.yaml"

// stateFile is where stage records live, relative to the workspace root.
const stateFile = ".phonellm/state.json"

// Project is the content of phonellm.yaml. Relative paths are relative to the workspace root.
type Project struct {
	Name     string   `yaml:"name" json:"name"`
	Base     string   `yaml:"base" json:"base"`                             // local checkpoint folder or Hub id (org/name[@rev])
	Adapters []string `yaml:"adapters,omitempty" json:"adapters,omitempty"` // PEFT adapter folders, applied in order
	Quant    string   `yaml:"quant,omitempty" json:"quant,omitempty"`       // default quantization type, e.g. q4_k_m
	Imatrix  string   `yaml:"imatrix,omitempty" json:"imatrix,omitempty"`   // calibration data (prompts JSONL or text) for the imatrix stage
	Phone    string   `yaml:"phone,omitempty" json:"phone,omitempty"`       // phone profile for fit, e.g. 16gb
	Context  int      `yaml:"context,omitempty" json:"context,omitempty"`
	Parallel int      `yaml:"parallel,omitempty" json:"parallel,omitempty"`
	// Warm lists text files (relative to the workspace root) of the shared prefixes — rubrics sent as system
	// messages — that every replica evaluates at start, so the first real request sharing one is a cache hit.
	Warm []string `yaml:"warm,omitempty" json:"warm,omitempty"`
	// KVCache is the replicas' KV cache type: f16 (default), q8_0 or q4_0; the fit check counts it.
	KVCache string `yaml:"kv_cache,omitempty" json:"kv_cache,omitempty"`
	Hub     struct {
		Repo    string `yaml:"repo,omitempty" json:"repo,omitempty"`
		Private bool   `yaml:"private,omitempty" json:"private,omitempty"`
	} `yaml:"hub,omitempty" json:"hub"`
	Fleet struct {
		Target   string `yaml:"target,omitempty" json:"target,omitempty"`
		Replicas int    `yaml:"replicas,omitempty" json:"replicas,omitempty"`
	} `yaml:"fleet,omitempty" json:"fleet"`
}

// Record is what one stage run produced.
type Record struct {
	Stage      string              `json:"stage"`
	Key        string              `json:"key"`    // fingerprint of inputs + options; equal key = nothing to redo
	Inputs     map[string]string   `json:"inputs"` // input name → fingerprint
	InputPaths map[string]string   `json:"input_paths,omitempty"`
	Options    map[string]any      `json:"options,omitempty"`
	Artifacts  []pipeline.Artifact `json:"artifacts"`
	Result     json.RawMessage     `json:"result,omitempty"` // the stage's Result, as it printed it
	// OneOff: the run used inputs or an output given on the command line instead of the workspace's (see
	// Step.OneOff); later stages never read its outputs.
	OneOff bool      `json:"one_off,omitempty"`
	Time   time.Time `json:"time"`
}

// State is the content of .phonellm/state.json.
type State struct {
	Version int       `json:"version"`
	Records []*Record `json:"records"` // newest last
}

// Workspace is an opened project folder.
type Workspace struct {
	Root    string
	Project Project
	State   State
}

// Find looks for phonellm.yaml in dir and its parents (or in $PHONELLM_WORKSPACE when set by the caller as
// dir). It returns fs.ErrNotExist when there is none.
func Find(dir string) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, FileName)); err == nil {
			return Open(d)
		}
		if filepath.Dir(d) == d {
			return nil, fmt.Errorf("no %s in %s or its parents (run 'phonellm init'): %w", FileName, abs, fs.ErrNotExist)
		}
	}
}

// Open reads the workspace at root.
func Open(root string) (*Workspace, error) {
	p := filepath.Join(root, FileName)
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	w := &Workspace{Root: root}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&w.Project); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	sp := filepath.Join(root, stateFile)
	if raw, err := os.ReadFile(sp); err == nil {
		if err := json.Unmarshal(raw, &w.State); err != nil {
			return nil, fmt.Errorf("%s: %w (delete it to start over)", sp, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return w, nil
}

// Init writes a new phonellm.yaml in root. It refuses to overwrite an existing one unless force.
func Init(root string, p Project, force bool) (*Workspace, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(root, FileName)
	if _, err := os.Stat(path); err == nil && !force {
		return nil, fmt.Errorf("%s already exists (use --force to replace it)", path)
	}
	w := &Workspace{Root: root, Project: p}
	return w, w.SaveProject()
}

// SaveProject writes phonellm.yaml atomically.
func (w *Workspace) SaveProject() error {
	b, err := yaml.Marshal(w.Project)
	if err != nil {
		return err
	}
	head := "# phonellm project file: what to build and where to ship it. See 'phonellm help'.\n"
	_, err = fsx.WriteFile(filepath.Join(w.Root, FileName), append([]byte(head), b...))
	return err
}

// Path resolves a path relative to the workspace root.
func (w *Workspace) Path(p string) string {
	if p == "" || filepath.IsAbs(p) || isURL(p) {
		return p
	}
	return filepath.Join(w.Root, p)
}

// Rel makes p relative to the root when it is inside it, for records that survive moving the folder.
func (w *Workspace) Rel(p string) string {
	if isURL(p) {
		return p
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	rootAbs, _ := filepath.Abs(w.Root)
	if r, err := filepath.Rel(rootAbs, abs); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return abs
}

// isURL reports whether an artifact "path" is a URL (a Hub resolve URL, a replica), which is kept as is.
func isURL(p string) bool { return strings.Contains(p, "://") }

// Record stores a stage result (replacing an older record with the same stage and key) and saves the state.
// Paths inside the workspace are stored relative to its root.
func (w *Workspace) Record(r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	// Copies: the caller's Result still holds these slices and maps, with the paths it printed.
	r.Artifacts = slices.Clone(r.Artifacts)
	for i := range r.Artifacts {
		r.Artifacts[i].Path = w.Rel(r.Artifacts[i].Path)
	}
	paths := make(map[string]string, len(r.InputPaths))
	for k, p := range r.InputPaths {
		paths[k] = w.Rel(p)
	}
	r.InputPaths = paths
	kept := w.State.Records[:0]
	for _, old := range w.State.Records {
		if !(old.Stage == r.Stage && old.Key == r.Key) {
			kept = append(kept, old)
		}
	}
	w.State.Records = append(kept, &r)
	return w.save()
}

// save writes the state file atomically.
func (w *Workspace) save() error {
	w.State.Version = 1
	_, err := fsx.WriteJSON(filepath.Join(w.Root, stateFile), w.State)
	return err
}

// Latest returns the newest record of a stage that belongs to the workspace's chain (not a one-off run), or
// nil.
func (w *Workspace) Latest(stage string) *Record {
	for i := len(w.State.Records) - 1; i >= 0; i-- {
		if r := w.State.Records[i]; r.Stage == stage && !r.OneOff {
			return r
		}
	}
	return nil
}

// LatestArtifact returns the newest artifact of a kind from any of the given stages (searched newest first),
// with its path resolved: what a later stage reads by default. One-off runs (Step.OneOff) never count, and
// neither does an artifact that is no longer on disk (a deleted output is not an input).
func (w *Workspace) LatestArtifact(kind string, stages ...string) (pipeline.Artifact, bool) {
	a, _, ok := w.LatestOutput(kind, stages...)
	return a, ok
}

// LatestOutput is LatestArtifact with the record the artifact belongs to (its Time says when it was made).
func (w *Workspace) LatestOutput(kind string, stages ...string) (pipeline.Artifact, *Record, bool) {
	for i := len(w.State.Records) - 1; i >= 0; i-- {
		r := w.State.Records[i]
		if r.OneOff || !contains(stages, r.Stage) {
			continue
		}
		for _, a := range r.Artifacts {
			if a.Kind != kind {
				continue
			}
			a.Path = w.Path(a.Path)
			if !isURL(a.Path) {
				if _, err := os.Stat(a.Path); err != nil {
					continue
				}
			}
			return a, r, true
		}
	}
	return pipeline.Artifact{}, nil, false
}

// UpToDate returns the record of stage with this key when every artifact it lists is still on disk with its
// recorded size; the caller then skips the stage.
func (w *Workspace) UpToDate(stage, key string) *Record {
	for i := len(w.State.Records) - 1; i >= 0; i-- {
		r := w.State.Records[i]
		if r.Stage != stage || r.Key != key {
			continue
		}
		for _, a := range r.Artifacts {
			st, err := os.Stat(w.Path(a.Path))
			if err != nil || (!st.IsDir() && st.Size() != a.Size) {
				return nil
			}
		}
		return r
	}
	return nil
}

// Key combines input fingerprints and options into a stage key.
func Key(inputs map[string]string, options map[string]any) string {
	h := sha256.New()
	for _, k := range sortedKeys(inputs) {
		fmt.Fprintf(h, "in %s=%s\n", k, inputs[k])
	}
	opts, _ := json.Marshal(options) // map keys are sorted by encoding/json
	h.Write(opts)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func sortedKeys(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// samePath reports whether two paths name the same file (after making them absolute and clean).
func samePath(a, b string) bool {
	x, err1 := filepath.Abs(a)
	y, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && x == y
}

// Fingerprint returns a sha256 over (relative path, size, mtime) of a file or of every regular file under a
// folder (hidden files skipped).
func Fingerprint(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if !st.IsDir() {
		fmt.Fprintf(h, "%s %d %d\n", filepath.Base(path), st.Size(), st.ModTime().UnixNano())
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && p != path {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() && !(d.Type()&fs.ModeSymlink != 0) {
			return nil
		}
		info, err := os.Stat(p) // follows symlinks (HF cache snapshots)
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(path, p)
		fmt.Fprintf(h, "%s %d %d\n", filepath.ToSlash(rel), info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
