package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline"
)

func TestInitFindRecord(t *testing.T) {
	root := t.TempDir()
	var p Project
	p.Name, p.Base, p.Quant = "demo", "base", "q4_k_m"
	if _, err := Init(root, p, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Init(root, p, false); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second init: %v", err)
	}
	sub := filepath.Join(root, "a", "b")
	os.MkdirAll(sub, 0o755)
	w, err := Find(sub)
	if err != nil {
		t.Fatal(err)
	}
	if w.Project.Name != "demo" || w.Project.Quant != "q4_k_m" {
		t.Fatalf("project %+v", w.Project)
	}
	out := filepath.Join(root, "m.gguf")
	os.WriteFile(out, []byte("12345"), 0o644)
	key := Key(map[string]string{"base": "x"}, map[string]any{"type": "q4_k_m"})
	if w.UpToDate("quantize", key) != nil {
		t.Fatal("up to date before any record")
	}
	err = w.Record(Record{Stage: "quantize", Key: key, Artifacts: []pipeline.Artifact{{Path: out, Kind: "gguf", Size: 5, SHA256: "ab"}}})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if w2.UpToDate("quantize", key) == nil {
		t.Fatal("record not found after reopen")
	}
	a, ok := w2.LatestArtifact("gguf", "quantize")
	if !ok || a.Path != out {
		t.Fatalf("latest artifact %+v %v", a, ok)
	}
	// A changed artifact (size) makes the stage stale; a different key never matches.
	os.WriteFile(out, []byte("123456"), 0o644)
	if w2.UpToDate("quantize", key) != nil {
		t.Fatal("stale artifact reported up to date")
	}
	if w2.UpToDate("quantize", Key(nil, map[string]any{"type": "q8_0"})) != nil {
		t.Fatal("other key matched")
	}
}

func TestFingerprintChanges(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "w.safetensors")
	os.WriteFile(f, []byte("aaaa"), 0o644)
	a, err := Fingerprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Fingerprint(dir)
	if a != b {
		t.Fatal("fingerprint not stable")
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(f, later, later)
	if c, _ := Fingerprint(dir); c == a {
		t.Fatal("mtime change not seen")
	}
}

func TestUnknownField(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, FileName), []byte("name: x\nquantt: q4\n"), 0o644)
	if _, err := Open(root); err == nil || !strings.Contains(err.Error(), "quantt") {
		t.Fatalf("unknown field not reported: %v", err)
	}
}

func TestURLArtifactsKept(t *testing.T) {
	root := t.TempDir()
	w, err := Init(root, Project{Name: "m"}, false)
	if err != nil {
		t.Fatal(err)
	}
	url := "https://huggingface.co/me/m/resolve/main/m-Q4_K_M.gguf"
	if err := w.Record(Record{Stage: "publish", Key: "k", Artifacts: []pipeline.Artifact{{Path: url, Kind: "hub-file"}}}); err != nil {
		t.Fatal(err)
	}
	w, _ = Open(root)
	if a, ok := w.LatestArtifact("hub-file", "publish"); !ok || a.Path != url {
		t.Fatalf("artifact %+v", a)
	}
}

