package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/tinygguf"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/hfhub"
	"github.com/phonellm/phonellm/pipeline/merge"
	"github.com/phonellm/phonellm/pipeline/publish"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
	"github.com/phonellm/phonellm/pipeline/safetensors"
	"github.com/phonellm/phonellm/runtime/engine"
)

// TestExitCodeFromClass: every stage error type says what it is, and the exit code follows from that alone
// (no list of types in cmd). fit.UnsupportedError and eval.FormatError were missing from the old list.
func TestExitCodeFromClass(t *testing.T) {
	bg := context.Background()
	wrap := func(err error) error { return fmt.Errorf("stage: %w", err) }
	for _, c := range []struct {
		err  error
		code int
	}{
		{&gguf.FormatError{Msg: "x"}, exitBadInput},
		{&gguf.UnsupportedError{What: "x"}, exitBadInput},
		{&safetensors.FormatError{Msg: "x"}, exitBadInput},
		{&safetensors.UnsupportedError{Msg: "x"}, exitBadInput},
		{&convert.ConfigError{Msg: "x"}, exitBadInput},
		{&convert.UnsupportedError{What: "x"}, exitBadInput},
		{&merge.FormatError{Msg: "x"}, exitBadInput},
		{&merge.UnsupportedError{Msg: "x"}, exitBadInput},
		{&fit.FormatError{Msg: "x"}, exitBadInput},
		{&fit.UnsupportedError{What: "x"}, exitBadInput},
		{&plan.UnsupportedError{What: "x"}, exitBadInput},
		{&plan.RequantizeError{Tensor: "x"}, exitBadInput},
		{&eval.FormatError{File: "x", Msg: "x"}, exitBadInput},
		{&engine.UnsupportedError{Path: "x", Reason: "x"}, exitBadInput},
		{&eval.GateError{Reasons: []string{"x"}}, exitVerdict},
		{&deploy.SpecError{Msg: "x"}, exitBadInput},
		{&deploy.BundleError{Msg: "x"}, exitBadInput},
		{&deploy.FleetError{Err: errors.New("x")}, exitRemote},
		{&deploy.NotFitError{Model: "x"}, exitVerdict},
		{&publish.HubError{Op: "commit", Status: http.StatusForbidden}, exitRemote},
		{&hfhub.HubError{Op: "download", Status: http.StatusBadGateway}, exitRemote},
		{&hfhub.IntegrityError{Path: "x"}, exitRemote},
		{pipeline.InputError(errors.New("x")), exitBadInput},
		{errors.New("disk full"), exitFailure},
		{context.Canceled, exitInterrupted},
		{usageError("bad flag"), exitUsage},
		{withHint(&gguf.FormatError{Msg: "x"}, "try y"), exitBadInput},
	} {
		if code, _ := exitCode(bg, wrap(c.err)); code != c.code {
			t.Errorf("%T %v: exit %d, want %d", c.err, c.err, code, c.code)
		}
	}
	if _, hint := exitCode(bg, wrap(&publish.HubError{Op: "commit", Status: http.StatusUnauthorized})); !strings.Contains(hint, "HF_TOKEN") {
		t.Errorf("the Hub error's own hint is lost: %q", hint)
	}
	if _, hint := exitCode(bg, withHint(&publish.HubError{Op: "commit", Status: http.StatusUnauthorized}, "mine")); hint != "mine" {
		t.Errorf("cmd's hint does not win: %q", hint)
	}
}

// TestExitCodesEndToEnd is issue 13 item 8: an unsupported architecture for `fit --config` and a malformed
// JSONL for `eval --dataset` are input errors (exit 3, not 1), and a bad flag prints its error once with one
// "(see … --help)".
func TestExitCodesEndToEnd(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PHONELLM_WORKSPACE", dir)
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64}`), 0o644)
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"messages\": [}\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"fit", "--config", cfg}, exitBadInput, "LlamaForCausalLM"},
		{[]string{"eval", "--dataset", bad, "--endpoint", "http://127.0.0.1:1"}, exitBadInput, "bad.jsonl:1"},
		{[]string{"ship", "--bogus"}, exitUsage, "--bogus"},
		{[]string{"quantise", "q4_k_m"}, exitUsage, "did you mean quantize"},
		{[]string{"fleet", "stp"}, exitUsage, "did you mean stop"},
	} {
		code, out, errOut := runCLI(t, context.Background(), c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, errOut)
		}
		if out != "" {
			t.Errorf("%v: stdout %q on failure", c.args, out)
		}
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "error: ") || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: stderr %q, want one error line naming %q", c.args, errOut, c.want)
		}
		if n := strings.Count(errOut, "--help')"); n > 1 {
			t.Errorf("%v: the usage hint is printed %d times: %q", c.args, n, errOut)
		}
	}
}

// TestErrorPrintedOnce is issue 13 item 8: an error inside a stage's progress step is printed once (the step
// is only marked failed), as the last line.
func TestErrorPrintedOnce(t *testing.T) {
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := tinygguf.Write(model, tinygguf.Spec{Seed: 1}); err != nil { // head size 16: no q4_0 KV cache
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, context.Background(), "fit", model, "--kv-type", "q4_0")
	if code != exitBadInput {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	last := strings.TrimPrefix(lines[len(lines)-1], "error: ")
	if n := strings.Count(errOut, last); n != 1 {
		t.Errorf("the error is printed %d times:\n%s", n, errOut)
	}
}
