package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

func pieces(p pretok, s string) []string {
	var out []string
	p.split(s, func(w string) { out = append(out, w) })
	return out
}

func TestPretokTricky(t *testing.T) {
	q2, q35 := newPretok(false), newPretok(true)
	for _, c := range []struct {
		p    pretok
		in   string
		want []string
	}{
		{q2, "", nil},
		{q2, "Hello world", []string{"Hello", " world"}},
		{q2, "Hello  world", []string{"Hello", " ", " world"}},
		{q2, "a   \n\n  b", []string{"a", "   \n\n", " ", " b"}},
		{q2, "trailing   ", []string{"trailing", "   "}},
		{q2, "x \t y", []string{"x", " \t", " y"}},
		{q2, "\n\n\nfoo", []string{"\n\n\n", "foo"}},
		{q2, "  \r\n", []string{"  \r\n"}},
		{q2, "\r\n \r\n x", []string{"\r\n \r\n", " x"}},
		{q2, "12345 67", []string{"1", "2", "3", "4", "5", " ", "6", "7"}},
		{q2, "I'm don't WE'LL 'Re", []string{"I", "'m", " don", "'t", " WE", "'LL", " '", "Re"}},
		{q2, "it'sn't 'VE'd", []string{"it", "'s", "n", "'t", " '", "VE", "'d"}},
		{q2, "'ſx", []string{"'ſ", "x"}}, // (?i) folds ſ to s
		{q2, "'", []string{"'"}},
		{q2, "''s", []string{"''", "s"}}, // alternative 4 takes both apostrophes
		{q2, "hello!!! ?? x", []string{"hello", "!!!", " ??", " x"}},
		{q2, "a...\n\nb", []string{"a", "...\n\n", "b"}},
		{q2, " (x)", []string{" (", "x", ")"}},
		{q2, "$100", []string{"$", "1", "0", "0"}},
		{q2, "\t!", []string{"\t", "!"}},
		{q2, "\ta", []string{"\ta"}},
		{q2, "\na", []string{"\n", "a"}},
		{q2, "안녕하세요 세계", []string{"안녕하세요", " 세계"}},
		{q2, "日本語のテキスト。", []string{"日本語のテキスト", "。"}},
		{q2, "emoji 😀👍🏽 ok", []string{"emoji", " 😀👍🏽", " ok"}},
		{q2, "٣٤ ⅷ", []string{"٣", "٤", " ", "ⅷ"}},
		{q2, "\u00a0x", []string{"\u00a0x"}}, // NBSP is \s and also [^\r\n\p{L}\p{N}]
		{q2, "x\u00a0\u00a0", []string{"x", "\u00a0\u00a0"}},
		{q2, "e\u0301t\u0301", []string{"e", "\u0301t", "\u0301"}},
		{q35, "e\u0301t\u0301", []string{"e\u0301t\u0301"}},
		{q35, " \u0301\u0302x", []string{" \u0301\u0302x"}},
		{q2, " \u0301\u0302x", []string{" \u0301\u0302", "x"}},
		{q2, "\u0301abc", []string{"\u0301abc"}},
		{q35, "\u0301", []string{"\u0301"}},
		{q35, "!\u0301", []string{"!\u0301"}},
		{q2, "a\xffb", []string{"a", "\xffb"}}, // an invalid byte is one character of no class
		{q2, "\xff\xfe!", []string{"\xff\xfe!"}},
	} {
		got := pieces(c.p, c.in)
		if !slices.Equal(got, c.want) {
			t.Errorf("marks=%v split(%q) = %q, want %q", c.p.word&cMark != 0, c.in, got, c.want)
		}
	}
}

// regexPieces is the Split(Isolated) pre-tokenizer computed by a backtracking regex engine with lookahead
// (dlclark/regexp2, .NET semantics, Go's Unicode tables): matches and the gaps between them. regexp2 does
// not fold ſ to s under (?i), which Oniguruma (Hugging Face) does, so the reference uses the case-expanded
// regex with ſ added.
func regexPieces(t testing.TB, re *regexp2.Regexp, text string) []string {
	runes := []rune(text)
	// Byte offset of every rune (an invalid byte is one rune, U+FFFD, as for []rune).
	offs := make([]int, 0, len(runes)+1)
	for i := range text {
		offs = append(offs, i)
	}
	offs = append(offs, len(text))
	var out []string
	last := 0
	m, err := re.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		if m.Index > last {
			out = append(out, text[offs[last]:offs[m.Index]])
		}
		if m.Length > 0 {
			out = append(out, text[offs[m.Index]:offs[m.Index+m.Length]])
		}
		last = m.Index + m.Length
	}
	if err != nil {
		t.Fatal(err)
	}
	if last < len(runes) {
		out = append(out, text[offs[last]:])
	}
	return out
}

func referenceRegexes(t testing.TB) (q2, q35 *regexp2.Regexp) {
	withLongS := func(re string) string { return strings.Replace(re, `'[sS]`, `'[sSſ]`, 1) }
	return regexp2.MustCompile(withLongS(RegexQwen2CaseExpanded), regexp2.None),
		regexp2.MustCompile(withLongS(RegexQwen35CaseExpanded), regexp2.None)
}

// alphabet covers every class and boundary the regexes distinguish.
var alphabet = []string{
	"a", "Z", "s", "S", "t", "r", "e", "v", "m", "l", "L", "d", "ſ", "'", "'", "'",
	"0", "9", "٣", "ⅷ", "½", " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0",
	"\u2028", "\u3000", "!", "?", ".", "-", "=", "(", "$", "_", "\u0301", "\u0323", "é", "中", "日本", "😀",
	"👍🏽", "\u200b", "\x00", "\x1c", "\xff", "\xe2\x82", "ß", "İ", "ǅ",
}

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

func TestPretokMatchesRegex(t *testing.T) {
	re2, re35 := referenceRegexes(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		s := randomText(rng, 1+rng.IntN(24))
		for _, c := range []struct {
			p  pretok
			re *regexp2.Regexp
		}{{newPretok(false), re2}, {newPretok(true), re35}} {
			if got, want := pieces(c.p, s), regexPieces(t, c.re, s); !slices.Equal(got, want) {
				t.Fatalf("case %d, marks=%v: split(%q) = %q, regex gives %q", i, c.p.word&cMark != 0, s, got, want)
			}
		}
	}
}

// FuzzPretokenize checks the scanner against the regex on arbitrary bytes: the same pieces, which never
// are empty and cover the text.
func FuzzPretokenize(f *testing.F) {
	for _, s := range []string{"Hello world", "a   \n\n  b", "I'm 'ſ WE'LL", "x\u00a0\u00a0", "e\u0301t", "\xff\xfe!", "  \r\n"} {
		f.Add(s)
	}
	re2, re35 := referenceRegexes(f)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 256 {
			s = s[:256]
		}
		for _, c := range []struct {
			p  pretok
			re *regexp2.Regexp
		}{{newPretok(false), re2}, {newPretok(true), re35}} {
			got := pieces(c.p, s)
			if strings.Join(got, "") != s || slices.Contains(got, "") {
				t.Fatalf("split(%q) = %q: empty pieces or text lost", s, got)
			}
			if !utf8.ValidString(s) {
				continue // regexp2 reads runes; invalid bytes are compared in TestPretokTricky
			}
			if want := regexPieces(t, c.re, s); !slices.Equal(got, want) {
				t.Fatalf("marks=%v: split(%q) = %q, regex gives %q", c.p.word&cMark != 0, s, got, want)
			}
		}
	})
}
