package fsx

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(reg, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.safetensors")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{reg, link} {
		f, err := Open(p)
		if err != nil {
			t.Fatalf("Open(%s): %v", p, err)
		}
		f.Close()
	}

	bad := map[string]string{"folder": dir}
	if runtime.GOOS != "windows" {
		fifo := filepath.Join(dir, "fifo.safetensors")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		bad["fifo"] = fifo
		bad["device"] = os.DevNull
	}
	for what, p := range bad {
		done := make(chan error, 1)
		go func() {
			f, err := Open(p)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			var nr *NotRegularError
			if !errors.As(err, &nr) || !nr.InputError() {
				t.Errorf("Open(%s) = %v, want a NotRegularError", what, err)
			}
			if _, err := ReadFile(p, 1<<20); !errors.As(err, &nr) {
				t.Errorf("ReadFile(%s) = %v, want a NotRegularError", what, err)
			}
		case <-time.After(30 * time.Second): // hang guard
			t.Fatalf("Open(%s) blocked", what)
		}
	}
	if err := CheckRegular(bad["folder"]); err == nil {
		t.Error("CheckRegular(folder) = nil")
	}
	if err := CheckRegular(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("CheckRegular(missing) = %v", err)
	}
}

func TestReadFileLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(p, []byte("0123456789"), 0o644)
	if b, err := ReadFile(p, 10); err != nil || string(b) != "0123456789" {
		t.Fatalf("ReadFile at the limit: %q %v", b, err)
	}
	var le *LimitError
	if _, err := ReadFile(p, 9); !errors.As(err, &le) || !le.InputError() {
		t.Fatalf("ReadFile over the limit: %v", err)
	}
}
