package safetensors

import (
	"runtime"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
)

// BenchmarkReadRowsQwen3Shape streams every tensor of the ~1.2 GB
// Qwen3-0.6B-shaped BF16 checkpoint as float32 in row blocks of at most 1M
// values through one reused buffer, and reports the bytes allocated per
// pass (which must stay near the buffer size, not the checkpoint size).
func BenchmarkReadRowsQwen3Shape(b *testing.B) {
	dir := b.TempDir()
	if err := tinymodel.Generate(dir, tinymodel.Qwen3BenchSpec()); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"pread", "mmap"} {
		b.Run(mode, func(b *testing.B) {
			c, err := OpenDir(dir)
			if err != nil {
				b.Fatal(err)
			}
			if mode == "mmap" {
				c.Close()
				f, err := OpenMmap(dir + "/model.safetensors")
				if err != nil {
					b.Fatal(err)
				}
				c = &Checkpoint{dir: dir, files: []*File{f}, byName: map[string]int{}}
				if err := c.build(); err != nil {
					b.Fatal(err)
				}
			}
			defer c.Close()
			b.SetBytes(c.TotalSize())
			buf := make([]float32, 0, 1<<20)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			start := ms.TotalAlloc
			b.ResetTimer()
			for range b.N {
				for _, t := range c.Tensors() {
					n := t.NumElements()
					for off := int64(0); off < n; off += 1 << 20 {
						var err error
						if buf, err = c.ReadElements(t.Name, off, min(1<<20, n-off), buf); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.TotalAlloc-start)/float64(b.N)/(1<<20), "MiB-alloc/op")
		})
	}
}
