//go:build linux

package kquant

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestCPUTimeWeighted measures the imatrix paths in CPU time of the calling
// thread (meaningful on a loaded shared machine): for every format, the
// kernel QuantizeWeighted runs and the plain reference, alternating, best of
// 9 runs each. Run with KQUANT_CPUBENCH=1 -v (KQUANT_CPUBENCH_TYPE=Q4_K for
// one format); a measurement, not a check.
func TestCPUTimeWeighted(t *testing.T) {
	if os.Getenv("KQUANT_CPUBENCH") == "" {
		t.Skip("set KQUANT_CPUBENCH=1 to measure")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const nPerRow, rows = 4096, 16
	x := benchInput(nPerRow * rows)
	im := benchImatrix(nPerRow)
	warmLattices()
	for _, f := range Formats() {
		if name := os.Getenv("KQUANT_CPUBENCH_TYPE"); name != "" && name != f.Name {
			continue
		}
		dst := make([]byte, f.RowBytes(len(x)))
		bestFast, bestRef := time.Duration(1<<62), time.Duration(1<<62)
		for rep := 0; rep < 9; rep++ {
			t0 := threadCPU()
			f.QuantizeWeighted(dst, x, im)
			if d := threadCPU() - t0; d > 0 && d < bestFast {
				bestFast = d
			}
			t0 = threadCPU()
			weightedReference(f, dst, x, im, nPerRow)
			if d := threadCPU() - t0; d > 0 && d < bestRef {
				bestRef = d
			}
		}
		n := float64(len(x))
		t.Logf("%-8s weighted: %6.2f M values/s per core (reference %6.2f, x%.2f)",
			f.Name, n/bestFast.Seconds()/1e6, n/bestRef.Seconds()/1e6, bestRef.Seconds()/bestFast.Seconds())
	}
}
