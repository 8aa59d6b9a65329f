package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
)

// Input is one thing a stage run reads: a name that says its role ("base", "adapter0", "model", "gguf"), the
// path it was read from and its fingerprint when it was read.
type Input struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	Fingerprint string `json:"fingerprint"`
}

// NewInput fingerprints path (see Fingerprint). detail, when not empty, is part of what the input is (an
// adapter's weight) and is appended to the fingerprint.
func NewInput(name, path, detail string) (Input, error) {
	fp, err := Fingerprint(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Input{}, pipeline.InputError(fmt.Errorf("%s %s: no such file or folder", name, path))
	}
	if err != nil {
		return Input{}, fmt.Errorf("%s %s: %w", name, path, err)
	}
	if detail != "" {
		fp += "*" + detail
	}
	return Input{Name: name, Path: path, Fingerprint: fp}, nil
}

// Step is one run of a stage through the workspace: what it reads, with which options, and whether its
// outputs belong to the workspace's chain of stages.
type Step struct {
	Stage   string
	Inputs  []Input
	Options map[string]any // everything besides the inputs that changes the output (type, output path, …)
	// OneOff marks a run whose inputs or output the user chose on the command line instead of the workspace's
	// (merge --lora OTHER -o ../scratch). It is recorded, so its outputs keep their hashes, but later stages
	// never take their input from it and it never makes the workspace's own run of the stage up to date.
	OneOff bool
	// Force runs the stage even when it is up to date.
	Force bool
}

// Key is the step's record key: its input fingerprints and options (see Key).
func (s Step) Key() string {
	in := make(map[string]string, len(s.Inputs))
	for _, i := range s.Inputs {
		in[i.Name] = i.Fingerprint
	}
	return Key(in, s.Options)
}

// Run is the one way a stage command goes through the workspace: when w has an up-to-date record of the step
// (same inputs, same options, same one-off status, every output still on disk at its recorded size) and the
// step is not forced, run is not called and that record is returned with skipped = true. Otherwise run does
// the work and returns the files it wrote and its result (stored as JSON, so a later skip can show the same
// result), and the run is recorded. A failure to save the state is reported as a warning on rep: the stage
// itself succeeded.
//
// On a nil Workspace (no workspace here) run is called and nothing is recorded; the returned record then
// carries the artifacts and result but is not saved anywhere.
func (w *Workspace) Run(s Step, rep pipeline.Reporter, run func() ([]pipeline.Artifact, any, error)) (rec *Record, skipped bool, err error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	key := s.Key()
	if w != nil && !s.Force {
		if r := w.UpToDate(s.Stage, key); r != nil && r.OneOff == s.OneOff {
			return r, true, nil
		}
	}
	arts, result, err := run()
	if err != nil {
		return nil, false, err
	}
	r := Record{Stage: s.Stage, Key: key, Options: s.Options, Artifacts: arts, OneOff: s.OneOff,
		Inputs: map[string]string{}, InputPaths: map[string]string{}}
	for _, in := range s.Inputs {
		r.Inputs[in.Name] = in.Fingerprint
		r.InputPaths[in.Name] = in.Path
	}
	if result != nil {
		if r.Result, err = json.Marshal(result); err != nil {
			return nil, false, fmt.Errorf("workspace: %s result: %w", s.Stage, err)
		}
	}
	if w == nil {
		return &r, false, nil
	}
	if err := w.Record(r); err != nil {
		rep.Note(pipeline.Warn, fmt.Sprintf("workspace state not updated: %v", err))
	}
	return w.State.Records[len(w.State.Records)-1], false, nil
}

