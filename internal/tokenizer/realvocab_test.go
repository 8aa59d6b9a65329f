package tokenizer_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	ollama "github.com/ollama/ollama/tokenizer"
	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/testkit/realvocab"
	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"golang.org/x/text/unicode/norm"
)

var real struct {
	once sync.Once
	path string
	err  error
}

// realGGUF is realvocab.GGUF shared by the tests of this binary.
func realGGUF(t testing.TB) string {
	t.Helper()
	models := realvocab.ModelsDir(t)
	real.once.Do(func() { real.path, real.err = realvocab.BuildGGUF(context.Background(), models, tempDir) })
	if real.err != nil {
		t.Fatal(real.err)
	}
	return real.path
}

// loadGGUF builds the tokenizer of a GGUF file.
func loadGGUF(t testing.TB, path string) *tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func encode(t testing.TB, tk *tokenizer.Tokenizer, s string) []int32 {
	t.Helper()
	ids, err := tk.Encode(context.Background(), s, tokenizer.Options{ParseSpecial: true})
	if err != nil {
		t.Fatalf("Encode(%q): %v", s, err)
	}
	return ids
}

// TestRealVocabulary is the acceptance test of issue 13 item 1: on Qwen3's real vocabulary (its
// tokenizer.json converted to GGUF by phonellm), Encode gives Hugging Face tokenizers' ids for every string
// of realvocab.Texts — runs of 1–64 repeated characters, whitespace, code, inline special tokens, many
// scripts, text not in NFC — and llama.cpp's ids for every one in NFC; Decode gives back Hugging Face's
// decoded text.
func TestRealVocabulary(t *testing.T) {
	texts := realvocab.Texts()
	if len(texts) < 100 {
		t.Fatalf("only %d texts", len(texts))
	}
	hf := realvocab.HF(t, realvocab.TokenizerJSON(t), texts)
	path := realGGUF(t)
	tk := loadGGUF(t, path)
	if tk.Pre() != "qwen2" || tk.Len() != 151936 {
		t.Fatalf("pre %q, %d tokens; want qwen2, 151936", tk.Pre(), tk.Len())
	}
	t.Run("HF", func(t *testing.T) {
		bad := 0
		for i, s := range texts {
			got := encode(t, tk, s)
			if !slices.Equal(got, hf[i].IDs) {
				if bad++; bad <= 20 {
					t.Errorf("Encode(%q) = %v, Hugging Face gives %v", s, got, hf[i].IDs)
				}
				continue
			}
			dec, err := tk.Decode(got)
			if err != nil || dec != hf[i].Text {
				t.Errorf("Decode(Encode(%q)) = %q, %v; Hugging Face decodes %q", s, dec, err, hf[i].Text)
			}
		}
		if bad > 0 {
			t.Errorf("%d of %d texts differ from Hugging Face", bad, len(texts))
		}
	})
	t.Run("llama.cpp", func(t *testing.T) {
		o := oracle.Shared(t)
		bad, n := 0, 0
		for _, s := range texts {
			if !realvocab.ForLlamaCpp(s) {
				if realvocab.IsNFC(s) {
					// The texts left out are those llama.cpp tokenizes unlike Hugging Face (and this package).
					if want, err := o.Tokenize(path, s, true); err == nil && slices.Equal(toInt(encode(t, tk, s)), want) {
						t.Errorf("llama.cpp now agrees on %q (%v): compare it again", s, want)
					}
				}
				continue
			}
			n++
			want, err := o.Tokenize(path, s, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := encode(t, tk, s); !slices.Equal(toInt(got), want) {
				if bad++; bad <= 20 {
					t.Errorf("Encode(%q) = %v, llama.cpp gives %v", s, got, want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%d of %d texts differ from llama.cpp", bad, n)
		}
		if n < 100 {
			t.Errorf("only %d texts compared with llama.cpp", n)
		}
	})
	t.Run("regressions", func(t *testing.T) {
		for _, r := range realvocab.Regressions {
			if got := encode(t, tk, r.Text); !slices.Equal(got, r.IDs) {
				t.Errorf("Encode(%q) = %v, want %v", r.Text, got, r.IDs)
			}
		}
	})
	t.Run("NFC", func(t *testing.T) {
		// Text that is not in NFC tokenizes as its NFC form (Qwen's normalizer). Go's norm inserts U+034F
		// into runs of more than 30 combining marks, Hugging Face does not: those are covered by the HF test.
		for _, s := range texts {
			if !realvocab.IsNFC(s) && !strings.Contains(norm.NFC.String(s), "\u034f") {
				if a, b := encode(t, tk, s), encode(t, tk, norm.NFC.String(s)); !slices.Equal(a, b) {
					t.Errorf("Encode(%q) = %v, but its NFC form gives %v", s, a, b)
				}
			}
		}
	})
}

func toInt(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// ollamaTokenizer is the tokenizer the engine used before this package, on the same GGUF.
func ollamaTokenizer(t testing.TB, path string) ollama.BytePairEncoding {
	t.Helper()
	f, err := gguf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	strs := func(key string) []string {
		v, _ := f.KV(key)
		return v.V.(gguf.Array).Values.([]string)
	}
	tv, _ := f.KV(tokenizer.KeyTypes)
	return ollama.NewBytePairEncoding(&ollama.Vocabulary{
		Values: strs(tokenizer.KeyTokens), Types: tv.V.(gguf.Array).Values.([]int32), Merges: strs(tokenizer.KeyMerges),
	}, tokenizer.RegexQwen2)
}

// TestOllamaTokenizerDefect documents issue 13's defect on the same file: the engine's former tokenizer
// gives 6, 3 and 4 tokens where the regression cases above (and Hugging Face, and llama.cpp) give 2.
func TestOllamaTokenizerDefect(t *testing.T) {
	old := ollamaTokenizer(t, realGGUF(t))
	for i, want := range []int{6, 3, 4} {
		r := realvocab.Regressions[i]
		got, err := old.Encode(r.Text, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want || slices.Equal(got, r.IDs) {
			t.Errorf("Ollama's tokenizer on %q: %v; issue 13 reports %d tokens", r.Text, got, want)
		}
	}
}

// TestQwenSpecialsDoNotOverlap: on Qwen3's vocabulary leftmost-longest matching of special tokens (Hugging
// Face's, this package's) and llama.cpp's longest-token-first splitting cannot differ, because no special
// token contains another and no proper suffix of one is a proper prefix of another.
func TestQwenSpecialsDoNotOverlap(t *testing.T) {
	tk := loadGGUF(t, realGGUF(t))
	var specials []string
	for id := range int32(tk.Len()) {
		if typ := tk.Type(id); typ == tokenizer.Control || typ == tokenizer.UserDefined || typ == tokenizer.Unknown {
			specials = append(specials, tk.Token(id))
		}
	}
	if len(specials) != 26 {
		t.Fatalf("%d special tokens, want Qwen3's 26: %q", len(specials), specials)
	}
	for _, a := range specials {
		for _, b := range specials {
			if a == b {
				continue
			}
			if strings.Contains(a, b) {
				t.Errorf("%q contains %q", a, b)
			}
			for k := 1; k < min(len(a), len(b)); k++ {
				if strings.HasSuffix(a, b[:k]) {
					t.Errorf("%q ends with %q, the start of %q", a, b[:k], b)
				}
			}
		}
	}
}
