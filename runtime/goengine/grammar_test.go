package goengine

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/testkit/realvocab"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// Grammar equivalence through the engine (issue 18): what the engine
// generates under a constraint is checked against matchers written
// independently of runtime/grammar (Go regular expressions, hand-written
// JSON checks), and for small grammars every string the independent matcher
// accepts that the model's vocabulary can spell in at most 6 tokens is
// reachable through the engine's constraint.

type equivCase struct {
	name  string
	c     func() (*grammar.Grammar, error)
	check func(string) error
	// lang lists the whole language, for the reachability check (nil: the
	// language is too large to list).
	lang []string
}

func regexCheck(expr string) func(string) error {
	re := regexp.MustCompile(`\A(?:` + expr + `)\z`)
	return func(s string) error {
		if !re.MatchString(s) {
			return fmt.Errorf("%q does not match %s", s, expr)
		}
		return nil
	}
}

func cross(parts ...[]string) []string {
	out := []string{""}
	for _, p := range parts {
		var next []string
		for _, a := range out {
			for _, b := range p {
				next = append(next, a+b)
			}
		}
		out = next
	}
	return out
}

func equivCases() []equivCase {
	gbnf := func(src string) func() (*grammar.Grammar, error) {
		return func() (*grammar.Grammar, error) { return grammar.Parse(src) }
	}
	schema := func(src string) func() (*grammar.Grammar, error) {
		return func() (*grammar.Grammar, error) { return grammar.FromJSONSchema([]byte(src)) }
	}
	digits := strings.Split("0123456789", "")
	greek := []string{"α", "β", "γ"}
	return []equivCase{
		{"risk level", gbnf(`root ::= "RISK_LEVEL: " [1-5]`), regexCheck(`RISK_LEVEL: [1-5]`), nil},
		{"yes no", gbnf(`root ::= ("yes" | "no") [!?]?`), regexCheck(`(yes|no)[!?]?`), cross([]string{"yes", "no"}, []string{"", "!", "?"})},
		{"letters digits", gbnf(`root ::= [a-c] [0-9]? "-"?`), regexCheck(`[a-c][0-9]?-?`),
			cross([]string{"a", "b", "c"}, append([]string{""}, digits...), []string{"", "-"})},
		{"multi-byte", gbnf(`root ::= "é" [α-γ]{1,2}`), regexCheck(`é[α-γ]{1,2}`), append(cross([]string{"é"}, greek), cross([]string{"é"}, greek, greek)...)},
		{"choices", func() (*grammar.Grammar, error) { return grammar.Choices([]string{"low", "lower", "high", "hi"}) }, regexCheck(`low|lower|high|hi`),
			[]string{"low", "lower", "high", "hi"}},
		{"nested", gbnf("root ::= item (\",\" item){0,2}\nitem ::= \"[\" [xy]? \"]\""), regexCheck(`\[[xy]?\](,\[[xy]?\]){0,2}`), nil},
		{"schema object", schema(`{"type":"object","properties":{"a":{"type":"integer","minimum":-3,"maximum":12},"b":{"enum":["x","y z",null]},"c":{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}},"required":["a","c"]}`),
			func(s string) error {
				var v map[string]json.RawMessage
				d := json.NewDecoder(strings.NewReader(s))
				if err := d.Decode(&v); err != nil || d.More() {
					return fmt.Errorf("%q: not one JSON object: %v", s, err)
				}
				var a int
				var c []bool
				if json.Unmarshal(v["a"], &a) != nil || a < -3 || a > 12 || json.Unmarshal(v["c"], &c) != nil || len(c) < 1 || len(c) > 2 {
					return fmt.Errorf("%q: a or c", s)
				}
				if b, ok := v["b"]; ok && !slices.Contains([]string{`"x"`, `"y z"`, `null`}, string(b)) {
					return fmt.Errorf("%q: b", s)
				}
				for k := range v {
					if k != "a" && k != "b" && k != "c" {
						return fmt.Errorf("%q: key %q", s, k)
					}
				}
				return nil
			}, nil},
		{"schema string pattern", schema(`{"type":"string","pattern":"^[A-Z]{2}-[0-9]{2,3}$"}`), regexCheck(`"[A-Z]{2}-[0-9]{2,3}"( |\n{1,2}[ \t]{0,20})?`), nil},
		{"schema $ref", schema(`{"$defs":{"level":{"type":"integer","minimum":1,"maximum":5},"code":{"type":"string","pattern":"^[A-Z]{2}$"}},
			"type":"object","properties":{"level":{"$ref":"#/$defs/level"},"codes":{"type":"array","items":{"$ref":"#/$defs/code"},"maxItems":2}},
			"required":["level","codes"],"additionalProperties":false}`),
			func(s string) error {
				var v struct {
					Level *int
					Codes []string
				}
				d := json.NewDecoder(strings.NewReader(s))
				d.DisallowUnknownFields()
				if err := d.Decode(&v); err != nil || d.More() {
					return fmt.Errorf("%q: not one JSON object of the schema: %v", s, err)
				}
				if v.Level == nil || *v.Level < 1 || *v.Level > 5 || v.Codes == nil || len(v.Codes) > 2 {
					return fmt.Errorf("%q: level or codes", s)
				}
				for _, c := range v.Codes {
					if !regexp.MustCompile(`\A[A-Z]{2}\z`).MatchString(c) {
						return fmt.Errorf("%q: code %q", s, c)
					}
				}
				return nil
			}, nil},
	}
}

// TestGrammarSamplesThroughEngine: 1,000 outputs sampled at temperature 1.5
// over the cases, each accepted by its independent matcher.
func TestGrammarSamplesThroughEngine(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 83}, Options{Parallel: 4, ContextLength: 512})
	sampleCases(t, e, 1000)
}

