package goengine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/realvocab"
	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/runtime/engine"
)

// TestTokenizeRealVocabulary is issue 13 item 1 end to end: the engine, loaded on a tiny model carrying
// Qwen3's real vocabulary (converted by phonellm), tokenizes like Hugging Face tokenizers — the repeated
// runs that Ollama's tokenizer got wrong included — and detokenizes back to Hugging Face's text.
func TestTokenizeRealVocabulary(t *testing.T) {
	if testing.Short() {
		t.Skip("converts and loads a 151,936-token model")
	}
	texts := realvocab.Texts()
	hf := realvocab.HF(t, realvocab.TokenizerJSON(t), texts)
	e, err := Load(t.Context(), Options{Path: realvocab.GGUF(t), Threads: 1, ContextLength: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if info := e.Info(); info.VocabSize != 151936 {
		t.Fatalf("vocabulary of %d tokens", info.VocabSize)
	}
	bad := 0
	for i, s := range texts {
		got, err := e.Tokenize(t.Context(), s, true)
		if err != nil {
			t.Fatalf("Tokenize(%q): %v", s, err)
		}
		if !slices.Equal(got, hf[i].IDs) {
			if bad++; bad <= 10 {
				t.Errorf("Tokenize(%q) = %v, Hugging Face gives %v", s, got, hf[i].IDs)
			}
			continue
		}
		if back, err := e.Detokenize(got); err != nil || back != hf[i].Text {
			t.Errorf("Detokenize(%v) = %q, %v; Hugging Face decodes %q", got, back, err, hf[i].Text)
		}
	}
	for _, r := range realvocab.Regressions {
		if got, _ := e.Tokenize(t.Context(), r.Text, true); !slices.Equal(got, r.IDs) {
			t.Errorf("Tokenize(%q) = %v, want %v", r.Text, got, r.IDs)
		}
	}
	// Pieces of generated tokens: control tokens show nothing; <think> (user-defined) shows its text.
	if e.piece(realvocab.ImEnd) != "" || e.piece(realvocab.FimPad) != "" || e.piece(realvocab.Think) != "<think>" {
		t.Errorf("pieces: im_end %q, fim_pad %q, think %q", e.piece(realvocab.ImEnd), e.piece(realvocab.FimPad), e.piece(realvocab.Think))
	}
	if !e.eog[realvocab.ImEnd] || !e.eog[realvocab.EndOfText] || e.eog[realvocab.ImStart] {
		t.Error("end-of-generation tokens")
	}
}

// TestTokenizeBounded: the engine refuses text far beyond its context while tokenizing it — before the
// merges of a 15 MiB word, after four contexts' worth of chat turns or words — tokenizes text somewhat
// beyond it in full (so the API can report its length), and stops with the request's context.
func TestTokenizeBounded(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 61}, Options{ContextLength: 256})
	for _, text := range []string{
		strings.Repeat("a", 15<<20),                             // one word
		strings.Repeat("<|im_start|>user\nx<|im_end|>\n", 2000), // issue 14's 62 KB of chat turns
		strings.Repeat("x", 4*256+1),                            // "x" has no merges in the tiny vocabulary: one token each
	} {
		_, err := e.Tokenize(t.Context(), text, true)
		var le *tokenizer.LimitError
		if !errors.As(err, &le) || !pipeline.IsInputError(err) {
			t.Errorf("Tokenize(%.20q… of %d bytes): %v; want a LimitError", text, len(text), err)
		}
	}
	if ids, err := e.Tokenize(t.Context(), strings.Repeat("x", 4*256), true); err != nil || len(ids) != 4*256 {
		t.Errorf("four contexts of tokens: %d tokens, %v", len(ids), err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.Tokenize(ctx, "hello", true); !errors.Is(err, context.Canceled) {
		t.Errorf("Tokenize with a cancelled context: %v", err)
	}
	if _, err := e.Generate(ctx, engine.Request{Prompt: "hello"}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Generate with a cancelled context: %v", err)
	}
}

// TestLoadRefusesHostileVocabulary: a GGUF from a stranger whose vocabulary is malformed is refused at
// load, before any weights, with an input error naming the key (issue 14: an all-empty vocabulary took
// 2.5 GB on the first request).
func TestLoadRefusesHostileVocabulary(t *testing.T) {
	for name, c := range map[string]struct {
		key  string
		edit func(tokens []string, types []int32, merges []string) ([]string, []int32, []string)
	}{
		"all empty": {tokenizer.KeyTokens, func(tokens []string, types []int32, merges []string) ([]string, []int32, []string) {
			return make([]string, len(tokens)), types, merges
		}},
		"duplicate": {tokenizer.KeyTokens, func(tokens []string, types []int32, merges []string) ([]string, []int32, []string) {
			tokens[len(tokens)-1] = tokens[5]
			return tokens, types, merges
		}},
		"unknown merge": {tokenizer.KeyMerges, func(tokens []string, types []int32, merges []string) ([]string, []int32, []string) {
			return tokens, types, append(merges, "zz yy")
		}},
		"type count": {tokenizer.KeyTypes, func(tokens []string, types []int32, merges []string) ([]string, []int32, []string) {
			return tokens, types[:10], merges
		}},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeTinyGGUF(t, t.TempDir(), tinySpec{arch: "qwen3", seed: 71, vocab: c.edit})
			e, err := Load(t.Context(), Options{Path: path, Threads: 1})
			if err == nil {
				e.Close()
				t.Fatal("loaded")
			}
			// The tokenizer refuses the vocabulary's content; the shape checks before it (package modelcheck)
			// refuse arrays that do not match the token list. Either names the key.
			var te *tokenizer.Error
			var me *modelcheck.Error
			named := (errors.As(err, &te) && te.Key == c.key) || (errors.As(err, &me) && slices.Contains(me.Keys(), c.key))
			if !named || !pipeline.IsInputError(err) || strings.Count(err.Error(), "\n") > 0 {
				t.Fatalf("Load: %v; want one line, an input error on %s", err, c.key)
			}
		})
	}
}
