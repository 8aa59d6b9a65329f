package tokenizer_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/realvocab"
	"github.com/phonellm/phonellm/internal/tokenizer"
)

// Benchmarks on Qwen3's real vocabulary (they skip when it is not installed). Each compares with Ollama's
// tokenizer, which the engine used before, in the same run; -count 2 alternates them. cpu-ns/op is the
// process's user+system CPU time per operation, which a busy machine disturbs less than the wall time:
//
//	go test ./internal/tokenizer -run '^$' -bench 'FraudReview|SpecialHeavy/phonellm|HugeWord' -benchtime 10x -count 2
//
// BenchmarkSpecialHeavy/ollama takes about a minute per iteration (quadratic in the special tokens).

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs op b.N times and reports its CPU time per operation.
func loop(b *testing.B, op func() error) {
	start := cpuTime()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// fraudReview returns the fraud-review prompt of about 7,000 tokens on tk.
func fraudReview(b *testing.B, tk *tokenizer.Tokenizer) (string, int) {
	for cases := 20; ; cases += 2 {
		text := realvocab.FraudReview(cases)
		ids, err := tk.Encode(context.Background(), text, tokenizer.Options{ParseSpecial: true})
		if err != nil {
			b.Fatal(err)
		}
		if len(ids) >= 7000 {
			return text, len(ids)
		}
	}
}

func BenchmarkFraudReview(b *testing.B) {
	path := realGGUF(b)
	tk := loadGGUF(b, path)
	text, n := fraudReview(b, tk)
	b.Run("phonellm", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		loop(b, func() error {
			_, err := tk.Encode(context.Background(), text, tokenizer.Options{ParseSpecial: true})
			return err
		})
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
	b.Run("ollama", func(b *testing.B) {
		old := ollamaTokenizer(b, path)
		b.SetBytes(int64(len(text)))
		loop(b, func() error {
			_, err := old.Encode(text, false)
			return err
		})
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
}

// BenchmarkSpecialHeavy is issue 14's 62 KB prompt of 2,000 chat turns (60 s of CPU in the engine).
func BenchmarkSpecialHeavy(b *testing.B) {
	path := realGGUF(b)
	tk := loadGGUF(b, path)
	text := strings.Repeat("<|im_start|>user\nx<|im_end|>\n", 2000)
	b.Run("phonellm", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		loop(b, func() error {
			_, err := tk.Encode(context.Background(), text, tokenizer.Options{ParseSpecial: true})
			return err
		})
	})
	b.Run("ollama", func(b *testing.B) {
		old := ollamaTokenizer(b, path)
		b.SetBytes(int64(len(text)))
		loop(b, func() error {
			_, err := old.Encode(text, false)
			return err
		})
	})
}

// BenchmarkHugeWord tokenizes one 15 MiB word (issue 14: four of them took the server to 4.4 GB) and
// reports the peak of the live heap during the call, sampled every millisecond, in bytes per input byte.
func BenchmarkHugeWord(b *testing.B) {
	tk := loadGGUF(b, realGGUF(b))
	for _, w := range []struct{ name, unit string }{{"letters", "abcdefghij"}, {"a-run", "a"}, {"spaces", " "}} {
		word := strings.Repeat(w.unit, 15<<20/len(w.unit))
		b.Run(w.name, func(b *testing.B) {
			b.SetBytes(int64(len(word)))
			var peak uint64
			start := cpuTime()
			for b.Loop() {
				runtime.GC()
				var base runtime.MemStats
				runtime.ReadMemStats(&base)
				stop := sampleHeap(&peak)
				if _, err := tk.Encode(context.Background(), word, tokenizer.Options{}); err != nil {
					b.Fatal(err)
				}
				stop()
				peak -= min(peak, base.HeapAlloc)
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(peak)/float64(len(word)), "peak-heap-B/B")
		})
	}
}

// sampleHeap records the largest HeapAlloc seen until stop is called.
func sampleHeap(peak *uint64) (stop func()) {
	var done atomic.Bool
	finished := make(chan struct{})
	*peak = 0
	go func() {
		defer close(finished)
		var m runtime.MemStats
		for !done.Load() {
			runtime.ReadMemStats(&m)
			*peak = max(*peak, m.HeapAlloc)
			time.Sleep(time.Millisecond)
		}
	}()
	return func() {
		done.Store(true)
		<-finished
	}
}
