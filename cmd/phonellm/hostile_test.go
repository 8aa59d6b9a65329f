package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/hostile"
)

// TestQuantizeNameFromHostileMetadata: quantize names its default output after general.name, which a stranger's
// file sets; "../../escape" would have written outside the output folder. Such a name is ignored (with a
// warning) and the output is named after the input file.
func TestQuantizeNameFromHostileMetadata(t *testing.T) {
	dir := t.TempDir()
	all, err := hostile.Corpus(context.Background(), filepath.Join(dir, "corpus"))
	if err != nil {
		t.Fatal(err)
	}
	var m hostile.Mutant
	for _, x := range all {
		if x.Name == "qwen3-f16/metadata/general.name path traversal" {
			m = x
		}
	}
	if m.Name == "" {
		t.Fatal("no path traversal mutant")
	}
	work := filepath.Join(dir, "a", "b", "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(work, "model.gguf")
	if err := m.Write(in); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PHONELLM_HOME", filepath.Join(dir, "home"))
	t.Chdir(work)
	code, _, errOut := runCLI(t, context.Background(), "quantize", "q8_0", "--in", in, "--threads", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(work, "model-Q8_0.gguf")); err != nil {
		t.Errorf("output not named after the input: %v", err)
	}
	for _, p := range []string{filepath.Join(dir, "a", "escape-Q8_0.gguf"), filepath.Join(work, "..", "..", "escape-Q8_0.gguf")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("wrote %s", p)
		}
	}
	if !strings.Contains(errOut, "cannot name a file") {
		t.Errorf("no warning: %s", errOut)
	}
}
