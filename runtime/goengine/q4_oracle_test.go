package goengine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/runtime/engine"
)

// Quantized files and the oracle: what was measured, and why the Q4_K_M
// comparison selects its prompts.
//
// The F16 files agree with llama.cpp to float rounding (logit differences
// over 32 greedy steps: rms 0.002-0.003, max 0.013), so they are compared on
// the fixed prompts of compareWithOracle. Files with quantized weights do not
// run the same kernels in the two engines: llama.cpp's CPU backend repacks
// Q4_K, Q5_K, Q6_K, Q4_0 and Q8_0 weights into interleaved layouts with
// their own gemv/gemm code (and node-llama-cpp loads the AVX-512 variant on
// CPUs that have it), Ollama's ggml backend keeps the plain layout and its
// vec_dot kernels (built for x86-64-v3), and both quantize activations to 8 bits, which turns
// rounding-level differences into steps of 1/127 of a block's maximum. On
// the tiny random models this gives logit differences between the engines of
// rms 0.03-0.05, max 0.2-0.4 (Q4_K_M, Q4_K_S, Q6_K, Q4_0 and Q8_0 alike,
// with either engine evaluating one token per pass or whole prompts), and the
// same size (rms 0.036-0.051, max 0.25) between llama.cpp's own batched and
// token-by-token evaluation of the same tokens: it is the noise floor of
// quantized inference, not an engine error. The tiny models' top-two logit
// margins are often below it (over 64 prompts, the smallest margin within 32
// greedy steps was 0.001-0.11), so on an arbitrary prompt the greedy paths
// can part at a near tie: on 30 prompts per model about two thirds parted
// within 32 tokens, at margins of 0.001-0.2 in this engine. (Five more
// qwen35 prompts parted at margins near 0.47: there llama.cpp had ended
// generation on <|fim_pad|>, an end-of-generation token for llama.cpp but
// not for this engine; TestEOGMatchesLlamaCpp checks the set directly.)
// TestQuantizedLogitsMatchLlamaCpp bounds the noise itself, teacher-forced,
// and checks it stays far below the quantization error.
//
// The Q4_K_M comparison therefore picks, from a fixed list of 64 candidate
// prompts, the two whose greedy path in THIS engine has the largest smallest
// top-two margin (selectPrompts; it never looks at the oracle's output), and
// requires llama.cpp's prompt tokens and greedy tokens (32, or up to its
// end-of-generation token) to equal this engine's exactly. This lowers the
// risk of a near tie but cannot exclude one: the selection is tied to these
// generated files and kernels, and a failure reports the first differing
// position and this engine's margin there, to be judged against the noise
// floor above.

// q4Candidates are the candidate user messages for the quantized comparison
// (system prompt "Answer briefly.", chat template applied).
func q4Candidates() []string {
	msgs := []string{"hello world", "Is this transaction fraud? Amount: 9,999 EUR."}
	for i := range 62 {
		msgs = append(msgs, fmt.Sprintf("Transaction %d: amount %d EUR to account %d. Fraud?", i+1, 100+(i+1)*37, 9000+(i+1)*13))
	}
	return msgs
}

// q4Selected is how many prompts the quantized comparison checks per file.
const q4Selected = 2

