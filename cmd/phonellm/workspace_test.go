package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// newTestWorkspace makes a workspace over a tiny qwen3 base with one adapter and returns its folder and the
// folder holding base, adapter and a second adapter ("other").
func newTestWorkspace(t *testing.T) (ws, top string) {
	t.Helper()
	top = t.TempDir()
	spec, _ := tinymodel.Preset("qwen3")
	if err := tinymodel.Generate(filepath.Join(top, "base"), spec); err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"adapter", "other"} {
		if err := tinymodel.GenerateAdapter(filepath.Join(top, n), spec, tinymodel.AdapterSpec{Rank: 4, Alpha: 8,
			Seed: uint64(i + 1), TargetModules: []string{"q_proj", "v_proj"}}); err != nil {
			t.Fatal(err)
		}
	}
	ws = filepath.Join(top, "ws")
	t.Setenv("PHONELLM_WORKSPACE", ws)
	t.Setenv("PHONELLM_HOME", t.TempDir())
	if code, _, e := runCLI(t, context.Background(), "init", "--dir", ws, "--base", filepath.Join(top, "base"),
		"--lora", filepath.Join(top, "adapter"), "--name", "tiny"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	return ws, top
}

type stageOut struct {
	Artifacts []struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	} `json:"artifacts"`
	BitsPerWeight float64 `json:"bits_per_weight"`
	Out           string  `json:"out"`
}

func runJSON(t *testing.T, args ...string) (stageOut, string) {
	t.Helper()
	code, out, e := runCLI(t, context.Background(), append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, e)
	}
	var r stageOut
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %v in %q", args, err, out)
	}
	return r, e
}

// TestOneOffOutputsStayOut is issue 13 item 2: an explicit output (-o) with other inputs never becomes what a
// later plain stage reads; the workspace's own merge stays the one that is up to date; a deleted one-off
// output breaks nothing; -v names every input; a plain quantize takes the workspace's quant type and, when it
// skips, prints the bits per weight it recorded (item 8).
func TestOneOffOutputsStayOut(t *testing.T) {
	ws, top := newTestWorkspace(t)
	runJSON(t, "merge")
	q1, _ := runJSON(t, "quantize") // TYPE from phonellm.yaml (q4_k_m)
	if len(q1.Artifacts) != 1 || filepath.Base(q1.Artifacts[0].Path) != "tiny-Q4_K_M.gguf" {
		t.Fatalf("plain quantize wrote %+v", q1.Artifacts)
	}
	scratch := filepath.Join(top, "scratch")
	runJSON(t, "merge", "--lora", filepath.Join(top, "other"), "-o", scratch)

	q2, errOut := runJSON(t, "-v", "quantize", "q4_k_m")
	if q2.Artifacts[0].SHA256 != q1.Artifacts[0].SHA256 {
		t.Fatalf("a plain quantize after 'merge -o scratch' quantized the scratch merge (sha %s, was %s)", q2.Artifacts[0].SHA256, q1.Artifacts[0].SHA256)
	}
	if !strings.Contains(errOut, "up to date") {
		t.Errorf("the workspace's quantize is not reported up to date: %s", errOut)
	}
	if !strings.Contains(errOut, "reads model "+filepath.Join(ws, "tiny-merged")) {
		t.Errorf("-v does not name the input: %s", errOut)
	}
	if q2.BitsPerWeight < 4 || q2.BitsPerWeight > 6 {
		t.Errorf("skipped quantize reports %.2f bits per weight", q2.BitsPerWeight)
	}
	code, text, _ := runCLI(t, context.Background(), "quantize")
	if code != 0 || strings.Contains(text, "0.00 bits") || !strings.Contains(text, "bits per weight") {
		t.Errorf("skipped quantize prints %q", text)
	}

	if code, _, e := runCLI(t, context.Background(), "-v", "fit"); code != 0 || !strings.Contains(e, "reads model "+q1.Artifacts[0].Path+" (the workspace's quantize output)") {
		t.Errorf("-v fit does not name its input: %d %s", code, e)
	}

	m, errOut := runJSON(t, "merge")
	if !samePath(m.Out, filepath.Join(ws, "tiny-merged")) || !strings.Contains(errOut, "up to date") {
		t.Errorf("plain merge after a one-off: out %q, %s", m.Out, errOut)
	}

	if err := os.RemoveAll(scratch); err != nil {
		t.Fatal(err)
	}
	runJSON(t, "quantize", "q4_k_m")
	x := filepath.Join(top, "x.gguf")
	runJSON(t, "quantize", "q4_k_m", "--model", filepath.Join(top, "base"), "-o", x)
	runJSON(t, "convert", "--model", filepath.Join(top, "base"), "-o", filepath.Join(top, "x-f16.gguf"))

	w, err := workspace.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	if art, ok := w.LatestArtifact("gguf", "quantize", "convert"); !ok || !samePath(art.Path, q1.Artifacts[0].Path) {
		t.Errorf("the workspace's newest GGUF is %+v, want its own quantize output", art)
	}
	for _, st := range w.Status() {
		want := map[string]string{"merge": workspace.UpToDate, "quantize": workspace.UpToDate, "convert": workspace.NotRun}[st.Stage]
		if want != "" && st.State != want {
			t.Errorf("status %s: %s (%s), want %s", st.Stage, st.State, st.Why, want)
		}
	}
}

