package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// TestShipAcurastDryRun runs the acurast target's dry run from a workspace whose model was published: it builds
// the bundle, writes acurast.json and prints the plan, signs and sends nothing, and leaks no secret.
func TestShipAcurastDryRun(t *testing.T) {
	base := tinyCheckpoint(t, "qwen3")
	dir := t.TempDir()
	t.Setenv("PHONELLM_WORKSPACE", dir)
	t.Setenv("PHONELLM_HOME", t.TempDir())
	const key = "sk-test-secret-key-0123456789"
	t.Setenv("PHONELLM_API_KEY", key)
	if code, _, e := runCLI(t, context.Background(), "init", "--dir", dir, "--base", base, "--name", "tiny"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	if code, _, e := runCLI(t, context.Background(), "quantize", "q4_k_m"); code != 0 {
		t.Fatalf("quantize: %s", e)
	}
	ws, err := workspace.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	art, ok := ws.LatestArtifact("gguf", "quantize")
	if !ok {
		t.Fatal("no quantized artifact recorded")
	}
	// Pretend it was published: ship takes the resolve URL and sha256 from the publish record.
	url := "https://huggingface.co/me/tiny/resolve/0123456789abcdef0123456789abcdef01234567/tiny-Q4_K_M.gguf"
	if err := ws.Record(workspace.Record{Stage: "publish", Key: "p", Artifacts: []pipeline.Artifact{
		{Path: url, Kind: publishedKind, Size: art.Size, SHA256: art.SHA256}}}); err != nil {
		t.Fatal(err)
	}
	code, out, e := runCLI(t, context.Background(), "ship", "--target", "acurast", "--replicas", "2", "--phone", "8gb",
		"--api-key-env", "PHONELLM_API_KEY", "--dry-run", "--json")
	if code != 0 {
		t.Fatalf("ship --dry-run: %d %s", code, e)
	}
	var res shipResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Plan == nil || res.Bundle == nil {
		t.Fatalf("result %q (%v)", out, err)
	}
	if len(res.Plan.Calls) != 2 || !strings.HasPrefix(res.Plan.Script, "ipfs://") {
		t.Errorf("plan: %d deploy calls, script %q", len(res.Plan.Calls), res.Plan.Script)
	}
	if strings.Contains(out+e, key) {
		t.Error("the API key appears in ship's output")
	}
	cfg, err := os.ReadFile(res.Plan.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := os.ReadFile(res.Bundle.Path)
	for name, b := range map[string][]byte{"acurast.json": cfg, "bundle": bundle} {
		if strings.Contains(string(b), key) {
			t.Errorf("the API key appears in %s", name)
		}
	}
	if !strings.Contains(string(cfg), "minRamTotalBytes") || !strings.Contains(string(cfg), "7200000000") {
		t.Errorf("acurast.json lacks the 8gb profile's minRamTotalBytes: %s", cfg)
	}
	if filepath.Dir(res.Bundle.Path) != filepath.Join(dir, ".phonellm", "acurast") {
		t.Errorf("bundle at %s", res.Bundle.Path)
	}
}