// TestQuantizedGreedyMatchesLlamaCpp is issue 5's acceptance for files made
// by phonellm's own pipeline: the tiny qwen3 and qwen35 checkpoints are
// converted to F16 and quantized to Q4_K_M with phonellm's quantizer, and
// this engine's greedy output (chat template applied, 32 tokens) equals
// upstream llama.cpp's (node-llama-cpp) token for token: on the fixed prompts
// for F16, on margin-selected prompts for Q4_K_M (see above).
func TestQuantizedGreedyMatchesLlamaCpp(t *testing.T) {
	oracle.Shared(t) // skips (or fails) the test when the oracle is missing
	for _, preset := range []string{"qwen3", "qwen35"} {
		t.Run(preset, func(t *testing.T) {
			f16, q4 := pipelineGGUFs(t, preset)
			t.Run("F16", func(t *testing.T) {
				e := loadOracleEngine(t, f16)
				compareWithOracle(t, e)
			})
			t.Run("Q4_K_M", func(t *testing.T) {
				e := loadOracleEngine(t, q4)
				for _, c := range selectPrompts(t, e, q4Candidates(), q4Selected) {
					t.Logf("prompt %q: smallest top-two margin %.3f at step %d", c.msg, c.minMargin, c.minAt)
					want := runOracle(t, q4, c.prompt, 32)
					if !slices.Equal(c.ids, want.Prompt) {
						t.Fatalf("%q: prompt tokens\n got  %v\n want %v", c.msg, c.ids, want.Prompt)
					}
					if !slices.Equal(c.tokens, want.Tokens) {
						t.Errorf("%q: greedy tokens differ from llama.cpp %s\n got  %v\n want %v", c.msg, c.divergence(e, want.Tokens), c.tokens, want.Tokens)
					}
				}
			})
		})
	}
}

