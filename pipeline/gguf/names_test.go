package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
)

// withTensorName writes a one-tensor GGUF whose tensor is called name (bypassing the writer's checks).
func withTensorName(t *testing.T, name string) []byte {
	t.Helper()
	placeholder := strings.Repeat("n", len(name))
	w := NewWriter()
	if err := w.AddTensor(placeholder, TypeF32, []uint64{4}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := w.WriteHeader(&buf); err != nil {
		t.Fatal(err)
	}
	w.WriteTensor(placeholder, make([]byte, 16))
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	i := bytes.Index(b, []byte(placeholder))
	return patch(b, i, []byte(name))
}

func TestTensorNamesUTF8(t *testing.T) {
	for _, name := range []string{"blk.0.attn_q.\xff", "bad\xc3", "nul\x00name", "tab\tname", "esc\x1b[2J"} {
		data := withTensorName(t, name)
		_, err := Open(bytes.NewReader(data), int64(len(data)), "names.gguf")
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "tensor name") {
			t.Errorf("reader accepted tensor name %q: %v", name, err)
		}
		if err := NewWriter().AddTensor(name, TypeF32, []uint64{4}); err == nil {
			t.Errorf("writer accepted tensor name %q", name)
		}
	}
	for _, name := range []string{"blk.0.attn_q.weight", "ünïcödé.weight", "v.blk.0.ln1.bias"} {
		data := withTensorName(t, name)
		if _, err := Open(bytes.NewReader(data), int64(len(data)), "names.gguf"); err != nil {
			t.Errorf("reader refused %q: %v", name, err)
		}
	}
}

func TestOpenFileRefusesNonRegular(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs")
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.gguf")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir, os.DevNull} {
		done := make(chan error, 1)
		go func() {
			f, err := OpenFile(p)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			var nr *fsx.NotRegularError
			if !errors.As(err, &nr) {
				t.Errorf("OpenFile(%s) = %v, want NotRegularError", p, err)
			}
		case <-time.After(30 * time.Second): // hang guard
			t.Fatalf("OpenFile(%s) blocked", p)
		}
	}
}
