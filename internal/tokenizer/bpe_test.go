package tokenizer

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	ollama "github.com/ollama/ollama/tokenizer"
)

// randomMerges makes a merge list over a few letters where a merged token's pairs often rank below the merge
// that made it (as no trained vocabulary has, but a file from a stranger may): the order of merges is
// arbitrary, which stresses the tie-breaks and the queue's stale entries.
func randomMerges(rng *rand.Rand, letters string, n int) [][2]string {
	toks := strings.Split(letters, "")
	seen := map[[2]string]bool{}
	var merges [][2]string
	for len(merges) < n {
		a, b := toks[rng.IntN(len(toks))], toks[rng.IntN(len(toks))]
		if seen[[2]string{a, b}] || len(a)+len(b) > 12 {
			continue
		}
		seen[[2]string{a, b}] = true
		merges = append(merges, [2]string{a, b})
		if !slices.Contains(toks, a+b) {
			toks = append(toks, a+b)
		}
	}
	rng.Shuffle(len(merges), func(i, j int) { merges[i], merges[j] = merges[j], merges[i] })
	return merges
}

// TestBPEPathsMatchDefinition checks both merge paths against the quadratic definition on random
// vocabularies and words of 1 to 300 bytes (the queue path is used above smallWord bytes).
func TestBPEPathsMatchDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for v := range 40 {
		letters := "abc"
		if v%2 == 1 {
			letters = "ab c-"
		}
		tk := mustNew(t, synthVocab(randomMerges(rng, letters, 5+rng.IntN(60)), nil, nil))
		for range 60 {
			n := 1 + rng.IntN(300)
			var b strings.Builder
			for range n {
				b.WriteByte(letters[rng.IntN(len(letters))])
			}
			w := b.String()
			want := naiveBPE(tk, w)
			if got := largeBPE(tk, w); !slices.Equal(got, want) {
				t.Fatalf("vocab %d: large path on %q = %v, definition %v", v, w, got, want)
			}
			if n <= smallWord {
				if got := tk.bpeSmall(w, &scratch{}, nil); !slices.Equal(got, want) {
					t.Fatalf("vocab %d: small path on %q = %v, definition %v", v, w, got, want)
				}
			}
		}
	}
}

// TestBPELongRunCompaction merges a long run whose queue fills with stale entries (every merge of a run of
// one letter invalidates its neighbours), so the queue is compacted several times.
func TestBPELongRunCompaction(t *testing.T) {
	var merges [][2]string
	for s := "a"; len(s) < 64; s += s {
		merges = append(merges, [2]string{s, s})
	}
	merges = append(merges, [2]string{"a", "aa"}, [2]string{"aa", "a"}, [2]string{"aaaa", "a"})
	tk := mustNew(t, synthVocab(merges, nil, nil))
	for _, n := range []int{49, 100, 1000, 4097, 100003} {
		w := strings.Repeat("a", n)
		if got, want := largeBPE(tk, w), naiveBPE(tk, w[:min(n, 4097)]); n <= 4097 && !slices.Equal(got, want) {
			t.Fatalf("run of %d: %v, definition %v", n, got, want)
		}
		got := largeBPE(tk, w)
		dec, _ := tk.Decode(got)
		if dec != w {
			t.Fatalf("run of %d decodes to %d bytes", n, len(dec))
		}
	}
}

// TestTieBreakRegression is issue 13's defect on a vocabulary small enough to reason about: with merges
// a+a (rank 0) and aa+a (rank 1), "aaa" must merge its leftmost pair first, [aa][a] → [aaa]. Ollama's
// tokenizer, which the engine used, orders equal ranks without the position and gives two tokens for
// some runs; the leftmost tie-break gives the definition's result for every run.
func TestTieBreakRegression(t *testing.T) {
	merges := [][2]string{{"a", "a"}, {"aa", "a"}, {"aaa", "aaa"}, {"aa", "aa"}}
	v := synthVocab(merges, nil, nil)
	tk := mustNew(t, v)
	ids := func(s ...string) []int32 {
		var out []int32
		for _, x := range s {
			out = append(out, tk.tokenID(bl(x)))
		}
		return out
	}
	cases := []struct {
		in   string
		want []int32
	}{
		{"aaa", ids("aaa")},
		{"aaaa", ids("aaaa")},
		{"aaaaa", ids("aa", "aaa")},   // [aa][aa][a] → the pair at 2 (rank 1) → [aa][aaa]
		{"aaaaaa", ids("aaaa", "aa")}, // [aa][aa][aa] → the leftmost rank-3 pair; aaa+aaa never forms
	}
	for _, c := range cases {
		got, err := tk.Encode(context.Background(), c.in, Options{})
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	// The old tokenizer disagrees with the definition on some of these runs: the test above would have
	// failed with it.
	ov := &ollama.Vocabulary{Values: v.Tokens, Merges: v.Merges, Types: make([]int32, len(v.Tokens))}
	for i := range ov.Types {
		ov.Types[i] = ollama.TOKEN_TYPE_NORMAL
	}
	old := ollama.NewBytePairEncoding(ov, RegexQwen2)
	differs := 0
	for n := 2; n <= 64; n++ {
		s := strings.Repeat("a", n)
		want, _ := tk.Encode(context.Background(), s, Options{})
		if !slices.Equal(want, naiveBPE(tk, s)) {
			t.Fatalf("Encode(a×%d) = %v, definition %v", n, want, naiveBPE(tk, s))
		}
		got, err := old.Encode(s, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			differs++
		}
	}
	if differs == 0 {
		t.Error("Ollama's tokenizer agrees on every run: the regression cases no longer discriminate")
	}
	t.Logf("Ollama's tokenizer differs from the definition on %d of 63 runs", differs)
}

// tokenID looks a token string up (tests only; linear).
func (t *Tokenizer) tokenID(s string) int32 {
	for i, x := range t.tokens {
		if x == s {
			return int32(i)
		}
	}
	return -1
}

func TestPrevSet(t *testing.T) {
	b := make([]uint64, 4)
	set := []int{0, 5, 63, 64, 130, 255}
	for _, i := range set {
		b[i>>6] |= 1 << (i & 63)
	}
	for i := 0; i <= 256; i++ {
		want := -1
		for _, j := range set {
			if j < i {
				want = j
			}
		}
		if got := prevSet(b, i); got != want {
			t.Errorf("prevSet(%d) = %d, want %d", i, got, want)
		}
	}
}

// TestMissingByteSymbols: a byte without a token stops merges across it and makes no token, as in
// llama.cpp (which keeps its byte-level character as an unmergeable symbol and drops it at the end).
func TestMissingByteSymbols(t *testing.T) {
	v := synthVocab([][2]string{{"a", "b"}, {"b", "a"}}, nil, nil)
	for i, s := range v.Tokens {
		if s == "X" || s == bl("\x00") {
			v.Tokens[i] = "unused-" + s
		}
	}
	tk := mustNew(t, v)
	ab, ba, a, b := tk.tokenID("ab"), tk.tokenID("ba"), tk.tokenID("a"), tk.tokenID("b")
	for _, c := range []struct {
		in   string
		want []int32
	}{
		{"ab", []int32{ab}},
		{"aXb", []int32{a, b}},
		{"X", nil},
		{"abXba", []int32{ab, ba}},
		{"a\x00b", []int32{a, b}},
		{strings.Repeat("aXb", 40), append(append([]int32{a}, slices.Repeat([]int32{ba}, 39)...), b)}, // the queue path
	} {
		got, err := tk.Encode(context.Background(), c.in, Options{})
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
