//go:build linux

package kquant

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is this OS thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// TestCPUTimeThroughput measures kernel throughput in CPU time of the
// calling thread, which stays meaningful on a loaded shared machine where
// wall-clock benchmarks do not. Run with KQUANT_CPUBENCH=1 -v; it is a
// measurement, not a check, and is skipped otherwise.
func TestCPUTimeThroughput(t *testing.T) {
	if os.Getenv("KQUANT_CPUBENCH") == "" {
		t.Skip("set KQUANT_CPUBENCH=1 to measure")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const n = 256 * 1024
	x := benchInput(n)
	for _, f := range Formats() {
		if name := os.Getenv("KQUANT_CPUBENCH_TYPE"); name != "" && name != f.Name {
			continue
		}
		if f.RequiresImatrix() { // TestCPUTimeWeighted
			continue
		}
		dst := make([]byte, f.RowBytes(n))
		f.Quantize(dst, x)
		best := time.Duration(1 << 62)
		for rep := 0; rep < 15; rep++ {
			t0 := threadCPU()
			f.Quantize(dst, x)
			if d := threadCPU() - t0; d > 0 && d < best {
				best = d
			}
		}
		t.Logf("%-6s quantize: %6.1f M floats/s per core (%5.1f MB/s f32, %5.1f MB/s f16 input)",
			f.Name, float64(n)/best.Seconds()/1e6, 4*float64(n)/best.Seconds()/1e6, 2*float64(n)/best.Seconds()/1e6)
	}
}
