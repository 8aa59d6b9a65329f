package grammar

import (
	"syscall"
	"testing"
	"time"
)

// cpuTimer reports a benchmark's process CPU time per operation
// ("cpu-ns/op") next to the wall time, which a shared machine inflates.
// pause/resume leave set-up work out, like b.StopTimer/StartTimer.
type cpuTimer struct{ start, paused, total time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuTimer { return cpuTimer{start: cpuNow()} }

func (c *cpuTimer) pause()  { c.paused = cpuNow() }
func (c *cpuTimer) resume() { c.start += cpuNow() - c.paused }

func (c *cpuTimer) report(b *testing.B) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuNow()-c.start)/float64(b.N), "cpu-ns/op")
	}
}
