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
