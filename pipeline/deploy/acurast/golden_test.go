package acurast

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/golden"
)

// TestGoldenProject pins acurast.json's vocabulary and the deploy call bytes of a fixed project (the SDK
// cross-check in sdk_test.go is what makes them right; this keeps them from drifting unnoticed).
func TestGoldenProject(t *testing.T) {
	p := baseProject()
	call, err := EncodeDeployCallHex(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.MarshalIndent(ConfigFile{Projects: map[string]ProjectConfig{p.ProjectName: p}}, "", "  ")
	got := append(append(cfg, '\n'), []byte("deploy call: "+call+"\n")...)
	path := filepath.Join("testdata", "project.golden")
	if golden.Update() {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("project/call changed; review and run with -update:\n%s", got)
	}
}