// TestStatusForceReset: status names what made a stage stale; --force redoes an up-to-date stage; reset forgets
// a stage so the next run starts over, without anyone editing state.json. A deleted output makes its stage
// "missing" and the next plain run falls back to what is still there.
func TestStatusForceReset(t *testing.T) {
	ws, _ := newTestWorkspace(t)
	runJSON(t, "merge")
	runJSON(t, "quantize")
	status := func() map[string]workspace.StageStatus {
		t.Helper()
		code, out, e := runCLI(t, context.Background(), "status", "--json")
		if code != 0 {
			t.Fatalf("status: %s", e)
		}
		var r statusResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		m := map[string]workspace.StageStatus{}
		for _, s := range r.Stages {
			m[s.Stage] = s
		}
		return m
	}
	if s := status(); s["merge"].State != workspace.UpToDate || s["quantize"].State != workspace.UpToDate {
		t.Fatalf("after merge+quantize: %+v", s)
	}
	_, errOut := runJSON(t, "merge", "--force")
	if strings.Contains(errOut, "up to date") {
		t.Errorf("merge --force skipped: %s", errOut)
	}
	s := status()
	if q := s["quantize"]; q.State != workspace.Stale || !strings.Contains(q.Why, "model") {
		t.Errorf("after merge --force, quantize is %s (%s), want stale naming its input", q.State, q.Why)
	}
	code, text, e := runCLI(t, context.Background(), "status")
	if code != 0 || !strings.Contains(text, "quantize  stale") || !strings.Contains(text, "why: ") {
		t.Errorf("status text: %d %q %s", code, text, e)
	}
	_, errOut = runJSON(t, "quantize")
	if strings.Contains(errOut, "up to date") {
		t.Errorf("stale quantize skipped: %s", errOut)
	}

	if err := os.RemoveAll(filepath.Join(ws, "tiny-merged")); err != nil {
		t.Fatal(err)
	}
	if m := status()["merge"]; m.State != workspace.Missing {
		t.Errorf("merge with its output deleted is %s (%s)", m.State, m.Why)
	}
	_, errOut = runJSON(t, "-v", "quantize", "--force")
	if !strings.Contains(errOut, "reads adapter0") || !strings.Contains(errOut, "the workspace's base") {
		t.Errorf("without the merged folder quantize must read the base and adapter: %s", errOut)
	}

	code, out, e := runCLI(t, context.Background(), "reset", "merge")
	if code != 0 || !strings.Contains(out, "forgot a merge run") {
		t.Fatalf("reset merge: %d %q %s", code, out, e)
	}
	if m := status()["merge"]; m.State != workspace.NotRun {
		t.Errorf("after reset merge: %s", m.State)
	}
	if code, _, e := runCLI(t, context.Background(), "reset", "merg"); code != exitUsage || !strings.Contains(e, "did you mean merge") {
		t.Errorf("reset of an unknown stage: %d %s", code, e)
	}
	if code, _, e := runCLI(t, context.Background(), "reset"); code != 0 {
		t.Fatalf("reset: %s", e)
	}
	for name, st := range status() {
		if st.State != workspace.NotRun {
			t.Errorf("after reset, %s is %s", name, st.State)
		}
	}
}

