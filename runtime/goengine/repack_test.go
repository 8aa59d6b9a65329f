package goengine

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/runtime/engine"
)

// mulmat computes W·X on e's backend for the weight called name, with X
// holding n rows of the given values (len(x) = n·W's row length).
func mulmat(t testing.TB, e *Engine, name string, x []float32, n int) []float32 {
	t.Helper()
	ggmlMu.Lock()
	defer ggmlMu.Unlock()
	w := e.m.Backend().Get(name)
	if w == nil {
		t.Fatalf("no tensor %s", name)
	}
	ctx := e.m.Backend().NewContext()
	defer ctx.Close()
	in := ctx.Input().FromFloats(x, len(x)/n, n)
	y := w.Mulmat(ctx, in)
	ctx.Forward(y).Compute(y)
	return y.Floats()
}

// exactQ8 returns n activations that every q8_0 and q8_K quantizer turns
// into the same integers: k/8 for integers k in [-127, 127], each 32-value
// block holding ±127 (so every block scale is exactly 1/8 and nothing is
// rounded). ggml's plain path and its repack path quantize activations with
// different code (quantize_row_q8_K and ggml_quantize_mat_q8_K_4x8, and the
// q8_0 pair), which on general inputs can round an activation to the
// neighbouring integer and move every output it feeds by one quantization
// step.
func exactQ8(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.IntN(255)-127) / 8
		if i%32 == 0 {
			x[i] = float32(127-254*rng.IntN(2)) / 8
		}
	}
	return x
}

// quantizeTo quantizes the F16 GGUF at f16 to ft with phonellm's quantizer.
func quantizeTo(t *testing.T, f16 string, ft gguf.FileType) string {
	t.Helper()
	src, err := quantize.OpenGGUF(f16)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	out := strings.TrimSuffix(f16, "-F16.gguf") + "-" + ft.String() + ".gguf"
	if _, err := quantize.Run(context.Background(), quantize.Options{Source: src, FileType: ft, Out: out}, nil); err != nil {
		t.Fatalf("quantize %s: %v", out, err)
	}
	return out
}

