package golden

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFirstDiff(t *testing.T) {
	if d := FirstDiff("a\nb\nc", "a\nx\nc"); d != "line 2:\n  want: b\n  got:  x" {
		t.Fatalf("%q", d)
	}
	if d := FirstDiff("a\n", "a\n"); d != "" {
		t.Fatalf("equal texts: %q", d)
	}
	if d := FirstDiff("a", "a\nmore"); d != "line 2:\n  want: \n  got:  more" {
		t.Fatalf("longer got: %q", d)
	}
}

// TestCheck: an equal file passes; a differing one fails the test (checked on a fake TB).
func TestCheck(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.golden")
	os.WriteFile(p, []byte("one\n"), 0o644)
	Check(t, p, []byte("one\n"))
	ft := &fakeTB{TB: t}
	Check(ft, p, []byte("two\n"))
	if !ft.failed {
		t.Fatal("a differing golden passed")
	}
}

type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Errorf(string, ...any) { f.failed = true }
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true }
