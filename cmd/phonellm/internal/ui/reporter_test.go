package ui

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline"
)

// TestRateInTheStepsUnit: a step that counts tokens shows tokens per second, not bytes per second (the imatrix
// stage's 20,000 tokens were shown as "kB/s"); a step in bytes keeps the byte units.
func TestRateInTheStepsUnit(t *testing.T) {
	for _, tc := range []struct {
		unit, want, notWant string
	}{
		{"tokens", " tokens/s", "B/s"},
		{"", " B/s", "tokens"},
	} {
		var out, errb bytes.Buffer
		r := NewReporter(Test(&out, &errb))
		pipeline.BeginItems(r, "step", 20000, tc.unit)
		r.mu.Lock()
		r.start = time.Now().Add(-10 * time.Second) // 5,000 items in 10 s
		r.interval = 0
		r.mu.Unlock()
		r.Add(5000)
		got := errb.String()
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.notWant) {
			t.Errorf("unit %q: progress %q, want %q", tc.unit, got, tc.want)
		}
	}
}
