package oracle

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// The prompt " the" exercises the merge (Ġt), then byte tokens; tokens are ids of tinyVocab.
var tinyPrompt = []int{tokImStart, 'h', 'e', tokMergedSpaceT, 'h', 'e'}

func TestOracleLoadTokenizeLogitsGreedy(t *testing.T) {
	o := Start(t)
	t.Logf("oracle start-up (node + llama.cpp backend): %v", o.StartupTime)
	v, err := o.Version()
	if err != nil {
		t.Fatal(err)
	}
	if v.NodeLlamaCpp != "3.22.1" || v.LlamaCppRelease.Release == "" || v.BuildType != "prebuilt" {
		t.Fatalf("unexpected oracle build %+v", v)
	}
	t.Logf("llama.cpp %s %s via node-llama-cpp %s", v.LlamaCppRelease.Repo, v.LlamaCppRelease.Release, v.NodeLlamaCpp)

	cfg := defaultTinyConfig()
	model := writeTinyQwen3(t, t.TempDir(), "tiny.gguf", cfg)
	start := time.Now()
	info, err := o.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load: %v round trip (llama.cpp %.1f ms), %q", time.Since(start), info.LoadMs, info.Description)
	if info.Architecture != "qwen3" || info.VocabSize != cfg.Vocab || info.EmbeddingLength != cfg.Embd ||
		info.TrainContextSize != cfg.Ctx || info.VocabularyType != "bpe" {
		t.Fatalf("model info %+v", info)
	}
	if info.BOS == nil || *info.BOS != tokEndOfText || info.EOS == nil || *info.EOS != tokImEnd || info.AddBOS {
		t.Fatalf("special tokens: bos %v eos %v addBos %v", info.BOS, info.EOS, info.AddBOS)
	}
	if info.ChatTemplate != chatMLTemplate || info.Metadata["tokenizer.ggml.pre"] != "qwen2" ||
		info.Metadata["qwen3.block_count"] != float64(cfg.Layers) {
		t.Fatalf("metadata: template %q pre %v blocks %v", info.ChatTemplate, info.Metadata["tokenizer.ggml.pre"], info.Metadata["qwen3.block_count"])
	}

	// Tokenizer: the merge "Ġ t" applies, control tokens are parsed only with special=true.
	text := "<|im_start|>he the tt\n"
	got, err := o.Tokenize(model, text, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{tokImStart, 'h', 'e', tokMergedSpaceT, 'h', 'e', tokMergedSpaceT, 't', '\n'}
	if !slices.Equal(got, want) {
		t.Fatalf("tokenize special: %v, want %v", got, want)
	}
	got, err = o.Tokenize(model, "<|im_start|>", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{'<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|', '>'}; !slices.Equal(got, want) {
		t.Fatalf("tokenize plain: %v, want %v", got, want)
	}
	back, err := o.Detokenize(model, want, true)
	if err != nil {
		t.Fatal(err)
	}
	if back != text {
		t.Fatalf("detokenize: %q, want %q", back, text)
	}

	l1 := checkDecode(t, o, model, cfg.Vocab)

	// Different weights must give different logits (the oracle really reads the file).
	cfg2 := cfg
	cfg2.Seed = 2
	cfg2.Tied = true
	model2 := writeTinyQwen3(t, t.TempDir(), "tiny-tied.gguf", cfg2)
	l3, err := o.Logits(model2, tinyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(l1, l3); d < 1e-2 {
		t.Fatalf("two different models give the same logits (|diff| %g)", d)
	}
}

func TestOracleQwen35(t *testing.T) {
	o := Shared(t)
	cfg := tinyQwen35Config()
	model := writeTinyQwen3(t, t.TempDir(), "tiny-qwen35.gguf", cfg)
	info, err := o.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	if info.Architecture != "qwen35" || info.VocabSize != cfg.Vocab || info.Metadata["tokenizer.ggml.pre"] != "qwen35" {
		t.Fatalf("model info %+v", info)
	}
	got, err := o.Tokenize(model, "<|im_start|>he the", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := tinyPrompt; !slices.Equal(got, want) {
		t.Fatalf("tokenize: %v, want %v", got, want)
	}
	// Recurrent (gated delta-net) state must evolve the same way in one batch and token by token.
	checkDecode(t, o, model, cfg.Vocab)
}

func TestOracleRejectsBadGGUF(t *testing.T) {
	o := Shared(t)
	dir := t.TempDir()
	cfg := defaultTinyConfig()
	cfg.SkipMerge = true
	noMerges := writeTinyQwen3(t, dir, "no-merges.gguf", cfg)
	good := writeTinyQwen3(t, dir, "good.gguf", defaultTinyConfig())
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.gguf")
	if err := os.WriteFile(truncated, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, want string
	}{
		{noMerges, "cannot find tokenizer merges"},
		{truncated, "llama.cpp rejected"},
		{filepath.Join(dir, "missing.gguf"), "cannot load"},
	}
	for _, c := range cases {
		_, err := o.Load(c.path)
		var oe *Error
		if !errors.As(err, &oe) {
			t.Fatalf("load %s: error %v, want *oracle.Error", c.path, err)
		}
		if oe.Op != "load" || oe.Model != c.path || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("load %s: %v (op %q model %q), want it to mention %q", c.path, err, oe.Op, oe.Model, c.want)
		}
		t.Logf("rejected as expected: %v", err)
	}
	// The process survives rejections and still serves a good model.
	if _, err := o.Load(good); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Tokenize(good, "x", false); err != nil {
		t.Fatal(err)
	}
	// Invalid requests fail with an *Error, not a dead process.
	if _, err := o.Logits(good, []int{cfg.Vocab}); err == nil || !strings.Contains(err.Error(), "not a token id") {
		t.Fatalf("out-of-vocabulary token: %v", err)
	}
	if _, err := o.Greedy(good, []int{1}, 1000); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Fatalf("over-long greedy: %v", err)
	}
}

func TestOracleReloadsChangedFile(t *testing.T) {
	o := Shared(t)
	dir := t.TempDir()
	cfg := defaultTinyConfig()
	model := writeTinyQwen3(t, dir, "m.gguf", cfg)
	before, err := o.Logits(model, tinyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed = 7
	writeTinyQwen3(t, dir, "m.gguf", cfg) // rewrites model
	// Make sure the modification time moves even on coarse-grained file systems.
	future := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(model, future, future); err != nil {
		t.Fatal(err)
	}
	after, err := o.Logits(model, tinyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	if maxAbsDiff(before, after) < 1e-2 {
		t.Fatal("the oracle kept serving the old file after it was rewritten")
	}
	if err := o.Unload(model); err != nil {
		t.Fatal(err)
	}
	again, err := o.Logits(model, tinyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	if !bitsEqual(after, again) {
		t.Fatal("logits changed after unload and reload of the same file")
	}
}

func TestOracleChat(t *testing.T) {
	o := Shared(t)
	model := writeTinyQwen3(t, t.TempDir(), "tiny.gguf", defaultTinyConfig())
	msgs := []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi the"}}
	res, err := o.Chat(model, msgs, ChatOptions{N: 6})
	if err != nil {
		t.Fatal(err)
	}
	wantPrompt := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi the<|im_end|>\n<|im_start|>assistant\n"
	if res.Prompt != wantPrompt {
		t.Fatalf("prompt %q, want %q", res.Prompt, wantPrompt)
	}
	toks, err := o.Tokenize(model, wantPrompt, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.PromptTokens, toks) {
		t.Fatalf("prompt tokens %v, want %v", res.PromptTokens, toks)
	}
	if len(res.CompletionTokens) == 0 || len(res.CompletionTokens) > 6 {
		t.Fatalf("completion tokens %v", res.CompletionTokens)
	}
	g, err := o.Greedy(model, toks, 6)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.CompletionTokens, g[:len(res.CompletionTokens)]) {
		t.Fatalf("chat completion %v is not the greedy decode %v", res.CompletionTokens, g)
	}
	if len(res.CompletionTokens) < 6 && res.CompletionTokens[len(res.CompletionTokens)-1] != tokImEnd &&
		res.CompletionTokens[len(res.CompletionTokens)-1] != tokEndOfText {
		t.Fatalf("completion stopped early without an end-of-generation token: %v", res.CompletionTokens)
	}

	noGen, err := o.Chat(model, msgs[1:], ChatOptions{NoGenerationPrompt: true, Template: chatMLTemplate})
	if err != nil {
		t.Fatal(err)
	}
	if noGen.Prompt != "<|im_start|>user\nhi the<|im_end|>\n" || noGen.CompletionTokens != nil {
		t.Fatalf("no-generation prompt %q, completion %v", noGen.Prompt, noGen.CompletionTokens)
	}

	cfg := defaultTinyConfig()
	cfg.Template = ""
	bare := writeTinyQwen3(t, t.TempDir(), "no-template.gguf", cfg)
	if _, err := o.Chat(bare, msgs, ChatOptions{}); err == nil || !strings.Contains(err.Error(), "chat_template") {
		t.Fatalf("chat without a template: %v", err)
	}
}

func TestOracleBench(t *testing.T) {
	if testing.Short() {
		t.Skip("bench op in -short mode")
	}
	o := Start(t)
	o.Context.Threads = 1
	model := writeTinyQwen3(t, t.TempDir(), "tiny.gguf", defaultTinyConfig())
	r, err := o.Bench(model, 64, 8)
	if err != nil {
		t.Fatal(err)
	}
	if r.PromptTokens != 64 || r.GenTokens != 8 || r.Threads != 1 || !(r.PromptTokPerSec > 0) || !(r.GenTokPerSec > 0) {
		t.Fatalf("bench %+v", r)
	}
	t.Logf("tiny model, 1 thread: pp %.0f tok/s, tg %.0f tok/s", r.PromptTokPerSec, r.GenTokPerSec)
}

// BenchmarkStartLoad measures the fixed cost of the oracle for a test: process start, llama.cpp backend
// load, model load, and close.
func BenchmarkStartLoad(b *testing.B) {
	if err := Available(); err != nil {
		b.Skip(err)
	}
	model := writeTinyQwen3(b, b.TempDir(), "tiny.gguf", defaultTinyConfig())
	for b.Loop() {
		o, err := New()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := o.Load(model); err != nil {
			b.Fatal(err)
		}
		if err := o.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLogits measures one logits request round trip on the tiny model (prompt of 6 tokens).
func BenchmarkLogits(b *testing.B) {
	if err := Available(); err != nil {
		b.Skip(err)
	}
	o, err := New()
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	model := writeTinyQwen3(b, b.TempDir(), "tiny.gguf", defaultTinyConfig())
	if _, err := o.Load(model); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := o.Logits(model, tinyPrompt); err != nil {
			b.Fatal(err)
		}
	}
}

// checkDecode checks logits and greedy decoding of model on tinyPrompt: full vocabulary, finite, not flat,
// deterministic, independent of the thread count, per-position logits consistent with prefix evaluation,
// and greedy decoding equal to the teacher-forced argmax at every step. It returns the logits after
// tinyPrompt.
func checkDecode(t *testing.T, o *Oracle, model string, vocab int) []float32 {
	t.Helper()
	// Logits: full vocabulary, finite, deterministic, consistent with the per-position pass.
	l1, err := o.Logits(model, tinyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	if len(l1) != vocab {
		t.Fatalf("%d logits, want %d", len(l1), vocab)
	}
	for i, x := range l1 {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("logit %d = %v", i, x)
		}
	}
	if spread := l1[argmax(l1)] - slices.Min(l1); spread < 1 {
		t.Fatalf("logits nearly flat (spread %v): the model is not being evaluated", spread)
	}
	l2, err := o.Logits(model, tinyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	if !bitsEqual(l1, l2) {
		t.Fatalf("logits not deterministic: max |diff| %g", maxAbsDiff(l1, l2))
	}
	rows, err := o.LogitsAll(model, tinyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(rows[len(rows)-1], l1); d > 1e-4 {
		t.Fatalf("last row of LogitsAll differs from Logits by %g", d)
	}
	prefix, err := o.Logits(model, tinyPrompt[:2])
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(rows[1], prefix); d > 1e-4 {
		t.Fatalf("LogitsAll row 1 differs from Logits(prompt[:2]) by %g", d)
	}
	if d := maxAbsDiff(rows[0], rows[1]); d < 1e-3 {
		t.Fatalf("positions 0 and 1 have the same logits (|diff| %g)", d)
	}
	saved := o.Context
	o.Context.Threads = 2
	l2t, err := o.Logits(model, tinyPrompt)
	o.Context = saved
	if err != nil {
		t.Fatal(err)
	}
	if !bitsEqual(l1, l2t) {
		t.Fatalf("logits depend on the thread count: max |diff| %g", maxAbsDiff(l1, l2t))
	}

	// Greedy: deterministic, first token is the argmax, and teacher forcing reproduces every step.
	const n = 12
	g1, err := o.Greedy(model, tinyPrompt, n)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := o.Greedy(model, tinyPrompt, n)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g1, g2) {
		t.Fatalf("greedy not deterministic: %v vs %v", g1, g2)
	}
	if g1[0] != argmax(l1) {
		t.Fatalf("greedy[0] = %d, argmax of logits = %d", g1[0], argmax(l1))
	}
	forced := append(slices.Clone(tinyPrompt), g1[:n-1]...)
	frows, err := o.LogitsAll(model, forced)
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < n; k++ {
		if a := argmax(frows[len(tinyPrompt)-1+k]); a != g1[k] {
			t.Fatalf("step %d: greedy %d, teacher-forced argmax %d (greedy %v)", k, g1[k], a, g1)
		}
	}
	t.Logf("greedy %v", g1)

	return l1
}
