package merge

import (
	"context"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
)

// procsWatch is a Reporter that records GOMAXPROCS each time the merge reports progress.
type procsWatch struct {
	mu   sync.Mutex
	seen map[int]bool
}

func (p *procsWatch) look() {
	p.mu.Lock()
	p.seen[runtime.GOMAXPROCS(0)] = true
	p.mu.Unlock()
}
func (p *procsWatch) Begin(string, int64)         { p.look() }
func (p *procsWatch) Add(int64)                   { p.look() }
func (p *procsWatch) End(string, error)           { p.look() }
func (p *procsWatch) Note(pipeline.Level, string) {}

// TestRunLeavesGOMAXPROCS: a library must not change process-wide settings; the merge used to double
// GOMAXPROCS while it wrote (raiseProcs), which also switches off the runtime's container-aware updates.
func TestRunLeavesGOMAXPROCS(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen3")
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 3})
	want := runtime.GOMAXPROCS(0)
	w := &procsWatch{seen: map[int]bool{}}
	if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: filepath.Join(dir, "out")}, w); err != nil {
		t.Fatal(err)
	}
	for n := range w.seen {
		if n != want {
			t.Errorf("GOMAXPROCS was %d during the merge, %d before", n, want)
		}
	}
}
