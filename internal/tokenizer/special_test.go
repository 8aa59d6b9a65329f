package tokenizer

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// naiveSplit is leftmost-longest by definition: at each position, the longest special token starting there;
// the first position that has one wins. Quadratic.
func naiveSplit(tk *Tokenizer, want func(Type) bool, text string) []span {
	var out []span
	pos, gap := 0, 0
	for pos < len(text) {
		best := int32(-1)
		for id, s := range tk.tokens {
			if want(tk.types[id]) && strings.HasPrefix(text[pos:], s) && (best < 0 || len(s) > len(tk.tokens[best])) {
				best = int32(id)
			}
		}
		if best < 0 {
			pos++
			continue
		}
		if pos > gap {
			out = append(out, span{gap, pos, -1})
		}
		out = append(out, span{pos, pos + len(tk.tokens[best]), best})
		pos += len(tk.tokens[best])
		gap = pos
	}
	if gap < len(text) {
		out = append(out, span{gap, len(text), -1})
	}
	return out
}

func collect(t testing.TB, m *matcher, text string) []span {
	var out []span
	if err := m.split(context.Background(), text, func(s span) error { out = append(out, s); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMatcherMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	letters := "ab<|>"
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
		return b.String()
	}
	for v := range 200 {
		// Overlapping and nested special tokens over a tiny alphabet: suffixes of one are prefixes of others.
		var specials []string
		var types []Type
		for len(specials) < 1+rng.IntN(12) {
			s := word(1 + rng.IntN(6))
			if !slices.Contains(specials, s) && len(s) > 1 {
				specials = append(specials, s)
				types = append(types, []Type{Control, UserDefined, Unknown}[rng.IntN(3)])
			}
		}
		tk := mustNew(t, synthVocab(nil, specials, types))
		for range 50 {
			text := word(rng.IntN(40))
			for _, c := range []struct {
				m    *matcher
				want func(Type) bool
			}{{tk.all, Type.special}, {tk.userOnly, func(t Type) bool { return t == UserDefined }}} {
				got, want := collect(t, c.m, text), naiveSplit(tk, c.want, text)
				if !slices.Equal(got, want) {
					t.Fatalf("vocab %d %q: split(%q) = %v, definition %v", v, specials, text, got, want)
				}
			}
		}
	}
}

// TestManySpecials splits a text of 120,000 special tokens (issue 14: 2,000 chat turns took 60 s of CPU,
// quadratic in the special tokens; BenchmarkSpecialHeavy times it).
func TestManySpecials(t *testing.T) {
	specials := []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>"}
	types := []Type{Control, Control, Control, UserDefined, UserDefined}
	tk := mustNew(t, synthVocab(nil, specials, types))
	text := strings.Repeat("<|im_start|>user\nx<|im_end|>\n", 60000)
	spans := collect(t, tk.all, text)
	if len(spans) != 4*60000 {
		t.Fatalf("%d spans, want %d", len(spans), 4*60000)
	}
	ids, err := tk.Encode(context.Background(), text, Options{ParseSpecial: true})
	// No merges: "user" is 4 tokens, then "\n", "x", <|im_end|>, "\n".
	if err != nil || len(ids) != 9*60000 {
		t.Fatalf("%d ids, %v; want %d", len(ids), err, 9*60000)
	}
}

func TestMatcherCancel(t *testing.T) {
	tk := mustNew(t, synthVocab(nil, []string{"<s>"}, []Type{Control}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := tk.all.split(ctx, strings.Repeat("<s>x", 100000), func(span) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("split with a cancelled context: %v", err)
	}
}

// FuzzSpecialSplit checks the automaton against the definition on arbitrary special tokens and text.
func FuzzSpecialSplit(f *testing.F) {
	f.Add("<|a|>\x00<|a\x00a|>", "x<|a|>y<|a|<|a|>")
	f.Add("ab\x00ba\x00b", "ababab")
	f.Fuzz(func(t *testing.T, tokens, text string) {
		if len(tokens) > 200 || len(text) > 200 {
			return
		}
		var specials []string
		var types []Type
		for i, s := range strings.Split(tokens, "\x00") {
			if s != "" && len(s) <= 16 && !slices.Contains(specials, s) && utf8Valid(s) {
				specials = append(specials, s)
				types = append(types, []Type{Control, UserDefined}[i%2])
			}
		}
		v := synthVocab(nil, nil, nil)
		for i, s := range specials {
			if !slices.Contains(v.Tokens, s) {
				v.Tokens = append(v.Tokens, s)
				v.Types = append(v.Types, types[i])
			}
		}
		tk, err := New(v)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := collect(t, tk.all, text), naiveSplit(tk, Type.special, text); !slices.Equal(got, want) {
			t.Fatalf("specials %q: split(%q) = %v, definition %v", specials, text, got, want)
		}
	})
}
