package eval

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// heapPeak samples the live heap objects every 200 µs until stop is called, and returns the peak.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

// BenchmarkKLDLongPrompt is the memory check of a 7k-token KLD run at Qwen's vocabulary (151,936): fake
// models evaluate in 55-position passes (the Go engine's Logits chunk for that vocabulary, 32 MiB each) and
// stream through the default 8-row queue. It reports the peak live heap, which must not grow with the
// prompt length (1k against 7k tokens).
func BenchmarkKLDLongPrompt(b *testing.B) {
	const vocab = 151936
	for _, n := range []int{1000, 7000} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			ref := &fakeModel{vocab: vocab, ctx: 8192, chunk: 55, failAt: -1}
			cand := &fakeModel{vocab: vocab, ctx: 8192, chunk: 55, noise: 0.2, seed: 3, failAt: -1}
			prompts := []Prompt{{Text: strings.Repeat("risk review of a payment; ", n/26+1)[:n]}}
			var peak uint64
			for b.Loop() {
				runtime.GC()
				stop := heapPeak()
				r, err := CompareDistributions(context.Background(), ref, cand, prompts, DistOptions{}, nil)
				p := stop()
				if err != nil {
					b.Fatal(err)
				}
				if r.Positions != n {
					b.Fatalf("%d positions", r.Positions)
				}
				peak = max(peak, p)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkCompareRow is the per-position cost of the comparison at Qwen's vocabulary.
func BenchmarkCompareRow(b *testing.B) {
	const vocab = 151936
	m := &fakeModel{vocab: vocab, noise: 0.2, seed: 1}
	ref, cand := make([]float32, vocab), make([]float32, vocab)
	(&fakeModel{}).row(7, ref)
	m.row(7, cand)
	var scratch []float64
	b.SetBytes(2 * 4 * vocab)
	for b.Loop() {
		if _, err := compareRow(ref, cand, 5, &scratch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKLD7kGoEngine runs the stage on the Go engine over a 7,000-token prompt (tiny Qwen3, F32 against
// Q4_K_M, one 8192-token window), reporting the peak live heap and the tokens compared per second.
func BenchmarkKLD7kGoEngine(b *testing.B) {
	dir := tinyModels(b, "qwen3")
	text, err := os.ReadFile("testdata/prompts.txt")
	if err != nil {
		b.Fatal(err)
	}
	prompt := filepath.Join(b.TempDir(), "long.txt")
	if err := os.WriteFile(prompt, bytes.Repeat(text, 20), 0o644); err != nil {
		b.Fatal(err)
	}
	o := Options{Dist: DistOptions{Reference: filepath.Join(dir, "f32.gguf"), Candidate: filepath.Join(dir, "Q4_K_M.gguf"),
		Prompts: prompt, Load: goLoader, MaxTokens: 7000}}
	var peak uint64
	for b.Loop() {
		runtime.GC()
		stop := heapPeak()
		r, err := Run(context.Background(), o, nil)
		p := stop()
		if err != nil {
			b.Fatal(err)
		}
		if d := r.Distribution; d.Positions != 7000 || d.Windows != 1 {
			b.Fatalf("%d positions in %d windows", d.Positions, d.Windows)
		}
		peak = max(peak, p)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(7000*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
