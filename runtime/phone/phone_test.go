package phone

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmbeddedEntrypoint(t *testing.T) {
	b, err := fs.ReadFile(Files(), Entrypoint)
	if err != nil {
		t.Fatal(err)
	}
	// It must read secrets only from _STD_.env and never embed a value.
	for _, want := range []string{"_STD_", "timingSafeEqual", "llama.server.start", "tunnel.start", "range"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("entrypoint lacks %q", want)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required (scripts/setup.sh installs it)")
	}
	p := filepath.Join(t.TempDir(), Entrypoint)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(node, "--check", p).CombinedOutput(); err != nil {
		t.Fatalf("node --check: %v\n%s", err, out)
	}
	// Without _STD_ (not on a processor) and without config.json it fails cleanly, naming the problem.
	out, _ := exec.Command(node, p).CombinedOutput()
	if !strings.Contains(string(out), "config.json not found") {
		t.Fatalf("run without config: %s", out)
	}
}