// TestInputMistakes is issue 13 item 8: a missing adapter folder is a usage error (not exit 1), a GGUF given
// as --model says so, and a near-miss type gets a did-you-mean.
func TestInputMistakes(t *testing.T) {
	_, top := newTestWorkspace(t)
	g := filepath.Join(top, "m.gguf")
	os.WriteFile(g, []byte("GGUF\x03\x00\x00\x00"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"merge", "--lora", filepath.Join(top, "nope")}, exitUsage, "nope: no such folder"},
		{[]string{"quantize", "q4_k_m", "--lora", filepath.Join(top, "nope")}, exitUsage, "nope: no such folder"},
		{[]string{"quantize", "q4_k_m", "--model", g}, exitUsage, "is a GGUF file, not a Hugging Face checkpoint folder (quantize reads a GGUF with --in)"},
		{[]string{"convert", "--model", g}, exitUsage, "is a GGUF file"},
		{[]string{"quantize", "q4km"}, exitUsage, "did you mean q4_k_m?"},
	} {
		code, _, e := runCLI(t, context.Background(), c.args...)
		if code != c.code || !strings.Contains(e, c.want) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and one line with %q", c.args, code, e, c.code, c.want)
		}
	}
}

// TestRunInWorkspace: the demo's way of running steps in its workspace changes neither the environment nor
// the working directory of the process.
func TestRunInWorkspace(t *testing.T) {
	ws, _ := newTestWorkspace(t)
	t.Setenv("PHONELLM_WORKSPACE", "")
	wd, _ := os.Getwd()
	var out, errb strings.Builder
	if code := runIn(context.Background(), []string{"status", "--json"}, ui.Test(&out, &errb), ws); code != 0 {
		t.Fatalf("status in %s: %d %s", ws, code, errb.String())
	}
	if !strings.Contains(out.String(), `"workspace": "`+ws+`"`) {
		t.Errorf("status ran in another workspace: %s", out.String())
	}
	if now, _ := os.Getwd(); now != wd || os.Getenv("PHONELLM_WORKSPACE") != "" {
		t.Errorf("working directory %s (was %s), PHONELLM_WORKSPACE %q", now, wd, os.Getenv("PHONELLM_WORKSPACE"))
	}
	if got := inWorkspace(ws, []string{"inspect", "--tensors=false", "base"}); got[2] != filepath.Join(ws, "base") {
		t.Errorf("inWorkspace: %v", got)
	}
}

// TestConvertChecksBeforeItRecords: convert used to record its run but never looked before converting again.
func TestConvertChecksBeforeItRecords(t *testing.T) {
	newTestWorkspace(t)
	first, errOut := runJSON(t, "convert", "--outtype", "f16")
	if strings.Contains(errOut, "up to date") {
		t.Fatalf("first convert skipped: %s", errOut)
	}
	again, errOut := runJSON(t, "convert", "--outtype", "f16")
	if !strings.Contains(errOut, "up to date") || again.Artifacts[0].SHA256 != first.Artifacts[0].SHA256 {
		t.Errorf("second convert: %s %+v", errOut, again.Artifacts)
	}
	if _, errOut := runJSON(t, "convert", "--outtype", "f16", "--force"); strings.Contains(errOut, "up to date") {
		t.Errorf("convert --force skipped: %s", errOut)
	}
	// A plain quantize now reads the converted GGUF (newer than any merge).
	if _, errOut := runJSON(t, "-v", "quantize"); !strings.Contains(errOut, "reads gguf") || !strings.Contains(errOut, "the workspace's convert output") {
		t.Errorf("quantize after convert: %s", errOut)
	}
}
