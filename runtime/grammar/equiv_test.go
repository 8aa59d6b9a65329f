package grammar

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
)

// Grammar equivalence: what the engine can generate through the real
// matcher and sampler is checked against the independent recognizer
// (earley_test.go), and for regular grammars also against Go's regexp.

// equivGrammars are the grammars of the equivalence tests; re, when set, is
// an equivalent Go regular expression.
var equivGrammars = []struct {
	name, src, re string
}{
	{"choices", `root ::= "RISK_LEVEL: " [1-5]`, `RISK_LEVEL: [1-5]`},
	{"alternation", `root ::= ("ab" | "a" "c"*){2,4} "."?`, `(?:ab|ac*){2,4}\.?`},
	{"arithmetic", `root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor`, ""},
	{"json", `root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20}`, ""},
	{"unicode", `root ::= ([α-ω] | "é" | [^\x00-\x7F])+ " " [\u4e00-\u9fff]{1,3} "🎉"?`, `(?:[α-ω]|é|[^\x00-\x7F])+ [\x{4e00}-\x{9fff}]{1,3}(?:🎉)?`},
	{"nullable", `root ::= x y z
x ::= "a"?
y ::= "b"*
z ::= "c" | ""`, `a?b*c?`},
	{"negated", `root ::= [^"\n]{0,5} "\n" . # a comment
`, `(?s)[^"\n\x00]{0,5}\n[^\x00]`},
	{"counts", `root ::= ("x" [yz]?){3} ("w"{2,}) [0-9]{0,2}`, `(?:x[yz]?){3}w{2,}[0-9]{0,2}`},
	{"nested", `root ::= "(" root ")" root | ""`, ""},
}

// testVocab is a vocabulary shaped like a real byte-level BPE one: every
// byte (so partial UTF-8 pieces), pieces that span grammar symbols and
// characters, whole and split multi-byte characters, random merges over
// alphabet, a control token (no piece) and two end-of-generation tokens.
func testVocab(rng *rand.Rand, alphabet []string, nrandom int) *engine.Vocabulary {
	seen := map[string]bool{}
	var toks []engine.VocabToken
	add := func(p string) {
		if p == "" || seen[p] {
			return
		}
		seen[p] = true
		toks = append(toks, engine.VocabToken{Piece: p, Text: p})
	}
	for b := range 256 {
		add(string([]byte{byte(b)}))
	}
	for _, p := range []string{
		"RISK", "_LEVEL", ": ", ": 1", "RISK_LEVEL", "_LEVEL: 3", "ab", "ac", "abab", "cc", "a.", "..",
		"{\"", "\":", "\",", "\"}", "},", "[\"", "\"]", " {", ",\n", "\n  ", "true", "false", "null", "nul",
		"10", "123", "2024", "-1", "1.5", "e+", "1e", "(1", "+2)", "*(", "))", "((", "-(",
		"é", "αβ", "ω ", "中文", "中", "\xe4\xb8", "\xad", "🎉", "\xf0\x9f", "\x8e\x89", "\xf0", "\x9f\x8e",
		"xw", "ww", "www", "xyz", "xy", "w1", "12", "\\n", "\\u00", "\"\\\"", "a\"", "\n.", "\n\n",
	} {
		add(p)
	}
	for range nrandom {
		var sb strings.Builder
		for n := 2 + rng.IntN(4); n > 0; n-- {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		add(sb.String())
	}
	toks = append(toks, engine.VocabToken{Text: "<|im_start|>"})
	toks = append(toks, engine.VocabToken{Text: "<|im_end|>", EOG: true}, engine.VocabToken{Text: "<|endoftext|>", EOG: true})
	return engine.NewVocabulary(toks)
}

var testAlphabet = strings.Split(`a b c x y z w . ( ) + - * / 0 1 2 3 9 " : , { } [ ] \ n t u e E R I S K _ L V : é α ω 中 文 🎉 \n`, " ")

// generate samples one output through the engine's sampler: random logits
// (end-of-generation tokens raised so outputs end), temperature 1.5. It
// returns the text and whether generation ended because the grammar was
// complete (an end-of-generation token or Done).
func generate(t *testing.T, g *Grammar, v *engine.Vocabulary, rng *rand.Rand, seed uint64, maxTokens int) (string, bool) {
	t.Helper()
	m, err := g.NewMatcher(v)
	if err != nil {
		t.Fatal(err)
	}
	s := engine.NewSampler(engine.SamplingParams{Temperature: 1.5, Seed: &seed})
	s.Constrain(m, v.Size())
	logits := make([]float32, v.Size())
	var sb strings.Builder
	for range maxTokens {
		if m.Done() {
			return sb.String(), true
		}
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 2)
		}
		for _, id := range v.EOG() {
			logits[id] += 3
		}
		tok, _ := s.Sample(logits, nil)
		if err := s.Err(); err != nil {
			t.Fatalf("after %q: %v", sb.String(), err)
		}
		if v.IsEOG(tok) {
			return sb.String(), true
		}
		sb.WriteString(v.Piece(tok))
	}
	return sb.String(), m.Done()
}

