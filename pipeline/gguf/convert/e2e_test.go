package convert

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/golden"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// generate writes a tinymodel preset into a temporary directory.
func generate(t testing.TB, spec tinymodel.Spec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := tinymodel.Generate(dir, spec); err != nil {
		t.Fatalf("generate %s: %v", spec.Name, err)
	}
	return dir
}

func dumpFile(t testing.TB, path string) []byte {
	t.Helper()
	f, err := gguf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if err := gguf.Dump(&buf, f, true); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGoldenPresets converts every tinymodel preset and compares a readable dump (KVs, then name, type,
// shape and sha256 of every tensor) with testdata/<preset>.dump. Run with -update to rewrite them.
func TestGoldenPresets(t *testing.T) {
	for _, spec := range tinymodel.Presets() {
		t.Run(spec.Name, func(t *testing.T) {
			dir := generate(t, spec)
			out := filepath.Join(t.TempDir(), "out.gguf")
			res, err := Run(context.Background(), Options{Model: dir, Out: out, Name: spec.Name}, pipeline.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Artifacts) != 1 || res.Artifacts[0].Path != out || res.Artifacts[0].SHA256 == "" {
				t.Fatalf("artifacts = %+v", res.Artifacts)
			}
			got := dumpFile(t, out)
			golden.Check(t, filepath.Join("testdata", spec.Name+".dump"), got)
		})
	}
}