// TestRepackMatchesPlainLayout: on the tiny Q4_K_M, Q4_0 and IQ4_NL files
// the engine moves the Q4_K, Q4_0 and IQ4_NL matrices into ggml-cpu's
// interleaved layouts at load and hands the Q6_K ones to its own kernel
// (package repack), with one and two threads (the GEMM splits rows between threads),
// and computes what the plain layout (the same file loaded with NoRepack)
// computes:
//
//   - every repacked Q4_K, Q4_0 and IQ4_NL matrix times 1, 4, 13 and 64 activation rows
//     (GEMV, one GEMM tile, tiles plus a remainder, many tiles) equals the
//     plain layout's product up to float summation order, for activations
//     both quantizers represent exactly (exactQ8): the integer dot products
//     are the same, only the float accumulation differs;
//   - every Q6_K matrix, computed by phonellm's kernel (q6k.cpp), gives the
//     very bits of ggml's vec_dot for any activations;
//   - the model's logits, teacher-forced over a prompt and 32 greedy tokens,
//     stay within the quantized-inference noise floor measured between
//     llama.cpp's own batched and token-by-token runs of these files (see
//     q4_oracle_test.go: rms 0.036-0.051, max 0.25): the tiny random models
//     turn a one-step difference in an 8-bit activation into logit changes
//     of that size.
func TestRepackMatchesPlainLayout(t *testing.T) {
	for _, c := range []struct {
		preset string
		ft     gguf.FileType
		types  []string // expected among the converted tensors
	}{
		{"qwen3", gguf.FileTypeQ4_K_M, []string{"q4_K", "q6_K"}},
		{"qwen35", gguf.FileTypeQ4_K_M, []string{"q4_K", "q6_K"}},
		{"qwen3", gguf.FileTypeQ4_0, []string{"q4_0"}},
		{"qwen3", gguf.FileTypeIQ4_NL, []string{"iq4_nl"}},
	} {
		t.Run(c.preset+"-"+c.ft.String(), func(t *testing.T) {
			f16, q4 := pipelineGGUFs(t, c.preset)
			if c.ft != gguf.FileTypeQ4_K_M {
				q4 = quantizeTo(t, f16, c.ft)
			}
			plain, err := Load(context.Background(), Options{Path: q4, Threads: 1, ContextLength: 512, NoRepack: true})
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			if n := plain.Info().RepackedTensors; n != 0 {
				t.Fatalf("NoRepack: %d tensors repacked", n)
			}
			prompt, err := plain.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "user", Content: "Is this transaction fraud? Amount: 9,999 EUR."}},
				engine.TemplateOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			ids, err := plain.Tokenize(context.Background(), prompt, true)
			if err != nil {
				t.Fatal(err)
			}
			gen, err := plain.Generate(context.Background(), engine.Request{Tokens: ids, MaxTokens: 32, IgnoreEOG: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			all := append(slices.Clone(ids), gen.Tokens...)
			var want [][]float32
			if err := plain.Logits(context.Background(), all, func(_ int, l []float32) error {
				want = append(want, slices.Clone(l))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{1, 2} {
				e, err := Load(context.Background(), Options{Path: q4, Threads: threads, ContextLength: 512})
				if err != nil {
					t.Fatal(err)
				}
				for _, typ := range c.types {
					if e.repacked.ByType[typ] == 0 {
						e.Close()
						t.Fatalf("%d threads: no %s tensor was converted (stats %+v)", threads, typ, e.repacked.ByType)
					}
				}
				rng := rand.New(rand.NewPCG(7, uint64(threads)))
				var worstRel float64
				for ti, name := range e.repacked.Names {
					cols := e.m.Backend().Get(name).Dim(0)
					for _, n := range []int{1, 4, 13, 64} {
						q6k := e.repacked.Types[ti] == "q6_K"
						x := exactQ8(rng, cols*n)
						if q6k { // same quantizer as the plain path: any activations
							for i := range x {
								x[i] = float32(rng.NormFloat64())
							}
						}
						got, want := mulmat(t, e, name, x, n), mulmat(t, plain, name, x, n)
						if len(got) != len(want) || len(got) == 0 {
							t.Fatalf("%s × %d rows: %d outputs, plain layout %d", name, n, len(got), len(want))
						}
						// Float32 sums of up to a few thousand terms: relative to the
						// largest output, rounding stays near 1e-6; a wrong layout or a
						// stale buffer is off by O(1).
						var worst, scale float64
						for i := range got {
							worst = max(worst, math.Abs(float64(got[i]-want[i])))
							scale = max(scale, math.Abs(float64(want[i])))
						}
						if q6k && worst != 0 {
							t.Errorf("%d threads: %s × %d rows: the Q6_K kernel differs from ggml's vec_dot by %.3g, want identical bits", threads, name, n, worst)
						}
						if worst > 1e-4*scale {
							t.Errorf("%d threads: %s × %d rows: repacked product differs from the plain layout's by %.3g (largest output %.3g), bound 1e-4 of it", threads, name, n, worst, scale)
						}
						worstRel = max(worstRel, worst/scale)
					}
				}
				var maxDiff, sum float64
				var n int
				err = e.Logits(context.Background(), all, func(pos int, l []float32) error {
					for i, x := range l {
						d := math.Abs(float64(x) - float64(want[pos][i]))
						maxDiff = max(maxDiff, d)
						sum += d * d
						n++
					}
					return nil
				})
				st := e.repacked
				e.Close()
				if err != nil {
					t.Fatal(err)
				}
				rms := math.Sqrt(sum / float64(n))
				t.Logf("%d threads: %d tensors repacked (%v, %d bytes); products vs plain layout: %.2g of the largest output; logits vs plain layout: rms %.2g, max %.2g",
					threads, st.Tensors, st.ByType, st.Bytes, worstRel, rms, maxDiff)
				if rms > 0.1 || maxDiff > 0.75 {
					t.Errorf("%d threads: repacked logits differ from the plain layout's by rms %.3g, max %.3g (bounds 0.1, 0.75)", threads, rms, maxDiff)
				}
			}
		})
	}
}

// BenchmarkMulmat times one weight matrix of each converted type times 512
// activation rows (a prompt batch), in the plain layout and converted, on
// the tiny qwen3 Q4_K_M file (PHONELLM_BENCH_GGUF overrides it); compare the
// ns/op of the two sub-benchmarks of a type:
//
//	go test -run '^$' -bench Mulmat ./runtime/goengine/
func BenchmarkMulmat(b *testing.B) {
	path := os.Getenv("PHONELLM_BENCH_GGUF")
	if path == "" {
		_, path = pipelineGGUFs(b, "qwen3")
	}
	var engines [2]*Engine
	for i, noRepack := range []bool{true, false} {
		e, err := Load(context.Background(), Options{Path: path, Threads: 2, ContextLength: 1024, NoRepack: noRepack})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		engines[i] = e
	}
	done := map[string]bool{}
	for ti, name := range engines[1].repacked.Names {
		typ := engines[1].repacked.Types[ti]
		if done[typ] {
			continue
		}
		done[typ] = true
		cols := engines[1].m.Backend().Get(name).Dim(0)
		x := exactQ8(rand.New(rand.NewPCG(1, 2)), cols*512)
		for i, label := range []string{"plain", "converted"} {
			b.Run(typ+"/"+label, func(b *testing.B) {
				for b.Loop() {
					mulmat(b, engines[i], name, x, 512)
				}
			})
		}
	}
}