// TestSampledOutputsMatchIndependentRecognizer: 1,000 outputs per grammar
// sampled at temperature 1.5 through the real matcher: every complete one
// is accepted by the independent recognizer (and the regexp, when the
// grammar is regular), every cut-off one is a viable prefix, and a matcher
// that says Done has nothing left to match.
func TestSampledOutputsMatchIndependentRecognizer(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	for gi, tc := range equivGrammars {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(gi), 7))
			v := testVocab(rng, testAlphabet, 1500)
			g, err := Parse(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			e := newEarley(t, tc.src)
			var re *regexp.Regexp
			if tc.re != "" {
				re = regexp.MustCompile(`^(?:` + tc.re + `)$`)
			}
			completeCount := 0
			for i := range n {
				text, complete := generate(t, g, v, rng, uint64(i), 40)
				c, viable := e.status(text)
				switch {
				case complete && !c:
					t.Fatalf("output %d %q ended as complete; the recognizer rejects it", i, text)
				case !viable:
					t.Fatalf("output %d %q is not a prefix of any sentence", i, text)
				case complete && re != nil && !re.MatchString(text):
					t.Fatalf("output %d %q does not match %s", i, text, re)
				}
				if complete {
					completeCount++
				}
			}
			if completeCount < n/4 {
				t.Fatalf("only %d of %d outputs completed", completeCount, n)
			}
		})
	}
}

// TestMaskEqualsIndependentViability enumerates every token sequence of up
// to 6 tokens the matcher allows, over a small vocabulary, and checks at
// each step that the mask holds exactly the tokens whose text extends to a
// viable prefix (the end-of-generation token exactly when the text is
// complete): the matcher allows nothing the grammar forbids and every
// string the grammar accepts within 6 tokens is reachable.
func TestMaskEqualsIndependentViability(t *testing.T) {
	pieces := []string{"a", "b", "c", "x", "ab", "ca", "bca", "(", ")", "()", ")(", "1", "+", "1+", "+1", "é", "\xc3", "\xa9", "\xc3\xa9a", "中", "\xe4", "\xb8\xad", "y", "z", "w", "ww", "xyz", "\n", ".", "\"", "RISK_LEVEL: ", "4", "RISK", "_LEVEL: 2"}
	var toks []engine.VocabToken
	for _, p := range pieces {
		toks = append(toks, engine.VocabToken{Piece: p, Text: p})
	}
	toks = append(toks, engine.VocabToken{Text: "<ctl>"}, engine.VocabToken{Text: "<eog>", EOG: true})
	v := engine.NewVocabulary(toks)
	grammars := []string{
		equivGrammars[0].src, equivGrammars[1].src, equivGrammars[5].src, equivGrammars[7].src, equivGrammars[8].src,
		`root ::= ("a" | "é" | [^a-z\n]) ("b" "c"?)? "x"{0,2}`,
		`root ::= [a-c]{1,3} | "中" "x"?`,
		equivGrammars[2].src,
	}
	for _, src := range grammars {
		g, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		e := newEarley(t, src)
		m, err := g.NewMatcher(v)
		if err != nil {
			t.Fatal(err)
		}
		mask := engine.NewTokenMask(v.Size())
		nodes := 0
		var visit func(m engine.Matcher, text string, depth int)
		visit = func(m engine.Matcher, text string, depth int) {
			nodes++
			if nodes > 20000 {
				return
			}
			if _, err := m.Allowed(mask); err != nil {
				t.Fatal(err)
			}
			rs, _ := decode(text)
			sets := e.chart(rs)
			complete, _ := e.statusOf(sets, rs, nil)
			if _, partial := decode(text); len(partial) > 0 {
				complete = false
			}
			var next []int32
			for id := range int32(v.Size()) {
				var want bool
				switch {
				case v.IsEOG(id):
					want = complete
				case v.Piece(id) == "":
					want = false
				default:
					_, want = e.statusFrom(sets, text+v.Piece(id))
				}
				if got := mask.Has(id); got != want {
					t.Fatalf("grammar %q after %q: token %q allowed %v, recognizer says %v", src, text, toks[id].Text, got, want)
				}
				if m.Allows(id) != want {
					t.Fatalf("grammar %q after %q: Allows(%q) disagrees with the mask", src, text, toks[id].Text)
				}
				if want && !v.IsEOG(id) {
					next = append(next, id)
				}
			}
			if done := m.Done(); done != (complete && len(next) == 0) {
				t.Fatalf("grammar %q after %q: Done %v, complete %v, %d continuations", src, text, done, complete, len(next))
			}
			if depth == 6 {
				return
			}
			for _, id := range next {
				c := m.Clone()
				if err := c.Accept(id); err != nil {
					t.Fatal(err)
				}
				visit(c, text+v.Piece(id), depth+1)
			}
		}
		visit(m, "", 0)
		if nodes < 5 {
			t.Fatalf("grammar %q: only %d positions visited", src, nodes)
		}
	}
}
