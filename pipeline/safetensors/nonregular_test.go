package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
)

// TestNonRegularFilesRefused: a FIFO named model.safetensors blocked every reader forever (issue 14); a folder
// or device in its place is refused too, before anything is read.
func TestNonRegularFilesRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs")
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, SingleFileName)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(t.TempDir(), SingleFileName)
	os.Mkdir(sub, 0o755)
	for name, open := range map[string]func() error{
		"Open(fifo)":     func() error { f, err := Open(fifo); closeIf(f); return err },
		"OpenMmap(fifo)": func() error { f, err := OpenMmap(fifo); closeIf(f); return err },
		"Open(folder)":   func() error { f, err := Open(sub); closeIf(f); return err },
		"Open(device)":   func() error { f, err := Open(os.DevNull); closeIf(f); return err },
		"OpenDir(fifo)": func() error {
			c, err := OpenDir(dir)
			if err == nil {
				c.Close()
			}
			return err
		},
	} {
		done := make(chan error, 1)
		go func() { done <- open() }()
		select {
		case err := <-done:
			var nr *fsx.NotRegularError
			if !errors.As(err, &nr) {
				t.Errorf("%s: %v, want a NotRegularError", name, err)
			}
		case <-time.After(30 * time.Second): // hang guard
			t.Fatalf("%s blocked", name)
		}
	}
}

func closeIf(f *File) {
	if f != nil {
		f.Close()
	}
}
