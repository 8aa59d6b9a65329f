package grammar

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phonellm/phonellm/runtime/engine"
)

// accepts runs text through a fresh matcher over a byte vocabulary and
// reports whether it is a complete match.
func accepts(t *testing.T, g *Grammar, text string) bool {
	t.Helper()
	v := byteVocab()
	m, err := g.matcher(v)
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(text) {
		if err := m.Accept(int32(text[i])); err != nil {
			return false
		}
	}
	return m.CanEnd()
}

func TestParseSyntax(t *testing.T) {
	for _, tc := range []struct {
		src  string
		yes  []string
		no   []string
		note string
	}{
		{src: "root ::= \"a\" | \"b\"", yes: []string{"a", "b"}, no: []string{"", "ab"}},
		{src: "root ::= \"a\" |\n  \"b\"", yes: []string{"b"}, note: "newline after | continues"},
		{src: "root ::= \"a\"\n  | \"b\"", note: "error: a newline before | ends the rule (as in llama.cpp)"},
		{src: "root ::= x\nx ::= (\n  \"a\"\n  \"b\"\n)", yes: []string{"ab"}, note: "newlines inside parentheses"},
		{src: "# comment\nroot ::= \"a\" # trailing\n\n# more\n", yes: []string{"a"}},
		{src: "root ::= \"\\x41\\u00e9\\U0001F389\\t\\r\\n\\\\\\\"\\[\\]\\-\"", yes: []string{"Aé🎉\t\r\n\\\"[]-"}},
		{src: `root ::= [a-c\-x\]\\]`, yes: []string{"a", "b", "-", "x", "]", "\\"}, no: []string{"d", "["}},
		{src: `root ::= [^a-z]`, yes: []string{"A", "é", "\n"}, no: []string{"a", "q", ""}},
		{src: `root ::= [a-]`, yes: []string{"a", "-"}, note: "'-' before ']' is literal"},
		{src: `root ::= []`, no: []string{"", "a"}, note: "empty class matches nothing"},
		{src: `root ::= [^]`, yes: []string{"a", "中"}, note: "negated empty class matches anything"},
		{src: `root ::= .`, yes: []string{"a", "\n", "中", "🎉"}, no: []string{"", "ab"}},
		{src: `root ::= "a"{3}`, yes: []string{"aaa"}, no: []string{"aa", "aaaa"}},
		{src: `root ::= "a"{2,}`, yes: []string{"aa", "aaaaa"}, no: []string{"a"}},
		{src: `root ::= "a"{0,2} "b"`, yes: []string{"b", "ab", "aab"}, no: []string{"aaab"}},
		{src: `root ::= "ab"*`, yes: []string{"", "abab"}, no: []string{"aba"}, note: "a repetition applies to the whole literal"},
		{src: `root ::= "a" "b"?`, yes: []string{"a", "ab"}},
		{src: `root ::= ("a" | "b")+ "c"`, yes: []string{"abbac"}, no: []string{"c"}},
		{src: `root ::= x{2}{3}` + "\nx ::= \"a\"", yes: []string{"aaaaaa"}, no: []string{"aaaaa"}},
		{src: `root ::= { 1 , 2 }`, note: "error: nothing to repeat"},
		{src: "root ::= a_b\na_b ::= \"z\"", yes: []string{"z"}, note: "underscore in names"},
		{src: "root ::= \"a\"\r\nx ::= \"b\"\r\n", yes: []string{"a"}},
	} {
		g, err := Parse(tc.src)
		if strings.HasPrefix(tc.note, "error") {
			if err == nil {
				t.Errorf("%q: parsed, want an error", tc.src)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.src, err)
			continue
		}
		for _, s := range tc.yes {
			if !accepts(t, g, s) {
				t.Errorf("%q (%s) rejects %q", tc.src, tc.note, s)
			}
		}
		for _, s := range tc.no {
			if accepts(t, g, s) {
				t.Errorf("%q (%s) accepts %q", tc.src, tc.note, s)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		src, want string
	}{
		{"root ::= \"a", "1:12: unterminated string literal (opened at 1:10)"},
		{"root ::= [a", "1:10: unterminated character class"},
		{"root := \"a\"", "1:6: expecting ::="},
		{"root ::= (\"a\"", "expecting ')'"},
		{"root ::= \"a\")", "expecting end of line"},
		{"root ::= *", "1:10: expecting an item before '*'"},
		{"root ::= \"\\q\"", "1:11: unknown escape \\q"},
		{"root ::= \"\\é\"", "1:11: unknown escape \\é"},
		{"root ::= [a\\", "unexpected end of input after '\\'"},
		{"root ::= \"\\x4\"", "needs 2 hex digits"},
		{"root ::= \"\\U00110000\"", "above U+10FFFF"},
		{"root ::= \"\\uD800\"", "surrogate"},
		{"root ::= \"\\x00\"", "NUL"},
		{"root ::= [z-a]", "reversed"},
		{"root ::= \"a\"{3,2}", "maximum below minimum"},
		{"root ::= \"a\"{3", "expecting ',' or '}'"},
		{"root ::= \"a\"{x}", "expecting a number"},
		{"root ::= foo", `undefined rule "foo"`},
		{"\nroot ::= \"a\"\nx ::= y\n", `3:7: undefined rule "y"`},
		{"x ::= \"a\"", "no root rule"},
		{"root ::= \"a\"\nroot ::= \"b\"", "2:1: rule \"root\" defined twice (first at 1:1)"},
		{"root ::= <abc", "expecting '>'"},
		{"root ::= <[12x]>", "expecting ]>"},
		{"root ::= !\"a\"", "expecting '<'"},
		{"root ::= \"a\xff\"", "1:12: invalid UTF-8"},
		{"root ::= root \"a\"", `rule "root": left recursion`},
		{"root ::= x \"a\"\nx ::= y\ny ::= \"\" | root", `left recursion`},
		{"root ::= (\"a\"?)*", `rule "root": left recursion through root_`},
		{"root ::= x* \"b\"\nx ::= \"a\"?", "left recursion"},
		{"root ::= \"a\"{100000}", "exceeds the limit of 10000"},
		{"root ::= \"a\"{0,99999999999999999999999}", "exceeds the limit"},
		{"root ::= " + strings.Repeat("(", 200) + "\"a\"" + strings.Repeat(")", 200), "nested deeper than 128"},
		{"root ::= ((\"ab\"{100}){100}){100}", "more than"},
	} {
		_, err := Parse(tc.src)
		if err == nil {
			t.Errorf("%q: parsed, want error containing %q", tc.src, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q, want it to contain %q", tc.src, err, tc.want)
		}
		var ie interface{ InputError() bool }
		if !errors.As(err, &ie) || !ie.InputError() {
			t.Errorf("%q: error %T is not an input error", tc.src, err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error spans lines: %q", tc.src, err)
		}
	}
}

// TestHostileGrammarsBounded: grammars built to explode (exponential
// ambiguity, huge expansions) end in errors, not in exhausted memory or a
// hang.
func TestHostileGrammarsBounded(t *testing.T) {
	// 2^40 distinct parse stacks for the first character.
	var sb strings.Builder
	sb.WriteString("root ::= r0\n")
	for i := range 40 {
		sb.WriteString("r" + strconv.Itoa(i) + " ::= r" + strconv.Itoa(i+1) + " \"a\" | r" + strconv.Itoa(i+1) + " \"b\"\n")
	}
	sb.WriteString("r40 ::= \"x\"\n")
	g, err := Parse(sb.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.NewMatcher(byteVocab()); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("exponentially ambiguous grammar: %v, want an ambiguity error", err)
	}
	// A grammar whose every token leads to a new state: the matcher's
	// caches are bounded and renewed; generation goes on.
	g, err = ParseLimits("root ::= (\"a\" root \"1\" | \"b\" root \"2\" | \"c\")", Limits{States: 64})
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.matcher(byteVocab())
	if err != nil {
		t.Fatal(err)
	}
	mask := engine.NewTokenMask(257)
	for i := range 500 {
		tok := int32("ab"[i%2])
		if _, err := m.Allowed(mask); err != nil {
			t.Fatal(err)
		}
		if err := m.Accept(tok); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if len(m.m.states) > 2*64+8 {
			t.Fatalf("state cache grew to %d past its bound", len(m.m.states))
		}
	}
	if err := m.Accept('c'); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if err := m.Accept(int32("21"[i%2])); err != nil {
			t.Fatalf("closing %d: %v", i, err)
		}
	}
	if !m.Done() {
		t.Fatal("not done after closing every level")
	}
}

// TestClassAutomataExhaustive: the byte automaton of each class accepts the
// UTF-8 form of exactly the code points in the class (every code point is
// tried), and no invalid UTF-8.
func TestClassAutomataExhaustive(t *testing.T) {
	v := byteVocab()
	for _, cls := range []string{`.`, `[^"\\\x7F\x00-\x1F]`, `[α-ω]`, `[\u4e00-\u9fff]`, `[^a-z]`, `[\U0001F600-\U0001F64F\u00e9]`,
		`[\x80-\u07FF]`, `[\u0800-\uFFFF]`, `[\uD7FF-\uE000]`, `[\U0010FFFF]`, `[^\U00010000-\U0010FFFF]`, `[a\u00ff\u0100\u07ff\u0800\uffff\U00010000]`} {
		src := "root ::= " + cls
		g, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		tree, _ := parseGBNF(src, Limits{})
		ref := esym{nt: -1, cls: tree.rules[0].body.items[0].items[0]}
		m, err := g.matcher(v)
		if err != nil {
			t.Fatal(err)
		}
		var buf [4]byte
		for r := rune(0); r <= utf8.MaxRune; r++ {
			if r >= 0xD800 && r <= 0xDFFF {
				continue
			}
			n := utf8.EncodeRune(buf[:], r)
			st := m.st
			for _, b := range buf[:n] {
				if st >= 0 {
					st = m.m.next(st, b)
				}
			}
			got := st >= 0 && m.m.states[st].accept
			if want := ref.matches(r); got != want {
				t.Fatalf("%s: U+%04X accepted %v, want %v", cls, r, got, want)
			}
		}
		// Surrogates, overlong forms, stray continuation bytes, 5-byte leads.
		for _, bad := range []string{"\xed\xa0\x80", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xf0\x80\x80\x80", "\x80", "\xf5\x80\x80\x80", "\xf8\x88\x80\x80\x80", "\xf4\x90\x80\x80"} {
			st := m.st
			for i := range len(bad) {
				if st >= 0 {
					st = m.m.next(st, bad[i])
				}
			}
			if st >= 0 && m.m.states[st].accept {
				t.Fatalf("%s accepts invalid UTF-8 %q", cls, bad)
			}
		}
	}
}

// TestTokenReferences: <[id]>, <text> and their negations match whole
// tokens by id, never by their characters.
func TestTokenReferences(t *testing.T) {
	toks := []engine.VocabToken{{Piece: "a", Text: "a"}, {Piece: "<think>", Text: "<think>"}, {Piece: "</think>", Text: "</think>"},
		{Piece: "b", Text: "b"}, {Text: "<|ctl|>"}, {Text: "<|im_end|>", EOG: true}, {Piece: "<", Text: "<"}}
	v := engine.NewVocabulary(toks)
	g, err := Parse("root ::= <think> thinking </think> \"a\"\nthinking ::= !</think>*")
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.NewMatcher(v)
	if err != nil {
		t.Fatal(err)
	}
	mask := engine.NewTokenMask(v.Size())
	step := func(want string, tok int32) {
		t.Helper()
		m.Allowed(mask)
		var got []string
		for i := range int32(v.Size()) {
			if mask.Has(i) {
				got = append(got, toks[i].Text)
			}
		}
		if strings.Join(got, " ") != want {
			t.Fatalf("allowed %q, want %q", strings.Join(got, " "), want)
		}
		if tok >= 0 {
			if err := m.Accept(tok); err != nil {
				t.Fatal(err)
			}
		}
	}
	step("<think>", 1)
	step("a <think> </think> b <|ctl|> <", 0) // any token but </think> (and not EOG), or </think>
	step("a <think> </think> b <|ctl|> <", 4)
	step("a <think> </think> b <|ctl|> <", 2)
	step("a", 0)
	step("<|im_end|>", -1)
	if !m.Done() {
		t.Fatal("not done")
	}
	// The character "<" cannot start the token <think>.
	m, _ = g.NewMatcher(v)
	if m.Allows(6) || m.Allows(0) {
		t.Fatal("characters matched a token reference")
	}
	// By id.
	g, _ = Parse("root ::= <[3]> !<[0]>")
	m, _ = g.NewMatcher(v)
	if !m.Allows(3) || m.Allows(0) {
		t.Fatal("<[3]>")
	}
	m.Accept(3)
	if m.Allows(0) || !m.Allows(3) || m.Allows(5) {
		t.Fatal("!<[0]>")
	}
	for _, bad := range []string{"root ::= <nope>", "root ::= <[7]>"} {
		g, err := Parse(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.NewMatcher(v); err == nil {
			t.Fatalf("%q: no error for a token the vocabulary lacks", bad)
		}
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

func FuzzParseGBNF(f *testing.F) {
	for _, tc := range equivGrammars {
		f.Add(tc.src, "ab")
	}
	f.Add("root ::= [^\\x00-\\x1F]{0,3} | <[5]> !<x>", "\x00\xff")
	f.Add("root ::= (\"a\" (\"b\" (\"c\")*)+)? # c", "abcbc")
	f.Add("root ::= x\nx ::= y?\ny ::= x", "")
	v := testVocab(newRand(1), testAlphabet, 50)
	f.Fuzz(func(t *testing.T, src, text string) {
		g, err := ParseLimits(src, Limits{Elements: 1 << 16, Rules: 1 << 12, States: 1 << 10})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		m, err := g.NewMatcher(v)
		if err != nil {
			return
		}
		mask := engine.NewTokenMask(v.Size())
		for i := 0; i < len(text) && i < 16; i++ {
			if _, err := m.Allowed(mask); err != nil {
				return
			}
			tok := int32(text[i])
			if mask.Has(tok) != m.Allows(tok) {
				t.Fatalf("mask and Allows disagree on %d", tok)
			}
			if err := m.Accept(tok); (err == nil) != mask.Has(tok) {
				t.Fatalf("Accept(%d) = %v, mask says %v", tok, err, mask.Has(tok))
			}
		}
	})
}

// TestLongRuleChains: chains of rules as long as the limits allow, defined
// in the order that is worst for fixpoint algorithms, compile in linear
// time (nullability, left recursion) — a quadratic pass would take minutes.
func TestLongRuleChains(t *testing.T) {
	const n = 100000
	var sb strings.Builder
	sb.WriteString("root ::= r0 \"x\"\n")
	for i := range n {
		sb.WriteString("r" + strconv.Itoa(i) + " ::= r" + strconv.Itoa(i+1) + "\n")
	}
	sb.WriteString("r" + strconv.Itoa(n) + " ::= \"\" | \"y\"\n")
	g, err := Parse(sb.String())
	if err != nil {
		t.Fatal(err)
	}
	if !accepts(t, g, "x") || !accepts(t, g, "yx") {
		t.Fatal("chain grammar")
	}
	sb.WriteString("loop ::= r0 loop\n")
	if _, err := Parse(sb.String()); err == nil || !strings.Contains(err.Error(), "left recursion") {
		t.Fatalf("left recursion through a nullable chain: %v", err)
	}
}

// TestClassOfManyRanges: a class of 40,000 scattered code points (every
// other one in a 3-byte block, plus some 4-byte ones) compiles in time
// proportional to its size and matches exactly its members.
func TestClassOfManyRanges(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("root ::= [")
	for r := rune(0x4e00); r < 0x4e00+80000 && r < 0xD800; r += 2 {
		sb.WriteString(string(r))
	}
	for r := rune(0x10000); r < 0x10000+2000; r += 3 {
		sb.WriteString(`\U` + strings.Repeat("0", 3) + strconv.FormatInt(int64(r), 16))
	}
	sb.WriteString("]\n")
	g, err := Parse(sb.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    rune
		want bool
	}{{0x4e00, true}, {0x4e01, false}, {0x9fa4, true}, {0xD7FE, true}, {0xD7FF, false}, {0x10000, true}, {0x10001, false}, {0x10003, true}, {0x4dff, false}} {
		if got := accepts(t, g, string(c.r)); got != c.want {
			t.Fatalf("U+%04X accepted %v, want %v", c.r, got, c.want)
		}
	}
}
