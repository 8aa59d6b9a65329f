package phone

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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

// TestEntrypointRefusesPathsInConfig is issue 14's bundle item on the phone side: the entrypoint joined
// config.json's model.file into its storage path unchecked, so "../../../../x.gguf" wrote outside the job's
// storage. Now it refuses such a config at start, naming the field, and writes nothing anywhere.
func TestEntrypointRefusesPathsInConfig(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required (scripts/setup.sh installs it)")
	}
	b, err := fs.ReadFile(Files(), Entrypoint)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	storage := filepath.Join(root, "job", "storage")
	bundle := filepath.Join(root, "bundle")
	for _, d := range []string{storage, bundle} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bundle, Entrypoint), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// A minimal _STD_: enough for the entrypoint to reach its download step if it accepted the config.
	std := filepath.Join(root, "std.cjs")
	stdJS := `globalThis._STD_ = { env: {}, job: { storageDir: ` + strconv.Quote(storage) + ` }, llama: { server: { start() {} } } };`
	if err := os.WriteFile(std, []byte(stdJS), 0o644); err != nil {
		t.Fatal(err)
	}
	sha := strings.Repeat("ab", 32)
	for _, file := range []string{"../../../../x.gguf", "/tmp/x.gguf", "sub/x.gguf", "..", ".hidden", `..\x.gguf`} {
		cfg := map[string]any{"model": map[string]any{"url": "http://127.0.0.1:9/m.gguf", "size": 10, "sha256": sha, "file": file},
			"ctx": 512, "slots": 1, "candidates": []map[string]int{{"threads": 1}}, "listen": "127.0.0.1:0",
			"tunnel": map[string]any{"server_addrs": []string{"x:1"}, "domain_suffix": "acu.run"}, "bench": map[string]any{"prompt": "x", "max_tokens": 1}}
		cj, _ := json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), cj, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
		out, err := exec.CommandContext(ctx, node, "--require", std, filepath.Join(bundle, Entrypoint)).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "model.file") || !strings.Contains(string(out), "plain file name") {
			t.Errorf("model.file %q: exit %v, output %s", file, err, out)
		}
		var written []string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && p != std && filepath.Dir(p) != bundle {
				written = append(written, p)
			}
			return nil
		})
		if len(written) > 0 {
			t.Errorf("model.file %q: the entrypoint wrote %v", file, written)
		}
	}
}
