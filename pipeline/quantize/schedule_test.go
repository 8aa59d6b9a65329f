package quantize

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// TestLargeTensorRunsOnEveryWorker: the chunks of one tensor go to whichever worker is free, so a large tensor
// (the output head at the end of a real plan) keeps every thread busy instead of running on one while the
// others idle. The first reads of token_embd.weight wait until two workers read it at the same time; a
// scheduler that gave a tensor to a single worker would never get there (the wait gives up after 20 s, a hang
// guard, and the test fails).
func TestLargeTensorRunsOnEveryWorker(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.gguf")
	writeF16Model(t, in, 1, 256, 512, 4096) // token_embd: 4096 rows of 256, four chunks
	src, err := OpenGGUF(in)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	guard, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var inflight atomic.Int32
	both := make(chan struct{})
	var once sync.Once
	found := false
	for i := range src.Tensors {
		st := &src.Tensors[i]
		if st.Name != "token_embd.weight" {
			continue
		}
		found = true
		read := st.ReadRows
		st.ReadRows = func(ctx context.Context, row0, n int64, dst []float32) ([]float32, error) {
			if inflight.Add(1) >= 2 {
				once.Do(func() { close(both) })
			}
			defer inflight.Add(-1)
			select {
			case <-both:
			case <-guard.Done():
			}
			return read(ctx, row0, n, dst)
		}
	}
	if !found {
		t.Fatal("no token_embd.weight in the test model")
	}
	out := filepath.Join(dir, "out.gguf")
	if _, err := Run(context.Background(), Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: out, Threads: 2}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-both:
	default:
		t.Fatal("two workers never read token_embd.weight at the same time: the tensor ran on one worker")
	}
}
