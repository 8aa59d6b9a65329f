package reference

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

func TestSplitTrickyStrings(t *testing.T) {
	q2, q35 := splitScanner{marks: false}, splitScanner{marks: true}
	for _, c := range []struct {
		in   string
		want []string
		sc   splitScanner
	}{
		{"Hello world", []string{"Hello", " world"}, q2},
		{"Hello  world", []string{"Hello", " ", " world"}, q2},
		{"a   \n\n  b", []string{"a", "   \n\n", " ", " b"}, q2},
		{"trailing   ", []string{"trailing", "   "}, q2},
		{"x \t y", []string{"x", " \t", " y"}, q2},
		{"\n\n\nfoo", []string{"\n\n\n", "foo"}, q2},
		{"  \r\n", []string{"  \r\n"}, q2},
		{"12345 67", []string{"1", "2", "3", "4", "5", " ", "6", "7"}, q2},
		{"I'm don't WE'LL 'Re", []string{"I", "'m", " don", "'t", " WE", "'LL", " '", "Re"}, q2},
		{"it'sn't", []string{"it", "'s", "n", "'t"}, q2},
		{"'ſ", []string{"'ſ"}, q2}, // (?i) folds ſ to s
		{"hello!!! ?? x", []string{"hello", "!!!", " ??", " x"}, q2},
		{"a...\n\nb", []string{"a", "...\n\n", "b"}, q2},
		{" (x)", []string{" (", "x", ")"}, q2},
		{"$100", []string{"$", "1", "0", "0"}, q2},
		{"안녕하세요 세계", []string{"안녕하세요", " 세계"}, q2},
		{"日本語のテキスト。", []string{"日本語のテキスト", "。"}, q2},
		{"emoji 😀👍🏽 ok", []string{"emoji", " 😀👍🏽", " ok"}, q2},
		{"٣٤ ⅷ", []string{"٣", "٤", " ", "ⅷ"}, q2},
		{"\u00a0x", []string{"\u00a0x"}, q2}, // NBSP is \s but also [^\r\n\p{L}\p{N}]
		{"e\u0301t\u0301", []string{"e", "\u0301t", "\u0301"}, q2},
		{"e\u0301t\u0301", []string{"e\u0301t\u0301"}, q35},
		{" \u0301\u0302x", []string{" \u0301\u0302x"}, q35},
		{" \u0301\u0302x", []string{" \u0301\u0302", "x"}, q2},
		{"\u0301abc", []string{"\u0301abc"}, q2},
		{"", nil, q2},
	} {
		got := c.sc.split(c.in)
		if !slices.Equal(got, c.want) {
			t.Errorf("marks=%v split(%q) = %q, want %q", c.sc.marks, c.in, got, c.want)
		}
		if strings.Join(got, "") != c.in {
			t.Errorf("split(%q) loses text", c.in)
		}
	}
}

// regexSplit is the Split(Isolated) behaviour computed with a backtracking regex engine that supports the
// lookahead (dlclark/regexp2, .NET semantics), as an independent oracle for splitScanner.
func regexSplit(t testing.TB, re *regexp2.Regexp, text string) []string {
	rs := []rune(text)
	var out []string
	prev := 0
	m, err := re.FindStringMatch(text)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		if m.Index > prev {
			out = append(out, string(rs[prev:m.Index]))
		}
		if m.Length > 0 {
			out = append(out, string(rs[m.Index:m.Index+m.Length]))
		}
		prev = m.Index + m.Length
	}
	if err != nil {
		t.Fatal(err)
	}
	if prev < len(rs) {
		out = append(out, string(rs[prev:]))
	}
	return out
}

// A pool of characters from every class the regexes distinguish (ſ is left out: .NET's case-insensitive
// matching does not fold it, Oniguruma's does; TestSplitTrickyStrings covers it).
var splitAlphabet = []rune("aZé'sStTrReEvVmMlLdD \t\n\r\v\f\u00a0\u2003\u3000\u2028\u0085" +
	"0123456789٣ⅷ½!?.,;:$(){}[]<>-_\"#@&*+=/\\|~`^%" +
	"한국어안녕日本語中文😀👍🏽🎉\u0301\u0302\u0903\u200d\ufe0f")

func randomSplitText(rng *rand.Rand) string {
	n := rng.IntN(24)
	var sb strings.Builder
	for range n {
		sb.WriteRune(splitAlphabet[rng.IntN(len(splitAlphabet))])
	}
	return sb.String()
}

func TestSplitMatchesRegexEngine(t *testing.T) {
	for _, c := range []struct {
		pattern string
		sc      splitScanner
	}{{RegexQwen2, splitScanner{marks: false}}, {RegexQwen35, splitScanner{marks: true}}} {
		re := regexp2.MustCompile(c.pattern, regexp2.None)
		rng := rand.New(rand.NewPCG(11, 12))
		for i := range 20000 {
			s := randomSplitText(rng)
			got, want := c.sc.split(s), regexSplit(t, re, s)
			if !slices.Equal(got, want) {
				t.Fatalf("case %d: split(%q) = %q, regex engine gives %q", i, s, got, want)
			}
		}
	}
}

func FuzzSplitMatchesRegexEngine(f *testing.F) {
	for _, s := range []string{"Hello  world", "a \n\n b", "I'm 123", "😀 x\u0301", "\u3000\t\n"} {
		f.Add(s)
	}
	re2 := regexp2.MustCompile(RegexQwen2, regexp2.None)
	re35 := regexp2.MustCompile(RegexQwen35, regexp2.None)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 'ſ') || len(s) > 256 {
			return
		}
		if got, want := (splitScanner{}).split(s), regexSplit(t, re2, s); !slices.Equal(got, want) {
			t.Fatalf("qwen2 split(%q) = %q, regex engine gives %q", s, got, want)
		}
		if got, want := (splitScanner{marks: true}).split(s), regexSplit(t, re35, s); !slices.Equal(got, want) {
			t.Fatalf("qwen35 split(%q) = %q, regex engine gives %q", s, got, want)
		}
	})
}