// TestGrammarSamplesRealVocab: the same over Qwen3's real vocabulary (a
// tiny model carrying it, internal/testkit/realvocab), whose tokens span
// several grammar symbols at once ({", ":", RISK, _LEVEL, multi-byte
// pieces): 100 outputs, each accepted by its independent matcher.
func TestGrammarSamplesRealVocab(t *testing.T) {
	if testing.Short() {
		t.Skip("converts a model with a 151,936-token vocabulary")
	}
	e, err := Load(t.Context(), Options{Path: realvocab.GGUF(t), Threads: 1, Parallel: 2, ContextLength: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if n := sampleCases(t, e, 100); n == 0 {
		t.Fatal("no sample used a token of several characters")
	} else {
		t.Logf("%d tokens of several characters in the samples", n)
	}
}

// sampleCases samples total outputs at temperature 1.5, cycling through
// the cases, and checks each with its case's matcher. It returns how many
// sampled tokens spell more than one character.
func sampleCases(t *testing.T, e *Engine, total int) int {
	t.Helper()
	prompt, err := e.Tokenize(context.Background(), "<|im_start|>user\nanswer<|im_end|>\n<|im_start|>assistant\n", false)
	if err != nil {
		t.Fatal(err)
	}
	cases := equivCases()
	var wg sync.WaitGroup
	var multi atomic.Int64
	v := e.Vocabulary()
	errs := make(chan error, total)
	sem := make(chan struct{}, 4)
	for i := range total {
		c := cases[i%len(cases)]
		g, err := c.c()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			seed := uint64(i)
			r, err := e.Generate(context.Background(), engine.Request{Tokens: prompt, MaxTokens: 200, Constraint: g,
				Sampling: engine.SamplingParams{Temperature: 1.5, Seed: &seed}}, nil)
			switch {
			case err != nil:
				errs <- fmt.Errorf("%s seed %d: %v", c.name, seed, err)
			case r.FinishReason != engine.FinishStop:
				errs <- fmt.Errorf("%s seed %d: %q ended by %s", c.name, seed, r.Text, r.FinishReason)
			default:
				if err := c.check(r.Text); err != nil {
					errs <- fmt.Errorf("%s seed %d: %v", c.name, seed, err)
				}
				for _, id := range r.Tokens {
					if utf8.RuneCountInString(v.Piece(id)) > 1 {
						multi.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(multi.Load())
}

// TestGrammarReachableThroughEngine: for the finite cases, the texts the
// engine's constraint lets the model complete in at most 6 tokens are
// exactly the strings of the language that the vocabulary can spell in at
// most 6 tokens. The walk uses the masks the sampler applies (the matcher
// over the engine's own Vocabulary, whose pieces are what it emits); at a
// temperature above 0 without truncation every allowed token has a
// probability above 0, so every walked text can be sampled.
func TestGrammarReachableThroughEngine(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 84}, Options{ContextLength: 512})
	v := e.Vocabulary()
	for _, c := range equivCases() {
		if c.lang == nil {
			continue
		}
		g, err := c.c()
		if err != nil {
			t.Fatal(err)
		}
		m, err := g.NewMatcher(v)
		if err != nil {
			t.Fatal(err)
		}
		reached := map[string]bool{}
		mask := engine.NewTokenMask(v.Size())
		var walk func(m engine.Matcher, text string, depth int)
		walk = func(m engine.Matcher, text string, depth int) {
			n, err := m.Allowed(mask)
			if err != nil {
				t.Fatalf("%s at %q: %v", c.name, text, err)
			}
			var allowed []int32
			for id := range int32(v.Size()) {
				if mask.Has(id) {
					allowed = append(allowed, id)
				}
			}
			if len(allowed) != n {
				t.Fatalf("%s: Allowed counted %d, the mask holds %d", c.name, n, len(allowed))
			}
			for _, id := range allowed {
				if v.IsEOG(id) {
					reached[text] = true
					continue
				}
				if depth == 6 {
					continue
				}
				next := m.Clone()
				if err := next.Accept(id); err != nil {
					t.Fatalf("%s: allowed token %d refused: %v", c.name, id, err)
				}
				walk(next, text+v.Piece(id), depth+1)
			}
		}
		walk(m, "", 0)
		for s := range reached {
			if err := c.check(s); err != nil {
				t.Fatalf("%s: the engine can complete %v", c.name, err)
			}
		}
		for _, s := range c.lang {
			if c.check(s) != nil {
				t.Fatalf("%s: the listed language holds %q, which its matcher refuses", c.name, s)
			}
			if minTokens(v, s) <= 6 && !reached[s] {
				t.Fatalf("%s: %q is in the language and spellable in %d tokens, but unreachable", c.name, s, minTokens(v, s))
			}
		}
		t.Logf("%s: %d texts reachable", c.name, len(reached))
	}
}

// minTokens is the fewest tokens of v whose pieces spell s (a large number
// when none do).
func minTokens(v *engine.Vocabulary, s string) int {
	const inf = 1 << 20
	best := make([]int, len(s)+1)
	for i := range best {
		best[i] = inf
	}
	best[0] = 0
	pieces := map[string]bool{}
	maxLen := 0
	for id := range int32(v.Size()) {
		if p := v.Piece(id); p != "" && !v.IsEOG(id) {
			pieces[p] = true
			maxLen = max(maxLen, len(p))
		}
	}
	for i := range len(s) {
		if best[i] == inf {
			continue
		}
		for l := 1; l <= maxLen && i+l <= len(s); l++ {
			if pieces[s[i:i+l]] && best[i]+1 < best[i+l] {
				best[i+l] = best[i] + 1
			}
		}
	}
	return best[len(s)]
}
