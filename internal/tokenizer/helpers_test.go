package tokenizer

import (
	"context"
	"math"
	"testing"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

// bl spells raw bytes in byte-level characters.
func bl(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = bytelevel.Rune[s[i]]
	}
	return string(r)
}

// synthVocab is a vocabulary of the 256 byte symbols, the results of merges (pairs of raw strings, in
// rank order) and the given special tokens.
func synthVocab(merges [][2]string, specials []string, types []Type) Vocab {
	v := Vocab{Model: "gpt2", Pre: "qwen2", BOS: -1, EOS: -1}
	have := map[string]bool{}
	add := func(s string, typ Type) {
		if !have[s] {
			have[s] = true
			v.Tokens = append(v.Tokens, s)
			v.Types = append(v.Types, typ)
		}
	}
	for _, b := range bytelevel.Order {
		add(string(bytelevel.Rune[b]), Normal)
	}
	for _, m := range merges {
		add(bl(m[0]+m[1]), Normal)
		v.Merges = append(v.Merges, bl(m[0])+" "+bl(m[1]))
	}
	for i, s := range specials {
		add(s, types[i])
	}
	return v
}

func mustNew(t testing.TB, v Vocab) *Tokenizer {
	t.Helper()
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// naiveBPE is the definition: merge the least (rank, position) pair until none has a merge. Quadratic.
func naiveBPE(t *Tokenizer, w string) []int32 {
	var syms []int32
	for i := 0; i < len(w); i++ {
		syms = append(syms, t.byteID[w[i]])
	}
	for {
		best, bestRank, bestID := -1, int32(math.MaxInt32), int32(0)
		for k := 0; k+1 < len(syms); k++ {
			if r, m, ok := t.merges.get(syms[k], syms[k+1]); ok && r < bestRank {
				best, bestRank, bestID = k, r, m
			}
		}
		if best < 0 {
			return syms
		}
		syms[best] = bestID
		syms = append(syms[:best+1], syms[best+2:]...)
	}
}

func largeBPE(t *Tokenizer, w string) []int32 {
	out, err := t.bpeLarge(context.Background(), w, &scratch{}, nil)
	if err != nil {
		panic(err)
	}
	return out
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }
