package tokenizer_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/testkit/reference"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"golang.org/x/text/unicode/norm"
)

// pair is one tiny model's tokenizer twice: the production one from the GGUF phonellm converted, and the
// independent reference (internal/testkit/reference) from the tokenizer.json it was converted from.
type pair struct {
	name string
	tk   *tokenizer.Tokenizer
	ref  *reference.Tokenizer
}

var pairs struct {
	once sync.Once
	list []pair
	err  error
}

// tinyPairs builds the pairs of a Qwen3 and a Qwen3.5 tiny model (vocabularies trained on the built-in
// corpus, 1,200 tokens), once per test binary.
func tinyPairs(t testing.TB) []pair {
	t.Helper()
	pairs.once.Do(func() {
		dir := tempDir
		for _, arch := range []string{tinymodel.Qwen3, tinymodel.Qwen35} {
			spec, _ := tinymodel.Preset(arch)
			spec.TokenizerSize, spec.VocabSize = 1200, 1280
			ckpt := filepath.Join(dir, arch)
			if pairs.err = tinymodel.Generate(ckpt, spec); pairs.err != nil {
				return
			}
			out := filepath.Join(dir, arch+".gguf")
			if _, pairs.err = convert.Run(context.Background(), convert.Options{Model: ckpt, Out: out, OutType: convert.OutF32}, pipeline.Discard); pairs.err != nil {
				return
			}
			p := pair{name: arch}
			if p.ref, pairs.err = reference.LoadTokenizer(filepath.Join(ckpt, "tokenizer.json")); pairs.err != nil {
				return
			}
			f, err := gguf.OpenFile(out)
			if err != nil {
				pairs.err = err
				return
			}
			p.tk, pairs.err = tokenizer.FromGGUF(f)
			f.Close()
			if pairs.err != nil {
				return
			}
			pairs.list = append(pairs.list, p)
		}
	})
	if pairs.err != nil {
		t.Fatal(pairs.err)
	}
	return pairs.list
}

var pieces = []string{
	"a", "Z", "é", "e\u0301", "0", "42", "!", "-", "==", "'s", "'LL", "'ſ", " ", "  ", "\t", "\n", "\r\n",
	"\u00a0", "\u3000", "中文", "日本", "😀", "👍🏽", "\u0301", "\u0316", "ก", "ि", "the", " the", "review",
	" fraud", "transaction", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
	"<|fim_pad|>", "<|im_", "|>", "<", "Hello", " world", ".", ",", "?", "(", ")", "{", "}", "\"", "$",
	"\x00", "\x1f",
}

func randomText(rng *rand.Rand) string {
	var b strings.Builder
	for range 1 + rng.IntN(30) {
		p := pieces[rng.IntN(len(pieces))]
		if rng.IntN(8) == 0 {
			p = strings.Repeat(p, 2+rng.IntN(40))
		}
		b.WriteString(p)
	}
	return b.String()
}

// TestMatchesReference compares Encode and Decode with the independent reference tokenizer on the trained
// vocabularies of tiny Qwen3 and Qwen3.5 models, over random text of every class the pre-tokenizers
// distinguish, with special tokens and long runs.
func TestMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, p := range tinyPairs(t) {
		for range 2000 {
			s := randomText(rng)
			checkAgainstReference(t, p, s)
		}
	}
}

// checkAgainstReference compares one text. The reference normalizes with Go's norm, which inserts U+034F
// into runs of more than 30 combining marks where Hugging Face does not (TestRealVocabulary checks this
// package against Hugging Face on such text); those texts are skipped.
func checkAgainstReference(t *testing.T, p pair, s string) {
	t.Helper()
	if strings.Contains(norm.NFC.String(s), "\u034f") {
		return
	}
	got, err := p.tk.Encode(context.Background(), s, tokenizer.Options{ParseSpecial: true})
	if err != nil {
		t.Fatalf("%s: Encode(%q): %v", p.name, s, err)
	}
	want := p.ref.Encode(s, true)
	if !slices.Equal(toInt(got), want) {
		t.Fatalf("%s: Encode(%q) = %v, reference %v", p.name, s, got, want)
	}
	dec, err := p.tk.Decode(got)
	if err != nil || dec != p.ref.Decode(want) {
		t.Fatalf("%s: Decode(Encode(%q)) = %q, %v; reference %q", p.name, s, dec, err, p.ref.Decode(want))
	}
}

// FuzzEncode: on any text Encode never panics and stays within its bounds; on valid UTF-8 it round-trips
// (Decode gives the NFC of the text, control tokens included as text) and equals the reference tokenizer.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"Hello world", "<|im_start|>user\nx<|im_end|>\n", strings.Repeat("a", 100), "e\u0301 'ſ \xff", "  \n\n\t", "中文😀",
		strings.Repeat("\u1100\u1161\u11a8", 50)} { // jamo: NFC makes each three characters one syllable
		f.Add(s)
	}
	ps := tinyPairs(f)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			s = s[:4096]
		}
		for _, p := range ps {
			ids, err := p.tk.Encode(context.Background(), s, tokenizer.Options{ParseSpecial: true, MaxInputBytes: 4096, MaxTokens: 4096})
			if err != nil {
				t.Fatalf("%s: Encode(%q): %v", p.name, s, err)
			}
			dec, err := p.tk.Decode(ids)
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) > len(dec) { // every token stands for at least one byte (NFC may lengthen the text)
				t.Fatalf("%s: %d tokens for %d bytes", p.name, len(ids), len(dec))
			}
			if len(ids)*p.tk.MaxBytesPerToken() < len(s) {
				t.Fatalf("%s: %d tokens for %d bytes, more than MaxBytesPerToken %d each", p.name, len(ids), len(s), p.tk.MaxBytesPerToken())
			}
			// Text round-trips to its NFC form (Go's norm stands in for it unless it inserted U+034F into a
			// run of over 30 combining marks; bytes that are not UTF-8 pass through it unchanged).
			if want := norm.NFC.String(s); !strings.Contains(want, "\u034f") && dec != want {
				t.Fatalf("%s: Decode(Encode(%q)) = %q, want its NFC %q", p.name, s, dec, want)
			}
			if utf8.ValidString(s) { // the reference, like a Rust &str, takes only UTF-8
				checkAgainstReference(t, p, s)
			}
		}
	})
}
