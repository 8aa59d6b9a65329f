package fsx

import (
	"bytes"
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
