package merge

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
)

// TestReplaceOutputWithoutWindow: merging into an earlier merge output replaces it while the final name always
// holds a complete merge (issue 14: there was a window with nothing at the final name), and temporaries that
// killed runs left next to the output are removed.
func TestReplaceOutputWithoutWindow(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the swap without a window is Linux's renameat2")
	}
	dir := t.TempDir()
	spec := preset(t, "qwen3")
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 1, TargetModules: []string{"q_proj"}})
	out := filepath.Join(dir, "merged")
	if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil); err != nil {
		t.Fatal(err)
	}

	// A run killed with SIGKILL left its temporary folder: named after a process that no longer exists.
	c := exec.Command(os.Args[0], "-test.run=^$")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, fmt.Sprintf(".merged.tmp-%d-123", c.Process.Pid))
	if err := os.MkdirAll(filepath.Join(stale, "half"), 0o755); err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	var missing atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if _, err := os.Stat(filepath.Join(out, ProvenanceName)); errors.Is(err, fs.ErrNotExist) {
				missing.Add(1)
			}
		}
	}()
	for i := range 3 {
		if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad, Weight: 0.5 + float64(i)/10}}, Out: out}, nil); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := missing.Load(); n > 0 {
		t.Fatalf("the output had no %s %d times while it was replaced", ProvenanceName, n)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".merged.") {
			t.Errorf("left %s", e.Name())
		}
	}
}
