// Package scripts holds tests of the repository's shell scripts; the scripts themselves are run by hand, by
// CI (.ci/run → scripts/test.sh) and by the README's commands.
package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runTestSh runs a copy of scripts/test.sh in a scratch tree whose set-up, go, and kernel cross-check are
// stubs: go fails for the commands in failing ("vet", "test", "build"), set-up fails when setupFails, and the
// kernel stage leaves a marker file. It returns the exit status, stderr and whether the kernel stage ran.
func runTestSh(t *testing.T, setupFails bool, failing ...string) (int, string, bool) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	src, err := os.ReadFile("test.sh")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	bin := filepath.Join(root, "stubbin")
	marker := filepath.Join(root, "kernels-ran")
	setup := "exit 0\n"
	if setupFails {
		setup = "exit 1\n"
	}
	goStub := "#!/bin/sh\ncase \" " + strings.Join(failing, " ") + " \" in *\" $1 \"*) echo \"stub go $1 fails\" >&2; exit 1;; esac\nexit 0\n"
	for path, body := range map[string]string{
		"scripts/test.sh":               string(src),
		"scripts/env.sh":                "export PATH=\"" + bin + ":$PATH\"\n",
		"scripts/setup.sh":              setup,
		"scripts/test-kernels-cross.sh": "touch '" + marker + "'\n",
		"stubbin/go":                    goStub,
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts/test.sh"))
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat(marker)
	return code, stderr.String(), statErr == nil
}

// TestTestShRunsEveryStage is issue 13 item 9: with set -e a failing package ended the run before the kernel
// cross-check. Every stage after set-up runs, the summary names each failed stage, and the exit is non-zero.
func TestTestShRunsEveryStage(t *testing.T) {
	code, stderr, kernels := runTestSh(t, false, "test")
	if code == 0 {
		t.Errorf("exit 0 with a failing go test; stderr:\n%s", stderr)
	}
	if !kernels {
		t.Errorf("the kernel stage did not run after go test failed; stderr:\n%s", stderr)
	}
	for _, want := range []string{"FAILED", "go test", "ok", "kernels under GOAMD64", "stage(s) failed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	// The demo stage fails too (the stub builds nothing), and so does the phone stage that needs its model:
	// three failed stages, each listed.
	if !strings.Contains(stderr, "3 stage(s) failed") {
		t.Errorf("want 3 failed stages (go test, demo, phone entrypoint):\n%s", stderr)
	}
}

// TestTestShSetupFailureIsFatal: nothing after a failed set-up means anything, so the run stops there.
func TestTestShSetupFailureIsFatal(t *testing.T) {
	code, stderr, kernels := runTestSh(t, true)
	if code == 0 || kernels || !strings.Contains(stderr, "set-up failed") {
		t.Errorf("set-up failure: exit %d, kernel stage ran %v; stderr:\n%s", code, kernels, stderr)
	}
}
