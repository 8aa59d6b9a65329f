// The acceptance checks of issue 2 against the independent reference (internal/testkit/reference): logits and greedy
// continuations of our F32 GGUFs in upstream llama.cpp versus a plain-Go forward pass of the HF checkpoint, and
// llama.cpp's tokenization of our tokenizer KVs versus tokenizer.json semantics.
//
// TestOracleMatchesReference runs the oracle with an F32 KV cache: with llama.cpp's default F16 cache the
// attention-heavy presets differ by up to ~1e-2, which is the cache's rounding, not the conversion's.

package convert

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/testkit/reference"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
)

// TestOracleMatchesReference is the acceptance check for the converter: every preset's F32 GGUF,
// run by upstream llama.cpp, gives next-token logits within 1e-3 (max abs) of the plain-Go reference forward
// pass of the HF checkpoint, and the same 16-token greedy continuation.
func TestOracleMatchesReference(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: runs llama.cpp")
	}
	o := oracle.Shared(t)
	saved := o.Context
	o.Context.KVCacheType = "F32"
	defer func() { o.Context = saved }()
	prompt := []int{17, 250, 3, 99, 512, 42, 7}
	for _, spec := range tinymodel.Presets() {
		t.Run(spec.Name, func(t *testing.T) {
			dir := generate(t, spec)
			ref, err := reference.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "f32.gguf")
			if _, err := Run(t.Context(), Options{Model: dir, Out: out, OutType: OutF32}, pipeline.Discard); err != nil {
				t.Fatal(err)
			}
			got, err := o.Logits(out, prompt)
			if err != nil {
				t.Fatal(err)
			}
			all := ref.Forward(prompt)
			want := all[len(all)-1]
			if len(got) != len(want) {
				t.Fatalf("%d logits, want %d", len(got), len(want))
			}
			var maxDiff float64
			for i := range want {
				maxDiff = max(maxDiff, math.Abs(float64(got[i]-want[i])))
			}
			t.Logf("max |llama.cpp - reference| = %.3g", maxDiff)
			if maxDiff > 1e-3 {
				t.Errorf("max |logit diff| %g > 1e-3", maxDiff)
			}
			g, err := o.Greedy(out, prompt, 16)
			if err != nil {
				t.Fatal(err)
			}
			if w := ref.Greedy(prompt, 16); !equalInts(g, w) {
				t.Errorf("greedy: llama.cpp %v, reference %v", g, w)
			}
			o.Unload(out)
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOracleTokenization checks that llama.cpp, reading the tokenizer KVs of our GGUF, tokenizes a fixed
// multilingual set exactly as the tokenizer.json semantics (the reference Go tokenizer) do, with and without
// special-token parsing.
func TestOracleTokenization(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: runs llama.cpp")
	}
	o := oracle.Shared(t)
	texts := []string{
		"Hello, world! The quick brown fox jumps over the lazy dog.",
		"I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea?",
		"안녕하세요, 세계! 사기 위험 평가를 해 주세요.",
		"Emoji: 🚀🦙😶‍🌫️ ✅ and digits 3 33 333 3333 3.14159 1,000,000",
		"  leading spaces\n\n\ttabs\t\t and   runs   \r\n of whitespace   ",
		"<|im_start|>user\nRISK_LEVEL: 5<|im_end|>\n<|im_start|>assistant\n",
		"中文 Ελληνικά русский عربى हिन्दी ñandú café naïve",
	}
	for _, name := range []string{"qwen3", "qwen35"} {
		spec, _ := tinymodel.Preset(name)
		dir := generate(t, spec)
		tok, err := reference.LoadTokenizer(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "m.gguf")
		if _, err := Run(t.Context(), Options{Model: dir, Out: out, OutType: OutF16}, pipeline.Discard); err != nil {
			t.Fatal(err)
		}
		for _, special := range []bool{false, true} {
			for _, text := range texts {
				got, err := o.Tokenize(out, text, special)
				if err != nil {
					t.Fatal(err)
				}
				if want := tok.Encode(text, special); !equalInts(got, want) {
					t.Errorf("%s special=%v %q:\n llama.cpp %v\n reference %v", name, special, text, got, want)
				}
			}
		}
		o.Unload(out)
	}
}
