package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/pipeline/publish"
	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// TestPublishThenFetch publishes a quantized GGUF with its model card to the test Hub through the CLI, then
// fetches it back by hf:// reference (the path serve and fit use), verified by size and sha256; a tampered
// cache entry is detected and fetched again.
func TestPublishThenFetch(t *testing.T) {
	hub := hubtest.Start(t, hubtest.Config{User: "me"})
	home := t.TempDir()
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", hub.Token())
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")

	dir := tinyCheckpoint(t, "qwen3")
	out := t.TempDir()
	q := filepath.Join(out, "tiny-Q4_K_M.gguf")
	if code, _, e := runCLI(t, context.Background(), "quantize", "q4_k_m", "--model", dir, "-o", q); code != 0 {
		t.Fatalf("quantize: %s", e)
	}
	code, stdout, e := runCLI(t, context.Background(), "publish", "--repo", "me/tiny", q, "--json")
	if code != 0 {
		t.Fatalf("publish: %d %s", code, e)
	}
	var res publish.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || !res.Verified || res.CommitURL == "" {
		t.Fatalf("publish result %+v (%v)", res, err)
	}
	var sawCard bool
	for _, f := range res.Files {
		sawCard = sawCard || f.Path == "README.md"
	}
	if !sawCard {
		t.Error("no README.md model card published")
	}
	// Fetch by reference: fit downloads it into the HF cache and checks it.
	ref := "hf://me/tiny/tiny-Q4_K_M.gguf"
	if code, _, e := runCLI(t, context.Background(), "fit", ref, "--phone", "8gb"); code != 0 {
		t.Fatalf("fit %s: %d %s", ref, code, e)
	}
	blobs, _ := filepath.Glob(filepath.Join(home, "hub", "models--me--tiny", "blobs", "*"))
	var blob string
	for _, b := range blobs {
		if st, _ := os.Stat(b); st != nil && st.Size() > 1000 && !strings.HasSuffix(b, ".lock") {
			blob = b
		}
	}
	if blob == "" {
		t.Fatalf("no cached blob in %v", blobs)
	}
	data, _ := os.ReadFile(blob)
	data[len(data)/2] ^= 0xff
	os.WriteFile(blob, data, 0o644)
	if code, _, e := runCLI(t, context.Background(), "fit", ref, "--phone", "8gb"); code != 0 {
		t.Fatalf("fit after tampering: %d %s", code, e)
	}
	orig, _ := os.ReadFile(q)
	again, _ := os.ReadFile(blob)
	if string(orig) != string(again) {
		t.Fatal("tampered cache entry was not re-fetched")
	}
}

// TestInitFromHub: `init --base ORG/NAME` downloads the checkpoint's files (not other formats) from the Hub
// into the HF cache, verified, and later stages run from that snapshot.
func TestInitFromHub(t *testing.T) {
	hub := hubtest.Start(t, hubtest.Config{User: "me"})
	home := t.TempDir()
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", hub.Token())
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	dir := tinyCheckpoint(t, "qwen3")
	files := map[string][]byte{"model.Q8_0.gguf": []byte("not part of a checkpoint")}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	if _, err := hub.Seed("acme/tiny-qwen3", "main", files); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	t.Setenv("PHONELLM_WORKSPACE", ws)
	code, out, e := runCLI(t, context.Background(), "init", "--dir", ws, "--base", "acme/tiny-qwen3", "--json")
	if code != 0 {
		t.Fatalf("init: %d %s", code, e)
	}
	var res initResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Arch != "Qwen3ForCausalLM" {
		t.Fatalf("init result %q (%v)", out, err)
	}
	if !strings.HasPrefix(res.BaseDir, filepath.Join(home, "hub", "models--acme--tiny-qwen3", "snapshots")) {
		t.Errorf("base not in the HF cache layout: %s", res.BaseDir)
	}
	if _, err := os.Stat(filepath.Join(res.BaseDir, "model.Q8_0.gguf")); err == nil {
		t.Error("a file that is not part of the checkpoint was downloaded")
	}
	q := filepath.Join(ws, "q.gguf")
	if code, _, e := runCLI(t, context.Background(), "quantize", "q8_0", "-o", q); code != 0 {
		t.Fatalf("quantize from the Hub base: %s", e)
	}
}

// TestCardQualityFromEval: the newest eval result in the workspace becomes the card's quality rows.
func TestCardQualityFromEval(t *testing.T) {
	dir := t.TempDir()
	ws, err := workspace.Init(dir, workspace.Project{Name: "m"}, false)
	if err != nil {
		t.Fatal(err)
	}
	res := eval.Result{Distribution: &eval.DistResult{Reference: "/x/m-F16.gguf", Candidate: "/x/m-Q4_K_M.gguf",
		MeanKLD: 0.0123, Top1: 0.91, PPLReference: 7.5, PPLCandidate: 7.7}}
	if err := ws.Record(workspace.Record{Stage: "eval", Key: "k", Options: map[string]any{"result": res}}); err != nil {
		t.Fatal(err)
	}
	ws, _ = workspace.Open(dir) // as publish sees it: the result went through JSON
	rows := qualityRows(ws)
	if len(rows) != 3 || rows[0].Value != "0.01230" || rows[1].Value != "91.0 %" || rows[0].File != "m-Q4_K_M.gguf" {
		t.Fatalf("rows %+v", rows)
	}
}
