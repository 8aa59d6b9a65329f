package safetensors

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/fsx"
)

// TestDirectWriter writes the same file through the page cache and with direct I/O (chunks filled by writes
// of odd sizes that straddle chunk boundaries, a padded tail) and compares bytes, size and sha256.
func TestDirectWriter(t *testing.T) {
	dir := t.TempDir()
	plan := []WriteInfo{
		{Name: "a", DType: U8, Shape: []int64{3}},
		{Name: "b", DType: F32, Shape: []int64{int64(directOptions.Chunk/4 + 1_000_003)}},
		{Name: "c", DType: BF16, Shape: []int64{7}},
	}
	body := make([]byte, plan[0].Size()+plan[1].Size()+plan[2].Size())
	for i := range body {
		body[i] = byte(i*7 + i>>13)
	}
	write := func(name string, o WriterOptions) (string, *Writer) {
		path := filepath.Join(dir, name)
		w, err := CreateWith(path, plan, map[string]string{"format": "pt"}, o)
		if err != nil {
			t.Fatal(err)
		}
		rest := body
		for _, ti := range plan {
			s, err := w.StreamTensor(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			data := rest[:ti.Size()]
			rest = rest[ti.Size():]
			for step := 1; len(data) > 0; step = step*3 + 1 { // 1, 4, 13, … bytes up to whole chunks
				n := min(step, len(data))
				if _, err := s.Write(data[:n]); err != nil {
					t.Fatal(err)
				}
				data = data[n:]
			}
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		return path, w
	}
	p1, w1 := write("buffered.safetensors", WriterOptions{})
	p2, w2 := write("direct.safetensors", WriterOptions{Direct: true})
	b1, _ := os.ReadFile(p1)
	b2, _ := os.ReadFile(p2)
	if !bytes.Equal(b1, b2) {
		t.Fatalf("direct output (%d bytes) differs from buffered output (%d bytes)", len(b2), len(b1))
	}
	sum := sha256.Sum256(b2)
	if w2.SHA256() != hex.EncodeToString(sum[:]) || w2.SHA256() != w1.SHA256() || w2.Size() != int64(len(b2)) {
		t.Fatalf("sha256/size: direct %s %d, buffered %s, file %x %d", w2.SHA256(), w2.Size(), w1.SHA256(), sum, len(b2))
	}
	if len(b2)%fsx.DirectAlign == 0 {
		t.Fatalf("test file of %d bytes does not exercise the padded tail", len(b2))
	}
	f, err := Open(p2)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestDirectWriterAbort leaves nothing behind when a direct write is abandoned with a chunk in flight.
func TestDirectWriterAbort(t *testing.T) {
	dir := t.TempDir()
	plan := []WriteInfo{{Name: "b", DType: U8, Shape: []int64{int64(3 * directOptions.Chunk)}}}
	w, err := CreateWith(filepath.Join(dir, "x.safetensors"), plan, nil, WriterOptions{Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.StreamTensor("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(make([]byte, directOptions.Chunk+5)); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left %v", ents)
	}
	if err := w.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
}
