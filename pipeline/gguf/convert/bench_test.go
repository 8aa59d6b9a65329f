package convert

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/memstat"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
)

// BenchmarkConvert converts a generated ~1.2 GB Qwen3-0.6B-shaped BF16 checkpoint to a BF16 GGUF and reports
// the peak Go heap (sampled with runtime/metrics) and the peak RSS of the process (VmHWM after resetting it
// through /proc/self/clear_refs, Linux only), next to the largest tensor's size. Run with
//
//	go test ./pipeline/gguf/convert -run '^$' -bench Convert -benchtime 1x
func BenchmarkConvert(b *testing.B) {
	spec := tinymodel.Qwen3BenchSpec()
	dir := filepath.Join(b.TempDir(), spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := tinymodel.Generate(dir, spec); err != nil {
		b.Fatal(err)
	}
	m, err := Load(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	var largest, total int64
	for i := range m.Tensors {
		n := m.Tensors[i].NumElements() * 2
		largest = max(largest, n)
		total += n
	}
	m.Close()
	out := filepath.Join(b.TempDir(), "out.gguf")
	runtime.GC()
	memstat.ResetPeak()
	b.SetBytes(total)
	b.ResetTimer()
	var peakHeap uint64
	for range b.N {
		stop := sampleHeap(&peakHeap)
		if _, err := Run(b.Context(), Options{Model: dir, Out: out}, pipeline.Discard); err != nil {
			b.Fatal(err)
		}
		stop()
	}
	b.StopTimer()
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	if rss := memstat.PeakRSS(); rss > 0 {
		b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
	}
	b.ReportMetric(float64(largest)/(1<<20), "largest-tensor-MiB")
}

// sampleHeap records the largest live heap object bytes every millisecond until stop is called.
func sampleHeap(peak *uint64) (stop func()) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			*peak = max(*peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
