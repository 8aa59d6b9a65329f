package quantize

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/memstat"

	"github.com/phonellm/phonellm/internal/benchdata"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// BenchmarkQuantizeQwen3Shape quantizes the 1.5 GB Qwen3-0.6B-shaped F16 GGUF (generated once, see
// internal/benchdata) to Q4_K_M, Q8_0 and Q4_0 at 1 and 2 threads, reporting input MB/s (b.SetBytes) and the
// peak RSS of the run. It times phonellm alone; `LLAMA_QUANTIZE=/path/to/llama-quantize phonellm bench quantize`
// times llama-quantize in the same run, alternating, with CPU-seconds (docs/benchmarks.md). Run:
//
//	go test ./pipeline/quantize -run '^$' -bench QuantizeQwen3Shape -benchtime 1x
func BenchmarkQuantizeQwen3Shape(b *testing.B) {
	in, err := benchdata.Qwen3F16(context.Background(), pipeline.Discard)
	if err != nil {
		b.Fatal(err)
	}
	st, _ := os.Stat(in)
	for _, ft := range []gguf.FileType{gguf.FileTypeQ4_K_M, gguf.FileTypeQ8_0, gguf.FileTypeQ4_0} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", ft, threads), func(b *testing.B) {
				out := filepath.Join(b.TempDir(), "out.gguf")
				b.SetBytes(st.Size())
				memstat.ResetPeak()
				for b.Loop() {
					src, err := OpenGGUF(in)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := Run(context.Background(), Options{Source: src, FileType: ft, Out: out, Threads: threads}, nil); err != nil {
						b.Fatal(err)
					}
					src.Close()
				}
				b.ReportMetric(float64(memstat.PeakRSS())/1e6, "peakRSS-MB")
			})
		}
	}
}
