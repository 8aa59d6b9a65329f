package main

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// TestEvalGate is issue 13 item 3 through the CLI, on the README's flow: right after convert, a plain
// `eval --reference F16` used to pick that same F16 as "the newest quantized model" and pass with KLD 0; it
// must refuse (exit 2, saying why), and pick the quantized model once there is one. An explicit candidate
// that is the reference is an input error (exit 3); a candidate whose logits are NaN fails the gate (exit 4).
func TestEvalGate(t *testing.T) {
	if testing.Short() {
		t.Skip("converts, quantizes and runs a tiny model twice")
	}
	ck := tinyCheckpoint(t, "qwen3")
	ws := t.TempDir()
	t.Setenv("PHONELLM_WORKSPACE", ws)
	t.Setenv("PHONELLM_HOME", t.TempDir())
	ctx := context.Background()
	if code, _, e := runCLI(t, ctx, "init", "--dir", ws, "--base", ck, "--name", "tiny"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	if code, _, e := runCLI(t, ctx, "convert", "--outtype", "f16"); code != 0 {
		t.Fatalf("convert: %s", e)
	}
	ref := filepath.Join(ws, "tiny-F16.gguf")
	prompts := filepath.Join(ws, "prompts.txt")
	os.WriteFile(prompts, []byte("The bank flagged the payment.\n\nRisk review: the account is new and the amount is large.\n"), 0o644)

	code, _, e := runCLI(t, ctx, "eval", "--reference", ref, "--prompts", prompts, "--threads", "1")
	if code != exitUsage || !strings.Contains(e, "no quantized model") || !strings.Contains(e, "is the reference") {
		t.Fatalf("eval right after convert: exit %d, %s", code, e)
	}
	if code, _, e := runCLI(t, ctx, "eval", "--reference", ref, "--candidate", ref, "--prompts", prompts); code != exitBadInput || !strings.Contains(e, "reference itself") {
		t.Fatalf("eval of the reference against itself: exit %d, %s", code, e)
	}

	if code, _, e := runCLI(t, ctx, "quantize", "q8_0"); code != 0 {
		t.Fatalf("quantize: %s", e)
	}
	q8 := filepath.Join(ws, "tiny-Q8_0.gguf")
	code, out, e := runCLI(t, ctx, "eval", "--reference", ref, "--prompts", prompts, "--threads", "1", "--ctx", "512")
	if code != 0 || !strings.Contains(e, "candidate: "+q8) || !strings.Contains(out, "(") || !strings.Contains(out, "2 prompts") {
		t.Fatalf("eval after quantize: exit %d\nstdout %s\nstderr %s", code, out, e)
	}

	// A broken candidate: every Q8_0 block scale of the (tied) embedding set to NaN.
	nan := filepath.Join(ws, "nan-Q8_0.gguf")
	b, err := os.ReadFile(q8)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.OpenFile(q8)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors {
		if ti.Name != "token_embd.weight" || ti.Type != gguf.TypeQ8_0 {
			continue
		}
		start := f.DataOffset + int64(ti.Offset)
		for off := start; off < start+int64(ti.Size()); off += ti.Type.BlockBytes() {
			binary.LittleEndian.PutUint16(b[off:], 0x7E00) // f16 NaN
		}
	}
	f.Close()
	os.WriteFile(nan, b, 0o644)
	code, out, e = runCLI(t, ctx, "eval", "--reference", ref, "--candidate", nan, "--prompts", prompts, "--threads", "1", "--ctx", "512")
	if code != exitVerdict || !strings.Contains(out, "NaN") {
		t.Fatalf("NaN candidate: exit %d (want %d)\nstdout %s\nstderr %s", code, exitVerdict, out, e)
	}
}
