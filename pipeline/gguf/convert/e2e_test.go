package convert

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

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
			golden := filepath.Join("testdata", spec.Name+".dump")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("dump differs from %s (run with -update after checking):\n%s", golden, firstDiff(string(want), string(got)))
			}
		})
	}
}

func firstDiff(want, got string) string {
	wl, gl := bytes.Split([]byte(want), []byte("\n")), bytes.Split([]byte(got), []byte("\n"))
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, w, g)
		}
	}
	return ""
}
