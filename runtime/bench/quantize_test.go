package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// The quantize harness is tested with this test binary standing in for both programs: with
// BENCH_FAKE_QUANTIZE set, TestMain acts as phonellm (argv "quantize TYPE --in IN -o OUT …") or llama-quantize
// (argv "IN OUT TYPE N"), logs which one ran and writes a small GGUF whose second tensor differs between them.
func TestMain(m *testing.M) {
	if log := os.Getenv("BENCH_FAKE_QUANTIZE"); log != "" {
		os.Exit(fakeQuantize(log, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeQuantize(log string, args []string) int {
	prog, out := "llama", ""
	if len(args) > 0 && args[0] == "quantize" {
		prog = "phonellm"
		for i, a := range args {
			if a == "-o" && i+1 < len(args) {
				out = args[i+1]
			}
		}
	} else if len(args) == 4 {
		out = args[1]
	}
	if out == "" || os.Getenv("BENCH_FAKE_FAIL") == prog {
		fmt.Fprintln(os.Stderr, "fake "+prog+": refusing")
		return 1
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return 2
	}
	fmt.Fprintln(f, prog)
	f.Close()
	w := gguf.NewWriter()
	w.SetKV("general.architecture", gguf.String("qwen3"))
	w.AddTensor("a.weight", gguf.TypeF32, []uint64{4})
	w.AddTensor("b.weight", gguf.TypeF32, []uint64{4})
	o, err := os.Create(out)
	if err != nil {
		return 2
	}
	defer o.Close()
	if err := w.WriteHeader(o); err != nil {
		return 2
	}
	b := make([]byte, 16)
	w.WriteTensor("a.weight", b)
	if prog == "llama" {
		b[3] = 1
	}
	w.WriteTensor("b.weight", b)
	if err := w.Finish(); err != nil {
		return 2
	}
	return 0
}

func fakeOptions(t *testing.T) (QuantizeOptions, string) {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.gguf")
	if err := os.WriteFile(in, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "log")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("BENCH_FAKE_QUANTIZE", log)
	return QuantizeOptions{Phonellm: exe, Env: os.Environ(), Input: in, Types: []string{"Q4_K_M", "Q8_0"},
		Threads: []int{2}, WorkDir: dir}, log
}

func TestQuantizeSameRunAlternates(t *testing.T) {
	o, log := fakeOptions(t)
	o.LlamaQuantize = o.Phonellm
	o.Repeats = 3
	var lines []string
	o.Progress = func(s string) { lines = append(lines, s) }
	res, err := Quantize(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(log)
	got := strings.Fields(string(b))
	round := []string{"llama", "phonellm", "phonellm", "llama", "llama", "phonellm"}
	if want := append(slices.Clone(round), round...); !slices.Equal(got, want) {
		t.Fatalf("run order %v, want %v (alternating, the first program alternating per round)", got, want)
	}
	if len(res.Rows) != 2 || !strings.Contains(res.Note, "same run") {
		t.Fatalf("result %+v", res)
	}
	for _, r := range res.Rows {
		if r.Baseline != "same run" || len(r.Runs) != 3 || len(r.LlamaRuns) != 3 {
			t.Fatalf("row %+v", r)
		}
		if r.Tensors != 2 || r.IdenticalTensors != 1 {
			t.Fatalf("%s: %d of %d tensors identical, want 1 of 2", r.Type, r.IdenticalTensors, r.Tensors)
		}
		if r.ThroughputRatio <= 0 || r.CPURatio <= 0 || r.CPUSeconds <= 0 || r.LlamaCPUSeconds <= 0 || r.InputBytes != 1000 {
			t.Fatalf("%s: ratios or times not filled: %+v", r.Type, r)
		}
	}
	if len(lines) != 2*7 {
		t.Fatalf("%d progress lines, want 14: %q", len(lines), lines)
	}
	if ents, _ := os.ReadDir(o.WorkDir); len(ents) != 2 { // in.gguf and log: no output left behind
		t.Fatalf("work folder holds %d entries after the run", len(ents))
	}
}

func TestQuantizeAnchor(t *testing.T) {
	o, log := fakeOptions(t)
	res, err := Quantize(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(log)
	if got := strings.Fields(string(b)); !slices.Equal(got, []string{"phonellm", "phonellm", "phonellm", "phonellm", "phonellm", "phonellm"}) {
		t.Fatalf("runs %v: only phonellm, Repeats (default 3) times per row", got)
	}
	if !strings.Contains(res.Note, "anchor") {
		t.Fatalf("note %q does not say the baseline is the anchor", res.Note)
	}
	for _, r := range res.Rows {
		a := QuantizeAnchors[r.Type][2]
		if r.Baseline != "anchor" || r.LlamaRuns != nil || r.Tensors != 0 {
			t.Fatalf("row %+v", r)
		}
		wantSec := a.Seconds * 1000 / float64(a.InputBytes)
		if d := r.LlamaSeconds - wantSec; d > 1e-12 || d < -1e-12 || r.ThroughputRatio != r.LlamaSeconds/r.Seconds {
			t.Fatalf("%s: anchor seconds %g (want %g scaled to the input), ratio %g", r.Type, r.LlamaSeconds, wantSec, r.ThroughputRatio)
		}
	}
}

func TestQuantizeChildFails(t *testing.T) {
	o, _ := fakeOptions(t)
	o.LlamaQuantize = o.Phonellm
	t.Setenv("BENCH_FAKE_FAIL", "llama")
	_, err := Quantize(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "llama-quantize Q4_K_M (2 threads)") || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("err = %v, want the failing program, type and its last output line", err)
	}
	o.LlamaQuantize = filepath.Join(o.WorkDir, "missing")
	if _, err := Quantize(context.Background(), o); err == nil || !strings.Contains(err.Error(), "llama-quantize") {
		t.Fatalf("missing llama-quantize: err = %v", err)
	}
}