// Reset forgets the records of the given stages (every stage when none is given) and saves the state, so
// their next runs start over. Files are left alone. It returns the records it removed.
func (w *Workspace) Reset(stages ...string) ([]*Record, error) {
	var kept, removed []*Record
	for _, r := range w.State.Records {
		if len(stages) == 0 || contains(stages, r.Stage) {
			removed = append(removed, r)
		} else {
			kept = append(kept, r)
		}
	}
	w.State.Records = kept
	return removed, w.save()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Stages is the workspace's stage graph in pipeline order: each stage with the stages whose outputs it can
// take as its input. A stage that ran before one of those ran again is stale: its next plain run would read
// the newer output.
var Stages = []struct {
	Name     string
	Upstream []string
}{
	{"merge", nil},
	{"convert", []string{"merge"}},
	{"imatrix", []string{"convert"}},
	{"quantize", []string{"convert", "merge", "imatrix"}},
	{"eval", []string{"quantize"}},
	{"publish", []string{"quantize"}},
	{"ship", []string{"quantize", "publish"}},
}

// Stage states in a Status.
const (
	NotRun   = "not run"
	UpToDate = "up to date"
	Stale    = "stale"
	Missing  = "missing"
)

// StageStatus is one stage of the graph: its newest own (not one-off) run and whether that is still good.
type StageStatus struct {
	Stage   string              `json:"stage"`
	State   string              `json:"state"`         // NotRun, UpToDate, Stale or Missing
	Why     string              `json:"why,omitempty"` // what made it stale or missing
	Inputs  []Input             `json:"inputs,omitempty"`
	Outputs []pipeline.Artifact `json:"outputs,omitempty"`
	Record  *Record             `json:"-"`
	OneOffs int                 `json:"one_off_runs,omitempty"` // recorded one-off runs (not part of the chain)
}

// Status checks every stage of the graph against the files on disk: outputs still there at their recorded
// size, inputs with the fingerprints they had, no upstream stage run again since.
func (w *Workspace) Status() []StageStatus {
	out := make([]StageStatus, 0, len(Stages))
	byStage := map[string]*StageStatus{}
	for _, g := range Stages {
		st := StageStatus{Stage: g.Name, State: NotRun}
		for _, r := range w.State.Records {
			if r.Stage == g.Name && r.OneOff {
				st.OneOffs++
			}
		}
		r := w.Latest(g.Name)
		if r != nil {
			st.Record = r
			st.Outputs = r.Artifacts
			st.Inputs = r.inputList()
			st.State, st.Why = w.check(r)
			if st.State == UpToDate {
				for _, u := range g.Upstream {
					us := byStage[u]
					if us == nil || us.Record == nil {
						continue
					}
					if us.Record.Time.After(r.Time) {
						st.State, st.Why = Stale, fmt.Sprintf("%s ran again after it (%s)", u, us.Record.Time.Local().Format("2006-01-02 15:04"))
						break
					}
					if us.State == Stale && r.consumed(w, us.Record) {
						st.State, st.Why = Stale, fmt.Sprintf("its input comes from %s, which is stale", u)
						break
					}
				}
			}
		}
		out = append(out, st)
		byStage[g.Name] = &out[len(out)-1]
	}
	return out
}

// check says whether a record's outputs and inputs are as it left them.
func (w *Workspace) check(r *Record) (state, why string) {
	for _, a := range r.Artifacts {
		if isURL(a.Path) {
			continue
		}
		st, err := os.Stat(w.Path(a.Path))
		switch {
		case err != nil:
			return Missing, fmt.Sprintf("output %s is gone", a.Path)
		case !st.IsDir() && st.Size() != a.Size:
			return Missing, fmt.Sprintf("output %s changed (%d bytes, recorded %d)", a.Path, st.Size(), a.Size)
		}
	}
	for _, in := range r.inputList() {
		if in.Path == "" || isURL(in.Path) {
			continue
		}
		fp, err := Fingerprint(w.Path(in.Path))
		if err != nil {
			return Stale, fmt.Sprintf("input %s %s is gone", in.Name, in.Path)
		}
		if want, _, _ := strings.Cut(in.Fingerprint, "*"); fp != want {
			return Stale, fmt.Sprintf("input %s %s changed", in.Name, in.Path)
		}
	}
	return UpToDate, ""
}

// inputList is the record's inputs with their paths, sorted by name.
func (r *Record) inputList() []Input {
	var out []Input
	for _, name := range sortedKeys(r.Inputs) {
		out = append(out, Input{Name: name, Path: r.InputPaths[name], Fingerprint: r.Inputs[name]})
	}
	return out
}

// consumed reports whether r read one of up's outputs.
func (r *Record) consumed(w *Workspace, up *Record) bool {
	for _, p := range r.InputPaths {
		for _, a := range up.Artifacts {
			if samePath(w.Path(p), w.Path(a.Path)) {
				return true
			}
		}
	}
	return false
}
