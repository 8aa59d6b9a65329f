package oracle

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckInstalled(t *testing.T) {
	pins := map[string]string{"node-llama-cpp": "3.22.1", "@node-llama-cpp/linux-x64": "3.22.1"}
	root := t.TempDir()
	if err := checkInstalled(root, pins); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("empty dir: %v", err)
	}
	writeFile(t, filepath.Join(root, "node_modules/node-llama-cpp/package.json"), `{"version":"3.22.1"}`)
	writeFile(t, filepath.Join(root, "node_modules/@node-llama-cpp/linux-x64/package.json"), `{"version":"3.21.1"}`)
	if err := checkInstalled(root, pins); err == nil || !strings.Contains(err.Error(), "3.21.1") {
		t.Fatalf("wrong version: %v", err)
	}
	writeFile(t, filepath.Join(root, "node_modules/@node-llama-cpp/linux-x64/package.json"), `{"version":"3.22.1"}`)
	if err := checkInstalled(root, pins); err == nil || !strings.Contains(err.Error(), "llama-addon.node") {
		t.Fatalf("no binary: %v", err)
	}
	writeFile(t, filepath.Join(root, "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node"), "\x7fELF")
	if err := checkInstalled(root, pins); err != nil {
		t.Fatalf("complete install: %v", err)
	}
}

func TestReadPinsMatchesPackageJSON(t *testing.T) {
	dir, err := scriptDir()
	if err != nil {
		t.Fatal(err)
	}
	pins, err := readPins(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Exact pins only: a range would let npm pick a release whose llama.cpp differs from the one the
	// reference notes were checked against.
	for name, v := range pins {
		if strings.ContainsAny(v, "^~<>=*xX| ") {
			t.Errorf("%s pinned as %q, want an exact version", name, v)
		}
	}
	if pins["node-llama-cpp"] != pins["@node-llama-cpp/linux-x64"] || pins["node-llama-cpp"] == "" {
		t.Errorf("node-llama-cpp %q and its linux-x64 binary %q must be pinned to the same version",
			pins["node-llama-cpp"], pins["@node-llama-cpp/linux-x64"])
	}
}

func TestAvailableReportsMissingInstall(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	err := Available()
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), SetupCommand) {
		t.Fatalf("Available with an empty %s: %v", EnvDir, err)
	}
	t.Setenv(EnvNode, "phonellm-no-such-node-binary")
	if err := Available(); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "node") {
		t.Fatalf("Available without node: %v", err)
	}
}

func TestDecodeFloats(t *testing.T) {
	vals := []float32{0, -1.5, float32(math.Pi), math.SmallestNonzeroFloat32, -math.MaxFloat32}
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	s := base64.StdEncoding.EncodeToString(b)
	got, err := decodeFloats(s, len(vals))
	if err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		if math.Float32bits(got[i]) != math.Float32bits(vals[i]) {
			t.Fatalf("value %d: %v, want %v", i, got[i], vals[i])
		}
	}
	if _, err := decodeFloats(s, len(vals)+1); err == nil {
		t.Fatal("wrong count accepted")
	}
	if _, err := decodeFloats("%%%", 1); err == nil {
		t.Fatal("bad base64 accepted")
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 8}
	tb.Write([]byte("hello "))
	tb.Write([]byte("world!"))
	if got := tb.String(); got != "o world!" {
		t.Fatalf("tail %q", got)
	}
}

type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }
func (f *fakeTB) Skipf(format string, args ...any)  { f.skip = fmt.Sprintf(format, args...) }
func (f *fakeTB) Skip(args ...any)                  { f.skip = fmt.Sprint(args...) }

// TestRequireAvailableSkipsOrFails: the one rule for a missing oracle: skip, or fail when
// PHONELLM_REQUIRE_ORACLE=1 (what scripts/test.sh and CI set).
func TestRequireAvailableSkipsOrFails(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	t.Setenv(RequireEnv, "")
	f := &fakeTB{}
	requireAvailable(f)
	if f.fatal != "" || !strings.Contains(f.skip, "not available") {
		t.Fatalf("not required: fatal %q skip %q, want a skip", f.fatal, f.skip)
	}
	t.Setenv(RequireEnv, "1")
	f = &fakeTB{}
	requireAvailable(f)
	if f.skip != "" || !strings.Contains(f.fatal, "required: "+RequireEnv) {
		t.Fatalf("required: fatal %q skip %q, want a failure", f.fatal, f.skip)
	}
	f = &fakeTB{}
	RequireModule(f, "PHONELLM_NO_SUCH_DIR", "no-such-module/index.mjs")
	if f.skip != "" || f.fatal == "" {
		t.Fatalf("RequireModule does not follow the same rule: fatal %q skip %q", f.fatal, f.skip)
	}
}
