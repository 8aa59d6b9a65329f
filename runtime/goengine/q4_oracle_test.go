package goengine

import (
	"slices"
	"math"
	"fmt"
	"github.com/phonellm/phonellm/runtime"
	"context"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/quantize"
)

// TestQuantizedGreedyMatchesLlamaCpp is issue 5's acceptance for quantized
// files: the tiny qwen3 and qwen35 checkpoints go through phonellm's own
// pipeline (HF checkpoint -> F16 GGUF -> Q4_K_M with phonellm's quantizer),
// and greedy output of this engine on the F16 and the Q4_K_M file equals
// upstream llama.cpp's (node-llama-cpp) token for token for 32 tokens, with
// the model's own chat template applied (compareWithOracle).
//
// Both engines run ggml's Q4_K x Q8_K dot products, so their logits agree to
// float rounding; the fixed prompts are used as they are, without any prompt
// selection.
func TestQuantizedGreedyMatchesLlamaCpp(t *testing.T) {
	dir := oracleDir(t)
	for _, preset := range []string{"qwen3", "qwen35"} {
		t.Run(preset, func(t *testing.T) {
			f16, q4 := pipelineGGUFs(t, preset)
			for _, c := range []struct{ name, path string }{{"F16", f16}, {"Q4_K_M", q4}} {
				t.Run(c.name, func(t *testing.T) {
					e, err := Load(context.Background(), Options{Path: c.path, Threads: 1, ContextLength: 512})
					if err != nil {
						t.Fatal(err)
					}
					defer e.Close()
					compareWithOracle(t, e, dir)
				})
			}
		})
	}
}

// pipelineGGUFs generates the tiny preset checkpoint, converts it to F16 and
// quantizes that to Q4_K_M, returning both GGUF paths.
func pipelineGGUFs(t *testing.T, preset string) (f16, q4 string) {
	t.Helper()
	spec, ok := tinymodel.Preset(preset)
	if !ok {
		t.Fatalf("no tiny preset %q", preset)
	}
	tmp := t.TempDir()
	model := filepath.Join(tmp, preset)
	if err := tinymodel.Generate(model, spec); err != nil {
		t.Fatalf("generate %s: %v", preset, err)
	}
	ctx := context.Background()
	f16 = filepath.Join(tmp, preset+"-F16.gguf")
	if _, err := convert.Run(ctx, convert.Options{Model: model, Out: f16, OutType: convert.OutF16}, nil); err != nil {
		t.Fatalf("convert %s: %v", preset, err)
	}
	src, err := quantize.OpenGGUF(f16)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	q4 = filepath.Join(tmp, preset+"-Q4_K_M.gguf")
	res, err := quantize.Run(ctx, quantize.Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: q4}, nil)
	if err != nil {
		t.Fatalf("quantize %s: %v", preset, err)
	}
	// The test is only about Q4_K if the plan actually quantized to it.
	var q4k int
	for _, e := range res.Plan.Entries {
		if e.To == gguf.TypeQ4_K {
			q4k++
		}
	}
	if q4k == 0 {
		t.Fatalf("%s: Q4_K_M plan has no Q4_K tensor: %+v", preset, res.Plan.Entries)
	}
	return f16, q4
}

func TestQ4Diag(t *testing.T) {
	dir := oracleDir(t)
	for _, preset := range []string{"qwen3", "qwen35"} {
		_, q4 := pipelineGGUFs(t, preset)
		e, err := Load(context.Background(), Options{Path: q4, Threads: 1, ContextLength: 512})
		if err != nil {
			t.Fatal(err)
		}
		e1, err := Load(context.Background(), Options{Path: q4, Threads: 1, ContextLength: 512, BatchSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			msg := fmt.Sprintf("Transaction %d: amount %d EUR to account %d. Fraud?", i, 100+i*37, 9000+i*13)
			if i == 0 {
				msg = "hello world"
			}
			prompt, _ := e.ApplyChatTemplate([]runtime.Message{{Role: "system", Content: "Answer briefly."}, {Role: "user", Content: msg}},
				runtime.TemplateOptions{AddGenerationPrompt: true})
			got, _ := e.Generate(context.Background(), runtime.Request{Prompt: prompt, MaxTokens: 32}, nil)
			ids, _ := e.Tokenize(prompt, true)
			all := append(slices.Clone(ids), got.Tokens...)
			margins := func(e *Engine) []float64 {
				var ms []float64
				e.Logits(context.Background(), all, func(pos int, l []float32) error {
					if pos < len(ids)-1 || pos >= len(all)-1 {
						return nil
					}
					a, b := float32(-1e30), float32(-1e30)
					for _, v := range l {
						if v > a {
							a, b = v, a
						} else if v > b {
							b = v
						}
					}
					ms = append(ms, float64(a-b))
					return nil
				})
				return ms
			}
			mb, ms := margins(e), margins(e1)
			want := runOracle(t, dir, q4, prompt, 32)
			first := -1
			for k := range min(len(got.Tokens), len(want.Tokens)) {
				if got.Tokens[k] != want.Tokens[k] {
					first = k
					break
				}
			}
			if first < 0 && len(got.Tokens) != len(want.Tokens) {
				first = min(len(got.Tokens), len(want.Tokens))
			}
			minAt := func(ms []float64) (float64, int) {
				m, at := math.Inf(1), -1
				for k, v := range ms {
					if v < m {
						m, at = v, k
					}
				}
				return m, at
			}
			m1, a1 := minAt(mb)
			m2, a2 := minAt(ms)
			fm := -1.0
			if first >= 0 && first < len(ms) {
				fm = ms[first]
			}
			t.Logf("%s #%d n=%d first-div=%d margin-there(step)=%.3f  min-margin batch %.3f@%d step %.3f@%d", preset, i, len(got.Tokens), first, fm, m1, a1, m2, a2)
		}
		e.Close()
		e1.Close()
	}
}
