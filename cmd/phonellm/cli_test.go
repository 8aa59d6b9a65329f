package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// runCLI runs phonellm in-process and returns exit code, stdout and stderr.
func runCLI(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, ui.Test(&out, &errb))
	return code, out.String(), errb.String()
}

func tinyCheckpoint(t *testing.T, preset string) string {
	t.Helper()
	spec, ok := tinymodel.Preset(preset)
	if !ok {
		t.Fatalf("no preset %s", preset)
	}
	dir := filepath.Join(t.TempDir(), preset)
	if err := tinymodel.Generate(dir, spec); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := runCLI(t, context.Background(), "version", "--json")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Go == "" {
		t.Fatalf("version --json: code %d, %q", code, out)
	}
	code, out, _ = runCLI(t, context.Background(), "help", "environment")
	for _, name := range []string{"HF_TOKEN", "HF_ENDPOINT", "HF_HOME", "NO_COLOR", "PHONELLM_WORKSPACE"} {
		if code != 0 || !strings.Contains(out, name) {
			t.Errorf("help environment lacks %s (code %d)", name, code)
		}
	}
	code, out, _ = runCLI(t, context.Background(), "completion", "bash")
	if code != 0 || !strings.Contains(out, "phonellm") {
		t.Errorf("completion bash: code %d", code)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"convert", "--no-such-flag"}, {"quantize", "q4_k_x", "--in", "x.gguf"}, {"quantize"}} {
		code, _, errOut := runCLI(t, context.Background(), args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, errOut)
		}
	}
	_, _, errOut := runCLI(t, context.Background(), "quantize", "q4_k_x", "--in", "x.gguf")
	if low := strings.ToLower(errOut); !strings.Contains(low, "q4_k_m") || !strings.Contains(low, "q8_0") {
		t.Errorf("unknown type should list the valid ones: %s", errOut)
	}
}

// TestConvertMalformed is issue 2's bad-input acceptance: each malformed checkpoint gives a one-line error
// naming the file and the field, a non-zero exit, and no output file.
func TestConvertMalformed(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string
		code   int
	}{
		{"truncated safetensors", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-1000], 0o644)
		}, []string{"model.safetensors"}, exitBadInput},
		{"header lies about offsets", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, _ := os.ReadFile(p)
			n := binary.LittleEndian.Uint64(b)
			hdr := string(b[8 : 8+n])
			// Shift the first tensor's end offset: the entries no longer tile the data.
			i := strings.Index(hdr, `"data_offsets":[0,`)
			if i < 0 {
				t.Fatalf("no first tensor in header %q", hdr[:100])
			}
			j := i + len(`"data_offsets":[0,`)
			hdr = hdr[:j] + "1" + hdr[j:]
			nb := make([]byte, 8)
			binary.LittleEndian.PutUint64(nb, uint64(len(hdr)))
			os.WriteFile(p, append(append(nb, hdr...), b[8+n:]...), 0o644)
		}, []string{"model.safetensors"}, exitBadInput},
		{"missing config key", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { delete(c, "hidden_size") })
		}, []string{"config.json", "hidden_size"}, exitBadInput},
		{"unknown architecture", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["architectures"] = []string{"LlamaForCausalLM"} })
		}, []string{"config.json", "LlamaForCausalLM"}, exitBadInput},
		{"unsupported dtype", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			f, err := safetensors.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			var plan []safetensors.WriteInfo
			raw := map[string][]byte{}
			for _, ti := range f.Tensors() {
				wi := safetensors.WriteInfo{Name: ti.Name, DType: ti.DType, Shape: ti.Shape}
				r, _ := f.Raw(ti.Name)
				b := make([]byte, ti.Size)
				r.ReadAt(b, 0)
				if strings.HasSuffix(ti.Name, "layers.0.mlp.up_proj.weight") {
					wi.DType = safetensors.F8E4M3
					b = b[:ti.Size/4]
				}
				plan = append(plan, wi)
				raw[ti.Name] = b
			}
			f.Close()
			w, err := safetensors.Create(p, plan, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, wi := range plan {
				if err := w.WriteTensor(wi.Name, raw[wi.Name]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Commit(); err != nil {
				t.Fatal(err)
			}
		}, []string{"F8_E4M3", "up_proj"}, exitBadInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := tinyCheckpoint(t, "qwen3")
			c.break_(t, dir)
			outDir := t.TempDir()
			out := filepath.Join(outDir, "out.gguf")
			code, stdout, errOut := runCLI(t, context.Background(), "convert", "--model", dir, "--outtype", "f16", "-o", out)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr %q", code, c.code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "error: ") {
				t.Errorf("last stderr line %q is not the error", last)
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q does not name %q", last, w)
				}
			}
			if stdout != "" {
				t.Errorf("stdout %q on failure", stdout)
			}
			if entries, _ := os.ReadDir(outDir); len(entries) != 0 {
				t.Errorf("output folder not empty: %v", entries)
			}
		})
	}
}

func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, _ := os.ReadFile(p)
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	b, _ = json.Marshal(c)
	os.WriteFile(p, b, 0o644)
}

// TestInterruptLeavesNothing: a cancelled context (Ctrl-C) exits 130 and leaves no output.
func TestInterruptLeavesNothing(t *testing.T) {
	dir := tinyCheckpoint(t, "qwen3")
	outDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, _, errOut := runCLI(t, ctx, "quantize", "q4_k_m", "--model", dir, "-o", filepath.Join(outDir, "q.gguf"))
	if code != exitInterrupted {
		t.Errorf("exit %d, want 130 (%s)", code, errOut)
	}
	if entries, _ := os.ReadDir(outDir); len(entries) != 0 {
		t.Errorf("output folder not empty: %v", entries)
	}
}

