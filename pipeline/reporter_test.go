package pipeline

import "testing"

type beginRecorder struct {
	Reporter
	step  string
	total int64
}

func (b *beginRecorder) Begin(step string, total int64) { b.step, b.total = step, total }

// TestBeginItemsFallsBack: a reporter without BeginItems still gets the step through Begin.
func TestBeginItemsFallsBack(t *testing.T) {
	b := &beginRecorder{Reporter: Discard}
	BeginItems(b, "imatrix", 42, "tokens")
	if b.step != "imatrix" || b.total != 42 {
		t.Fatalf("Begin got %q %d", b.step, b.total)
	}
}
