package reference

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/tinymodel"
)

// TestTinyModelPresets loads every generated preset (weights, config.json, tokenizer.json) and runs the forward
// pass on a tokenized prompt: every logit finite, the prompt's next-token distribution not degenerate, 16 greedy
// tokens produced, and the tokenizer round-tripping the acceptance strings.
func TestTinyModelPresets(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: full forward passes of hidden-256 models")
	}
	for _, spec := range tinymodel.Presets() {
		t.Run(spec.Name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tinymodel.Generate(dir, spec); err != nil {
				t.Fatal(err)
			}
			tk, err := LoadTokenizer(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := oracle.FindModule("PHONELLM_TOKENIZERS_JS", tokenizersJSRel); ok { // optional here
				mod := filepath.Join(d, "node_modules", filepath.FromSlash(tokenizersJSRel))
				compareWithTokenizersJS(t, mod, filepath.Join(dir, "tokenizer.json"), tk)
			}
			t.Logf("%s: tokenizer pre-type %s", spec.Name, tk.PreType())
			for _, s := range multilingual {
				if got := tk.Decode(tk.Encode(s, true)); got != nfc(s) {
					t.Fatalf("tokenizer round trip of %q gives %q", s, got)
				}
			}
			prompt := tk.Encode("<|im_start|>user\nHello, 안녕 😀 123<|im_end|>\n<|im_start|>assistant\n", true)
			for _, id := range prompt {
				if id >= m.Config.Vocab {
					t.Fatalf("token %d outside vocab_size %d", id, m.Config.Vocab)
				}
			}
			logits := m.Forward(prompt)
			last := logits[len(logits)-1]
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, row := range logits {
				for _, v := range row {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("non-finite logit")
					}
				}
			}
			for _, v := range last {
				lo, hi = min(lo, float64(v)), max(hi, float64(v))
			}
			if hi-lo < 1 {
				t.Fatalf("last-position logits span only %g", hi-lo)
			}
			gen := m.Greedy(prompt, 16)
			t.Logf("%s: %d prompt tokens, logits [%.3f, %.3f], greedy %v", spec.Name, len(prompt), lo, hi, gen)
		})
	}
}
