package fsx

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// TestDirectWriter writes a file through a DirectWriter with small chunks (writes of odd sizes straddling
// chunk boundaries, a padded tail, more chunks than circulate) and checks the committed bytes, Size and Sum.
// Where the file system refuses direct I/O (NewDirectWriter returns nil) there is nothing to test.
func TestDirectWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.bin")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	d := NewDirectWriter(f, DirectOptions{Chunk: 2 * DirectAlign, Chunks: 3, Writers: 2})
	if d == nil {
		t.Skip("no direct I/O on this file system")
	}
	body := make([]byte, 11*2*DirectAlign+1234)
	for i := range body {
		body[i] = byte(i*7 + i>>13)
	}
	rest := body
	for step := 1; len(rest) > 0; step = step*3 + 1 {
		n := min(step, len(rest))
		if k, err := d.Write(rest[:n]); err != nil || k != n {
			t.Fatalf("Write(%d) = %d, %v", n, k, err)
		}
		rest = rest[n:]
	}
	if d.Size() != int64(len(body)) {
		t.Fatalf("Size %d before Flush, want %d", d.Size(), len(body))
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Write([]byte{1}); err == nil {
		t.Fatal("Write after Flush succeeded")
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	if !bytes.Equal(got, body) || d.Sum() != hex.EncodeToString(sum[:]) || d.Size() != int64(len(body)) {
		t.Fatalf("file %d bytes (equal %v), Sum %s, Size %d; want %d bytes, %x", len(got), bytes.Equal(got, body), d.Sum(), d.Size(), len(body), sum)
	}
}

// TestDirectWriterStop abandons a direct write with chunks in flight: nothing may be left behind.
func TestDirectWriterStop(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(filepath.Join(dir, "out.bin"))
	if err != nil {
		t.Fatal(err)
	}
	d := NewDirectWriter(f, DirectOptions{Chunk: DirectAlign, Chunks: 2, Writers: 1})
	if d == nil {
		f.Abort()
		t.Skip("no direct I/O on this file system")
	}
	if _, err := d.Write(make([]byte, 5*DirectAlign+3)); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	f.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left %v", ents)
	}
}
