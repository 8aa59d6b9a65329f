package tinymodel

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Generate must stream: the bytes it allocates stay far below the size of
// the checkpoint it writes (here ~80 MB of weights, two 40 MB tensors).
func TestGenerateStreams(t *testing.T) {
	s, _ := Preset("qwen3")
	s.VocabSize, s.TiedEmbeddings, s.NumLayers = 40000, false, 1
	if _, err := BuildTokenizer(mustNormalize(t, s)); err != nil { // warm the tokenizer cache
		t.Fatal(err)
	}
	dir := t.TempDir()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := Generate(dir, s); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	st, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	if st.Size() < 80e6 || alloc > 16<<20 {
		t.Errorf("wrote %d bytes allocating %d bytes; want >= 80e6 written with <= 16 MiB allocated", st.Size(), alloc)
	}
	t.Logf("wrote %d MB, allocated %.1f MB", st.Size()>>20, float64(alloc)/(1<<20))
}

func mustNormalize(t *testing.T, s Spec) Spec {
	t.Helper()
	n, err := s.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// BenchmarkGenerateQwen3Shape writes the ~1.2 GB Qwen3-0.6B-shaped
// checkpoint and reports throughput and the bytes allocated per run.
func BenchmarkGenerateQwen3Shape(b *testing.B) {
	s := Qwen3BenchSpec()
	n, _ := s.NumParams()
	b.SetBytes(2 * n)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	start := ms.TotalAlloc
	for range b.N {
		if err := Generate(b.TempDir(), s); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.TotalAlloc-start)/float64(b.N)/(1<<20), "MiB-alloc/op")
}
