package memstat

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// ResetPeak restarts the peak-RSS measurement (Linux: writing 5 to /proc/self/clear_refs resets VmHWM).
func ResetPeak() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// PeakRSS returns the process's peak resident set size (VmHWM) in bytes, 0 when unavailable.
func PeakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
