package memstat

import (
	"runtime"
	"testing"
)

func TestPeakRSSGrows(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	ResetPeak()
	before := PeakRSS()
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = byte(i)
	}
	after := PeakRSS()
	if before <= 0 || after < before+32<<20 {
		t.Fatalf("peak RSS %d → %d after touching 64 MiB", before, after)
	}
	runtime.KeepAlive(b)
}
