package publish

import (
	"context"
	"github.com/phonellm/phonellm/pipeline"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
)

// stepTimer is a Reporter that times the steps.
type stepTimer struct {
	mu    sync.Mutex
	start map[string]time.Time
	took  map[string]time.Duration
}

func (s *stepTimer) Begin(step string, _ int64) {
	s.mu.Lock()
	s.start[step] = time.Now()
	s.mu.Unlock()
}
func (s *stepTimer) Add(int64) {}
func (s *stepTimer) End(step string, _ error) {
	s.mu.Lock()
	s.took[step] += time.Since(s.start[step])
	s.mu.Unlock()
}
func (s *stepTimer) Note(pipeline.Level, string) {}

// BenchmarkUpload publishes one GGUF-sized file to the fake Hub on loopback
// (multipart, 16 MiB parts, 4 in flight) and reports MB/s end to end
// (hash + upload + server-side assembly and sha256 check + commit + verify).
// Size: PHONELLM_BENCH_UPLOAD_MB (default 256; the figure is 2048).
func BenchmarkUpload(b *testing.B) {
	mb := 256
	if v := os.Getenv("PHONELLM_BENCH_UPLOAD_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("PHONELLM_BENCH_UPLOAD_MB=%q", v)
		}
		mb = n
	}
	size := int64(mb) << 20
	// PHONELLM_BENCH_DIR puts the source file and the fake's storage on
	// another file system (e.g. /dev/shm to leave the disk out).
	dir := b.TempDir()
	if d := os.Getenv("PHONELLM_BENCH_DIR"); d != "" {
		var err error
		if dir, err = os.MkdirTemp(d, "phonellm-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	path := filepath.Join(dir, "bench-Q4_K_M.gguf")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	block := make([]byte, 4<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range block {
		block[i] = byte(r.Uint32())
	}
	for off := int64(0); off < size; off += int64(len(block)) {
		block[0], block[1] = byte(off>>22), byte(off>>30) // no two blocks equal
		if _, err := f.Write(block[:min(int64(len(block)), size-off)]); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()

	b.SetBytes(size)
	b.ResetTimer()
	var hashS, upS, totalS, cpuS float64
	var hashed int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		hubDir, err := os.MkdirTemp(dir, "hub-")
		if err != nil {
			b.Fatal(err)
		}
		h, err := hubtest.New(hubDir, hubtest.Config{})
		if err != nil {
			b.Fatal(err)
		}
		opts := Options{Repo: "tester/bench", Files: []File{{Local: path}}, Endpoint: h.URL, Token: h.Token(),
			JournalDir: b.TempDir(), RequestTimeout: time.Minute}
		st := &stepTimer{start: map[string]time.Time{}, took: map[string]time.Duration{}}
		c0 := cpuTime()
		b.StartTimer()
		t0 := time.Now()
		res, err := Run(context.Background(), opts, st)
		el := time.Since(t0)
		b.StopTimer()
		cpuS += (cpuTime() - c0).Seconds()
		if err != nil {
			b.Fatal(err)
		}
		if res.BytesHashed != size || !res.Verified {
			b.Fatalf("hashed %d of %d bytes (want exactly once), verified=%v", res.BytesHashed, size, res.Verified)
		}
		hashed += res.BytesHashed
		hashS += st.took["hash"].Seconds()
		upS += st.took["upload"].Seconds()
		totalS += el.Seconds()
		h.Close()
		os.RemoveAll(hubDir)
		b.StartTimer()
	}
	n := float64(b.N)
	mib := float64(size) / (1 << 20)
	b.ReportMetric(float64(hashed)/float64(size)/n, "sha256-passes")
	b.ReportMetric(mib/(totalS/n), "MiB/s-total")
	b.ReportMetric(mib/(hashS/n), "MiB/s-hash")
	b.ReportMetric(mib/(upS/n), "MiB/s-upload")
	// CPU seconds (client + fake Hub, user + system) per GiB: the figure
	// that does not depend on how busy the machine is.
	b.ReportMetric(cpuS/n/(mib/1024), "cpu-s/GiB")
}