func loadOracleEngine(t *testing.T, path string) *Engine {
	t.Helper()
	e, err := Load(context.Background(), Options{Path: path, Threads: 1, ContextLength: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// candidate is one prompt with this engine's greedy path and the top-two
// logit margins along it.
type candidate struct {
	msg, prompt  string
	ids, tokens  []int32
	margins      []float64 // margins[k]: top-1 minus top-2 logit before token k
	minMargin    float64
	minAt, index int
}

// divergence describes the first position where want differs from c.tokens.
func (c candidate) divergence(e *Engine, want []int32) string {
	k := 0
	for k < len(c.tokens) && k < len(want) && c.tokens[k] == want[k] {
		k++
	}
	margin := "n/a"
	if k < len(c.margins) {
		margin = fmt.Sprintf("%.4f", c.margins[k])
	}
	switch {
	case k == len(want) && k < len(c.tokens):
		return fmt.Sprintf("at step %d: llama.cpp ended generation where this engine produced %d (%q) with margin %s; is %d an end-of-generation token in llama.cpp but not here?",
			k, c.tokens[k], e.vocab.Values[c.tokens[k]], margin, c.tokens[k])
	case k == len(c.tokens) && k < len(want):
		return fmt.Sprintf("at step %d: this engine ended generation, llama.cpp produced %d", k, want[k])
	}
	return fmt.Sprintf("first at step %d: %d here (top-two margin %s), %d in llama.cpp", k, c.tokens[k], margin, want[k])
}

// selectPrompts generates 32 greedy tokens for every message and returns the
// n whose smallest top-two margin along the path is largest (ties: list
// order). Only this engine's logits are used.
func selectPrompts(t *testing.T, e *Engine, msgs []string, n int) []candidate {
	t.Helper()
	ctx := context.Background()
	var cs []candidate
	for i, msg := range msgs {
		prompt, err := e.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "system", Content: "Answer briefly."}, {Role: "user", Content: msg}},
			engine.TemplateOptions{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Generate(ctx, engine.Request{Prompt: prompt, MaxTokens: 32}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := e.Tokenize(context.Background(), prompt, true)
		if err != nil {
			t.Fatal(err)
		}
		c := candidate{msg: msg, prompt: prompt, ids: ids, tokens: got.Tokens, minMargin: math.Inf(1), index: i}
		all := append(slices.Clone(ids), got.Tokens...)
		err = e.Logits(ctx, all, func(pos int, logits []float32) error {
			k := pos - (len(ids) - 1)
			if k < 0 || k >= len(got.Tokens) {
				return nil
			}
			best, second := float32(math.Inf(-1)), float32(math.Inf(-1))
			for _, v := range logits {
				if v > best {
					best, second = v, best
				} else if v > second {
					second = v
				}
			}
			m := float64(best - second)
			c.margins = append(c.margins, m)
			if m < c.minMargin {
				c.minMargin, c.minAt = m, k
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.margins) != len(got.Tokens) {
			t.Fatalf("%q: %d margins for %d tokens", msg, len(c.margins), len(got.Tokens))
		}
		cs = append(cs, c)
	}
	sort.SliceStable(cs, func(a, b int) bool { return cs[a].minMargin > cs[b].minMargin })
	return cs[:min(n, len(cs))]
}

// pipelineGGUFs generates the tiny preset checkpoint, converts it to F16 and
// quantizes that to Q4_K_M with phonellm's quantizer, returning both paths.
func pipelineGGUFs(t testing.TB, preset string) (f16, q4 string) {
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
	// The comparison is only about Q4_K if the plan actually chose it.
	q4k := 0
	for _, e := range res.Plan.Entries {
		if e.To == gguf.TypeQ4_K {
			q4k++
		}
	}
	if q4k == 0 {
		t.Fatalf("%s: the Q4_K_M plan has no Q4_K tensor: %+v", preset, res.Plan.Entries)
	}
	return f16, q4
}

// forcedScript prints llama.cpp's full logits after the prompt and after
// each of the given tokens, evaluated one token at a time after the prompt
// (as greedy decoding does).
const forcedScript = `import {readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";
const req = JSON.parse(readFileSync(0, "utf8"));
const lib = await import(pathToFileURL(join(req.dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await lib.getLlama({gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: req.model});
const ctx = await model.createContext({contextSize: 512, threads: 1});
const seq = ctx.getSequence();
const prompt = Array.from(model.tokenize(req.prompt, true));
const gen = {logits: true};
let input = prompt.map((t, i) => i === prompt.length - 1 ? [t, {generateNext: gen}] : t);
const rows = [];
for (let i = 0; i <= req.tokens.length; i++) {
	const out = await seq.controlledEvaluate(input);
	const l = out[out.length - 1].next.logits;
	const row = new Array(req.vocab).fill(null);
	for (const [k, v] of l) if (k < req.vocab) row[k] = v;
	rows.push(row);
	if (i < req.tokens.length) input = [[req.tokens[i], {generateNext: gen}]];
}
process.stdout.write(JSON.stringify({prompt, rows}) + "\n");
await ctx.dispose();
await model.dispose();
await llama.dispose();
`

// runNodeScript runs a script of this file with node, JSON in and out.
func runNodeScript(t *testing.T, name, script string, in, out any) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", path)
	cmd.Stdin = bytes.NewReader(b)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, stderr.String())
	}
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("%s output: %v", name, err)
	}
}

// logitDiff is the rms and largest absolute difference of two logit sets.
type logitDiff struct{ rms, max float64 }

// TestQuantizedLogitsMatchLlamaCpp bounds the difference between this
// engine's and llama.cpp's logits on the Q4_K_M files, teacher-forced along
// this engine's greedy path (so a near tie cannot make the paths part), and
// checks that the bound means something: the difference between the engines
// must stay far below the quantization error itself (Q4_K_M against F16 in
// this engine). Measured: engines rms 0.03-0.05, max 0.2-0.4; quantization
// error rms several times larger.
func TestQuantizedLogitsMatchLlamaCpp(t *testing.T) {
	dir := oracleDir(t)
	for _, preset := range []string{"qwen3", "qwen35"} {
		t.Run(preset, func(t *testing.T) {
			f16, q4 := pipelineGGUFs(t, preset)
			eq, ef := loadOracleEngine(t, q4), loadOracleEngine(t, f16)
			vocab := len(eq.vocab.Values)
			for _, msg := range q4Candidates()[:2] {
				prompt, err := eq.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "system", Content: "Answer briefly."}, {Role: "user", Content: msg}},
					engine.TemplateOptions{AddGenerationPrompt: true})
				if err != nil {
					t.Fatal(err)
				}
				got, err := eq.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 32}, nil)
				if err != nil {
					t.Fatal(err)
				}
				ids, err := eq.Tokenize(context.Background(), prompt, true)
				if err != nil {
					t.Fatal(err)
				}
				var want struct {
					Prompt []int32
					Rows   [][]*float64
				}
				runNodeScript(t, "forced.mjs", forcedScript, map[string]any{"dir": dir, "model": q4, "prompt": prompt, "tokens": got.Tokens, "vocab": vocab}, &want)
				if !slices.Equal(ids, want.Prompt) || len(want.Rows) != len(got.Tokens)+1 {
					t.Fatalf("%q: oracle prompt %v rows %d, want %v and %d", msg, want.Prompt, len(want.Rows), ids, len(got.Tokens)+1)
				}
				all := append(slices.Clone(ids), got.Tokens...)
				diff := func(e *Engine, ref func(k, i int) (float64, bool)) logitDiff {
					var sum float64
					var n int
					var d logitDiff
					err := e.Logits(context.Background(), all, func(pos int, l []float32) error {
						k := pos - (len(ids) - 1)
						if k < 0 {
							return nil
						}
						for i := range vocab {
							r, ok := ref(k, i)
							if !ok {
								return fmt.Errorf("no oracle logit for token %d at step %d", i, k)
							}
							x := float64(l[i]) - r
							sum += x * x
							n++
							d.max = max(d.max, math.Abs(x))
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					d.rms = math.Sqrt(sum / float64(n))
					return d
				}
				engines := diff(eq, func(k, i int) (float64, bool) {
					if p := want.Rows[k][i]; p != nil {
						return *p, true
					}
					return 0, false
				})
				var q4Rows [][]float32
				if err := eq.Logits(context.Background(), all, func(pos int, l []float32) error {
					if pos >= len(ids)-1 {
						q4Rows = append(q4Rows, slices.Clone(l[:vocab]))
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				quant := diff(ef, func(k, i int) (float64, bool) { return float64(q4Rows[k][i]), true })
				t.Logf("%q: engines rms %.4f max %.4f; Q4_K_M vs F16 rms %.4f max %.4f", msg, engines.rms, engines.max, quant.rms, quant.max)
				if engines.rms > 0.1 || engines.max > 0.75 {
					t.Errorf("%q: logits differ from llama.cpp by rms %.4f, max %.4f (bounds 0.1, 0.75)", msg, engines.rms, engines.max)
				}
				if engines.rms*4 > quant.rms {
					t.Errorf("%q: engine difference rms %.4f is not far below the quantization error rms %.4f", msg, engines.rms, quant.rms)
				}
			}
		})
	}
}

// eogScript prints the ids llama.cpp treats as end of generation.
const eogScript = `import {readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";
const req = JSON.parse(readFileSync(0, "utf8"));
const lib = await import(pathToFileURL(join(req.dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await lib.getLlama({gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: req.model});
const eog = [];
for (let i = 0; i < req.vocab; i++) if (model.isEogToken(i)) eog.push(i);
process.stdout.write(JSON.stringify(eog) + "\n");
await model.dispose();
await llama.dispose();
`

// TestEOGMatchesLlamaCpp: the engine stops on exactly the tokens llama.cpp
// stops on. llama.cpp adds the FIM pad, repo-name and file-separator tokens
// (<|fim_pad|>, <|repo_name|>, <|file_sep|>, which Qwen tokenizers define)
// to its end-of-generation set; a greedy path that reaches one ends there.
func TestEOGMatchesLlamaCpp(t *testing.T) {
	dir := oracleDir(t)
	f16, _ := pipelineGGUFs(t, "qwen3")
	e := loadOracleEngine(t, f16)
	var want []int32
	runNodeScript(t, "eog.mjs", eogScript, map[string]any{"dir": dir, "model": f16, "vocab": len(e.vocab.Values)}, &want)
	if len(want) == 0 {
		t.Fatal("oracle reports no end-of-generation token")
	}
	var got []int32
	for id := range e.eog {
		got = append(got, id)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		name := func(ids []int32) []string {
			var s []string
			for _, id := range ids {
				s = append(s, fmt.Sprintf("%d %s", id, e.vocab.Values[id]))
			}
			return s
		}
		t.Errorf("end-of-generation tokens\n got  %q\n want %q (llama.cpp)", name(got), name(want))
	}
}
