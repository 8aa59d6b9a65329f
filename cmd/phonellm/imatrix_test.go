package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// writeCalibration writes n chat prompts as JSONL.
func writeCalibration(t *testing.T, path string, n int) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"messages":[{"role":"system","content":"You review payments."},{"role":"user","content":"Case %d: the bank flagged the payment because the account is new, the amount is large and the beneficiary changed twice in one week."}]}`+"\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestImatrixWorkspace is the imatrix stage in a workspace (issue 16 item 1): with imatrix: in phonellm.yaml,
// quantize computes the importance matrix first and uses it; the stage is skipped when its inputs did not
// change; a type that needs an importance matrix is refused without one (exit 3, with the hint) and works with
// the workspace's; an importance matrix of another model is refused naming the tensor; status lists the stage.
func TestImatrixWorkspace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tiny model")
	}
	ws, top := newTestWorkspace(t)
	t.Setenv("PHONELLM_THREADS", "1")
	runJSON(t, "merge")
	runJSON(t, "convert")
	writeCalibration(t, filepath.Join(ws, "prompts.jsonl"), 40)
	w, err := workspace.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	w.Project.Imatrix = "prompts.jsonl"
	if err := w.SaveProject(); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI(t, context.Background(), "quantize", "q4_k_m", "--json")
	if code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	var res quantize.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res.Imatrix == nil || res.Imatrix.Used == 0 || !strings.HasSuffix(res.Imatrix.File, ".imatrix.gguf") || res.Imatrix.Dataset != "prompts.jsonl" {
		t.Fatalf("quantize did not use the workspace's importance matrix: %+v (stderr %s)", res.Imatrix, errOut)
	}
	f, err := gguf.OpenFile(res.Artifacts[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	pv := quantize.ReadProvenance(f)
	f.Close()
	if pv.Imatrix == nil || pv.Imatrix.SHA256 == "" || pv.Imatrix.Chunks == 0 {
		t.Fatalf("provenance %+v", pv.Imatrix)
	}
	imPath := filepath.Join(ws, res.Imatrix.File)
	if _, err := imatrix.Read(imPath); err != nil {
		t.Fatal(err)
	}

	// Unchanged inputs: the stage is skipped.
	if code, _, e := runCLI(t, context.Background(), "imatrix"); code != 0 || !strings.Contains(e, "up to date") {
		t.Errorf("imatrix again: exit %d: %s", code, e)
	}
	// A type that needs one: refused without, made with it.
	code, _, e := runCLI(t, context.Background(), "quantize", "iq2_xxs", "--no-imatrix")
	if code != exitBadInput || !strings.Contains(e, "needs an importance matrix") || !strings.Contains(e, "phonellm imatrix") {
		t.Errorf("iq2_xxs --no-imatrix: exit %d: %s", code, e)
	}
	iq, _ := runJSON(t, "quantize", "iq2_xxs")
	if len(iq.Artifacts) != 1 || !strings.Contains(iq.Artifacts[0].Path, "IQ2_XXS") {
		t.Errorf("iq2_xxs with the workspace's importance matrix: %+v", iq)
	}
	// The importance matrix of another model.
	other := filepath.Join(top, "other.imatrix.gguf")
	m := &imatrix.Matrix{Datasets: []string{"x"}, ChunkCount: 1, ChunkSize: 512, Entries: []imatrix.Entry{
		{Name: "blk.0.attn_q.weight", Cols: 128, Sums: make([]float32, 128), Counts: []float64{512}}}}
	if _, _, err := imatrix.WriteFile(other, m, imatrix.FormatGGUF); err != nil {
		t.Fatal(err)
	}
	code, _, e = runCLI(t, context.Background(), "quantize", "q4_k_m", "--imatrix", other, "-o", filepath.Join(top, "x.gguf"))
	if code != exitBadInput || !strings.Contains(e, "blk.0.attn_q.weight") || !strings.Contains(e, "another model") {
		t.Errorf("foreign imatrix: exit %d: %s", code, e)
	}
	if _, err := os.Stat(filepath.Join(top, "x.gguf")); err == nil {
		t.Error("output written despite the foreign imatrix")
	}
	code, text, _ := runCLI(t, context.Background(), "status")
	if code != 0 || !strings.Contains(text, "imatrix") {
		t.Errorf("status: %d %s", code, text)
	}
}