// TestPipelineJSON runs convert → quantize (from the file and directly) → inspect → fit through the CLI with
// --json and checks the results chain and agree.
func TestPipelineJSON(t *testing.T) {
	dir := tinyCheckpoint(t, "qwen35")
	outDir := t.TempDir()
	f16 := filepath.Join(outDir, "m-F16.gguf")
	if code, _, e := runCLI(t, context.Background(), "convert", "--model", dir, "--outtype", "f16", "-o", f16, "--json"); code != 0 {
		t.Fatalf("convert: %s", e)
	}
	q1, q2 := filepath.Join(outDir, "a.gguf"), filepath.Join(outDir, "b.gguf")
	var r1, r2 struct {
		Artifacts []struct{ SHA256 string } `json:"artifacts"`
	}
	code, out, e := runCLI(t, context.Background(), "quantize", "q4_k_m", "--in", f16, "-o", q1, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &r1) != nil {
		t.Fatalf("quantize --in: %d %s", code, e)
	}
	code, out, e = runCLI(t, context.Background(), "quantize", "Q4_K_M", "--model", dir, "-o", q2, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &r2) != nil {
		t.Fatalf("quantize --model: %d %s", code, e)
	}
	if r1.Artifacts[0].SHA256 != r2.Artifacts[0].SHA256 {
		t.Errorf("quantizing the F16 file and the checkpoint differ: %s vs %s", r1.Artifacts[0].SHA256, r2.Artifacts[0].SHA256)
	}
	code, out, _ = runCLI(t, context.Background(), "inspect", q1, "--json")
	var ins inspectResult
	if code != 0 || json.Unmarshal([]byte(out), &ins) != nil || ins.Architecture != "qwen35" || ins.FileType != "Q4_K_M" {
		t.Errorf("inspect: code %d arch %q type %q", code, ins.Architecture, ins.FileType)
	}
	code, _, e = runCLI(t, context.Background(), "fit", q1, "--phone", "8gb", "--json")
	if code != 0 {
		t.Errorf("fit: %d %s", code, e)
	}
}

// TestFusedLoRAEqualsMergeThenQuantize is issue 4's acceptance for the fused path: quantizing the base with
// --lora applied on the fly gives the same tensor data as merging to a checkpoint and quantizing that, for a
// plain LoRA and for an adapter that changes tied embeddings (which must come out untied in both).
func TestFusedLoRAEqualsMergeThenQuantize(t *testing.T) {
	for _, c := range []struct {
		preset  string
		adapter tinymodel.AdapterSpec
	}{
		{"qwen35", tinymodel.AdapterSpec{Rank: 8, Alpha: 16, TargetModules: []string{"q_proj", "v_proj", "o_proj", "down_proj", "in_proj_qkv"}}},
		{"qwen3", tinymodel.AdapterSpec{Rank: 4, Alpha: 8, TargetModules: []string{"q_proj", "embed_tokens"}}},
	} {
		t.Run(c.preset, func(t *testing.T) {
			spec, _ := tinymodel.Preset(c.preset)
			base := tinyCheckpoint(t, c.preset)
			adapter := filepath.Join(t.TempDir(), "adapter")
			if err := tinymodel.GenerateAdapter(adapter, spec, c.adapter); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			merged := filepath.Join(out, "merged")
			if code, _, e := runCLI(t, context.Background(), "merge", "--base", base, "--lora", adapter, "-o", merged); code != 0 {
				t.Fatalf("merge: %s", e)
			}
			a, b := filepath.Join(out, "a.gguf"), filepath.Join(out, "b.gguf")
			if code, _, e := runCLI(t, context.Background(), "quantize", "q4_k_m", "--model", merged, "-o", a); code != 0 {
				t.Fatalf("quantize merged: %s", e)
			}
			code, _, e := runCLI(t, context.Background(), "quantize", "q4_k_m", "--model", base, "--lora", adapter, "-o", b)
			if code != 0 {
				t.Fatalf("quantize --lora: %s", e)
			}
			ta, tb := ggufTensors(t, a), ggufTensors(t, b)
			if len(ta) != len(tb) {
				t.Fatalf("%d tensors after merge, %d fused", len(ta), len(tb))
			}
			for name, d := range ta {
				if !bytes.Equal(d, tb[name]) {
					t.Errorf("tensor %s differs between merge+quantize and quantize --lora", name)
				}
			}
			base0 := filepath.Join(out, "base.gguf")
			if code, _, e := runCLI(t, context.Background(), "quantize", "q4_k_m", "--model", base, "-o", base0); code != 0 {
				t.Fatalf("quantize base: %s", e)
			}
			t0 := ggufTensors(t, base0)
			changed := 0
			for name, d := range ta {
				if !bytes.Equal(d, t0[name]) {
					changed++
				}
			}
			if changed == 0 {
				t.Error("the adapter changed no tensor")
			}
			if _, untied := ta["output.weight"]; c.preset == "qwen3" && !untied {
				t.Error("embedding LoRA on a tied model: output.weight missing (the trained head was dropped)")
			}
		})
	}
}

func ggufTensors(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := gguf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	for _, ti := range f.Tensors {
		r, _ := f.TensorReader(ti.Name)
		b := make([]byte, r.Size())
		if _, err := r.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		out[ti.Name] = b
	}
	return out
}
