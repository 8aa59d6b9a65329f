package fsx

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommitHashesEverything(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.bin")
	f, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	data := bytes.Repeat([]byte("phonellm"), 100000)
	// io.Copy would use a ReaderFrom if File exposed one; the hash must still see every byte.
	if _, err := io.Copy(f, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("final file visible before Commit")
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if f.Sum() != hex.EncodeToString(sum[:]) || f.Size() != int64(len(data)) {
		t.Fatalf("size %d sum %s", f.Size(), f.Sum())
	}
	n, h, err := HashFile(p)
	if err != nil || n != int64(len(data)) || h != f.Sum() {
		t.Fatalf("HashFile %d %s %v", n, h, err)
	}
	if _, ok := any(f).(io.ReaderFrom); ok {
		t.Fatal("File must not implement io.ReaderFrom (it would bypass the hash)")
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.bin")
	os.WriteFile(p, []byte("old"), 0o644)
	f, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("new partial"))
	f.Abort()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left %v", entries)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("existing file changed to %q", b)
	}
	if !strings.HasPrefix(filepath.Base(f.TempName()), ".out.bin.tmp-") {
		t.Fatalf("temp name %s", f.TempName())
	}
}

func TestHashFileContext(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if _, err := WriteFile(p, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	n, sum, err := HashFileContext(context.Background(), p)
	if err != nil || n != 3 || sum != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("HashFileContext %d %s %v", n, sum, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := HashFileContext(ctx, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled hash: %v", err)
	}
}

// TestWriteAfterWriteAt: bytes placed with WriteAt are not hashed, so the sum is dropped, and later writes
// still work.
func TestWriteAfterWriteAt(t *testing.T) {
	f, err := Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	if _, err := f.WriteAt([]byte("xy"), 4); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if f.Sum() != "" {
		t.Fatalf("sum %q after WriteAt", f.Sum())
	}
}

func TestWriteJSON(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a", "b", "state.json")
	if _, err := WriteJSON(p, map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\n  \"x\": 1\n}\n" {
		t.Fatalf("%q", b)
	}
}
