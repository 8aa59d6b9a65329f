package eval

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// tallyModel counts the Logits calls that reach the model.
type tallyModel struct {
	*fakeModel
	calls int
}

func (m *tallyModel) Logits(ctx context.Context, toks []int32, fn func(int, []float32) error) error {
	m.calls++
	return m.fakeModel.Logits(ctx, toks, fn)
}

// TestLogitCache: a cached model gives the model's rows, computes each sequence once, replays later calls
// from its file, records nothing of a failed evaluation, and the comparison against it equals the
// comparison against the model.
func TestLogitCache(t *testing.T) {
	dir := t.TempDir()
	inner := &tallyModel{fakeModel: &fakeModel{vocab: 50, ctx: 64, chunk: 7, failAt: -1}}
	c, err := NewLogitCache(inner, dir)
	if err != nil {
		t.Fatal(err)
	}
	a, b := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, []int32{9, 8, 7}
	want := allRows(t, inner.fakeModel, a)
	for range 3 {
		if got := allRows(t, c, a); !reflect.DeepEqual(got, want) {
			t.Fatal("cached rows differ")
		}
	}
	allRows(t, c, b)
	allRows(t, c, b)
	if inner.calls != 2 {
		t.Fatalf("model evaluated %d times, want 2", inner.calls)
	}
	// A failure in the caller's function stops and records nothing.
	boom := errors.New("boom")
	d := []int32{4, 4, 4, 4}
	if err := c.Logits(context.Background(), d, func(pos int, _ []float32) error {
		if pos == 2 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	allRows(t, c, d)
	if inner.calls != 4 {
		t.Fatalf("model evaluated %d times, want 4 (the failed sequence again)", inner.calls)
	}

	cand := &fakeModel{vocab: 50, ctx: 64, chunk: 5, noise: 0.3, seed: 9, failAt: -1}
	prompts := []Prompt{{Text: "abcdefghij"}, {Text: "the quick brown fox"}}
	direct, err := CompareDistributions(context.Background(), inner.fakeModel, cand, prompts, DistOptions{Window: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := CompareDistributions(context.Background(), c, cand, prompts, DistOptions{Window: 8}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got.Seconds, direct.Seconds = 0, 0
		if !reflect.DeepEqual(got, direct) {
			t.Fatalf("cached comparison %+v, direct %+v", got, direct)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("cache file left: %v", filepath.Join(dir, ents[0].Name()))
	}
}