// TestRunSkipsRecordsAndOneOffs: Run skips an up-to-date step without calling the stage, records a new one,
// and keeps one-off runs out of what later stages read.
func TestRunSkipsRecordsAndOneOffs(t *testing.T) {
	root := t.TempDir()
	w, err := Init(root, Project{Name: "m"}, false)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(root, "base")
	os.WriteFile(base, []byte("weights"), 0o644)
	in, err := NewInput("base", base, "")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "m.gguf")
	calls := 0
	stage := func(path, body string) func() ([]pipeline.Artifact, any, error) {
		return func() ([]pipeline.Artifact, any, error) {
			calls++
			os.WriteFile(path, []byte(body), 0o644)
			return []pipeline.Artifact{{Path: path, Kind: "gguf", Size: int64(len(body))}}, map[string]int{"bpw": 5}, nil
		}
	}
	step := Step{Stage: "quantize", Inputs: []Input{in}, Options: map[string]any{"type": "q4_k_m"}}
	if _, skipped, err := w.Run(step, nil, stage(out, "q4")); err != nil || skipped || calls != 1 {
		t.Fatalf("first run: skipped %v err %v calls %d", skipped, err, calls)
	}
	rec, skipped, err := w.Run(step, nil, stage(out, "q4"))
	if err != nil || !skipped || calls != 1 || string(rec.Result) != `{"bpw":5}` {
		t.Fatalf("second run: skipped %v err %v calls %d result %s", skipped, err, calls, rec.Result)
	}
	step.Force = true
	if _, skipped, _ := w.Run(step, nil, stage(out, "q4")); skipped || calls != 2 {
		t.Fatalf("forced run skipped")
	}
	// A one-off run with another output: recorded, never read by later stages.
	other := filepath.Join(t.TempDir(), "scratch.gguf")
	oneOff := Step{Stage: "quantize", Inputs: []Input{in}, Options: map[string]any{"type": "q4_k_m", "out": other}, OneOff: true}
	if _, _, err := w.Run(oneOff, nil, stage(other, "scratch")); err != nil {
		t.Fatal(err)
	}
	w, _ = Open(root)
	if a, ok := w.LatestArtifact("gguf", "quantize"); !ok || a.Path != out {
		t.Fatalf("latest artifact %+v: a one-off output became the workspace's", a)
	}
	if r := w.Latest("quantize"); r == nil || r.OneOff {
		t.Fatalf("Latest returned a one-off record")
	}
	// A deleted output is not an input, and its stage is missing; a changed input makes it stale.
	st := statusOf(w, "quantize")
	if st.State != UpToDate || st.OneOffs != 1 {
		t.Fatalf("status %+v", st)
	}
	os.WriteFile(base, []byte("new weights"), 0o644)
	if st := statusOf(w, "quantize"); st.State != Stale || !strings.Contains(st.Why, "base") {
		t.Fatalf("after the base changed: %+v", st)
	}
	os.Remove(out)
	if _, ok := w.LatestArtifact("gguf", "quantize"); ok {
		t.Fatal("a deleted output is still offered as an input")
	}
	if st := statusOf(w, "quantize"); st.State != Missing {
		t.Fatalf("after the output was deleted: %+v", st)
	}
	removed, err := w.Reset("quantize")
	if err != nil || len(removed) != 2 { // the forced run replaced the first record (same key)
		t.Fatalf("reset: %d records, %v", len(removed), err)
	}
	w, _ = Open(root)
	if len(w.State.Records) != 0 || statusOf(w, "quantize").State != NotRun {
		t.Fatalf("records left after reset: %d", len(w.State.Records))
	}
}

// TestStatusUpstreamNewer: a stage is stale when a stage it reads from ran after it.
func TestStatusUpstreamNewer(t *testing.T) {
	root := t.TempDir()
	w, _ := Init(root, Project{Name: "m"}, false)
	mk := func(stage, file string, at time.Time) {
		p := filepath.Join(root, file)
		os.WriteFile(p, []byte(stage), 0o644)
		if err := w.Record(Record{Stage: stage, Key: stage + file, Time: at,
			Artifacts: []pipeline.Artifact{{Path: p, Size: int64(len(stage))}}}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	mk("merge", "merged", now.Add(-time.Hour))
	mk("quantize", "q.gguf", now.Add(-time.Minute))
	if st := statusOf(w, "quantize"); st.State != UpToDate {
		t.Fatalf("%+v", st)
	}
	mk("merge", "merged2", now)
	if st := statusOf(w, "quantize"); st.State != Stale || !strings.Contains(st.Why, "merge ran again") {
		t.Fatalf("%+v", st)
	}
}

func statusOf(w *Workspace, stage string) StageStatus {
	for _, s := range w.Status() {
		if s.Stage == stage {
			return s
		}
	}
	return StageStatus{}
}
