package fsx

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as a writer that gets killed: FSX_TEST_WRITER=file:PATH or dir:PATH starts
// an atomic write of PATH, prints "ready" and waits to be killed.
func TestMain(m *testing.M) {
	if spec := os.Getenv("FSX_TEST_WRITER"); spec != "" {
		kind, path, _ := strings.Cut(spec, ":")
		switch kind {
		case "file":
			f, err := Create(path)
			if err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			f.Write(make([]byte, 1<<16))
		case "dir":
			tmp, _, err := MkdirTemp(path)
			if err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			os.WriteFile(filepath.Join(tmp, "model.safetensors"), make([]byte, 1<<16), 0o644)
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startWriter runs a writer child and returns it once its temporary exists.
func startWriter(t *testing.T, spec string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FSX_TEST_WRITER="+spec)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("writer %s: %q", spec, line)
	}
	return cmd
}

func temps(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestRemoveStaleAfterKill(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGKILL semantics to test on windows")
	}
	for _, kind := range []string{"file", "dir"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "model.gguf")
			live := startWriter(t, kind+":"+out)
			killed := startWriter(t, kind+":"+out)
			if n := len(temps(t, dir)); n != 2 {
				t.Fatalf("%d temporaries, want 2: %v", n, temps(t, dir))
			}
			killed.Process.Signal(syscall.SIGKILL)
			killed.Wait()

			removed, err := RemoveStale(out)
			if err != nil {
				t.Fatal(err)
			}
			left := temps(t, dir)
			if len(removed) != 1 || len(left) != 1 || !strings.Contains(left[0], fmt.Sprintf("-%d-", live.Process.Pid)) {
				t.Fatalf("removed %v, left %v (live writer %d)", removed, left, live.Process.Pid)
			}
			// The next atomic write of the same path cleans up by itself.
			live.Process.Signal(syscall.SIGKILL)
			live.Wait()
			if kind == "file" {
				f, err := Create(out)
				if err != nil {
					t.Fatal(err)
				}
				f.Write([]byte("x"))
				if err := f.Commit(); err != nil {
					t.Fatal(err)
				}
			} else {
				tmp, release, err := MkdirTemp(out)
				if err != nil {
					t.Fatal(err)
				}
				if err := ReplaceDir(tmp, out); err != nil {
					t.Fatal(err)
				}
				release()
			}
			if left := temps(t, dir); len(left) != 0 {
				t.Fatalf("left %v after the next run", left)
			}
		})
	}
}

func TestRemoveStaleLeavesOthersAlone(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "model.gguf")
	// A pid that is certainly dead: a child that has exited and been reaped.
	c := exec.Command(os.Args[0], "-test.run=^$")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	dead := c.Process.Pid
	keep := []string{
		fmt.Sprintf(".model.gguf.tmp-%d-1", os.Getpid()), // ours
		".model.gguf.tmp-123456789",                      // an older name without an owner
		fmt.Sprintf(".other.gguf.tmp-%d-1", dead),        // another output's
		fmt.Sprintf("model.gguf.tmp-%d-1", dead),         // not hidden: not ours
		fmt.Sprintf(".model.gguf.tmp-x%d-1", dead),
	}
	for _, n := range keep {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644)
	}
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, []byte("keep"), 0o644)
	os.Symlink(target, filepath.Join(dir, fmt.Sprintf(".model.gguf.tmp-%d-2", dead)))
	gone := fmt.Sprintf(".model.gguf.old-%d-3", dead)
	os.MkdirAll(filepath.Join(dir, gone, "sub"), 0o755)

	removed, err := RemoveStale(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || filepath.Base(removed[0]) != gone {
		t.Fatalf("removed %v, want only %s", removed, gone)
	}
	for _, n := range append(keep, "elsewhere", fmt.Sprintf(".model.gguf.tmp-%d-2", dead)) {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// TestReplaceDirNoWindow replaces an output folder many times while readers look at it: the final name must
// always hold a complete folder.
func TestReplaceDirNoWindow(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the exchange without a window is Linux's renameat2")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "merged")
	write := func(gen int) string {
		tmp, release, err := MkdirTemp(out)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		if err := os.WriteFile(filepath.Join(tmp, "gen"), []byte(fmt.Sprint(gen)), 0o644); err != nil {
			t.Fatal(err)
		}
		return tmp
	}
	if err := ReplaceDir(write(0), out); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var missing atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := os.Stat(filepath.Join(out, "gen")); errors.Is(err, fs.ErrNotExist) {
					missing.Add(1)
				}
			}
		}()
	}
	for gen := 1; gen <= 200; gen++ {
		if err := ReplaceDir(write(gen), out); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := missing.Load(); n > 0 {
		t.Fatalf("the output was missing %d times while being replaced", n)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "gen")); string(b) != "200" {
		t.Fatalf("final generation %q", b)
	}
	if left := temps(t, dir); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}
