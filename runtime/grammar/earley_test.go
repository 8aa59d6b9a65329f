package grammar

import (
	"testing"
	"unicode/utf8"
)

// earley is the independent matcher of the equivalence tests: a textbook
// Earley recognizer over code points, built straight from the parsed
// syntax tree (repetitions expanded naively, classes kept as code point
// sets) — it shares nothing with the compiled program, the byte automata,
// the stacks or the trie. Code point 0 never matches (as in the engine).
type earley struct {
	prods  [][]esym // production i: its right-hand side
	lhs    []int    // production -> nonterminal
	byLHS  [][]int  // nonterminal -> productions
	null   []bool   // nonterminal may derive ""
	start  int
	nterms int
}

type esym struct {
	nt  int // nonterminal, or -1 for a terminal
	cls *expr
}

func (s esym) matches(r rune) bool {
	if r == 0 {
		return false
	}
	switch s.cls.kind {
	case xAny:
		return true
	case xLit:
		return s.cls.runes[0] == r
	}
	in := false
	for _, rr := range s.cls.ranges {
		if r >= rr.lo && r <= rr.hi {
			in = true
		}
	}
	return in != s.cls.neg
}

func newEarley(t testing.TB, src string) *earley {
	t.Helper()
	tree, err := parseGBNF(src, Limits{})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	e := &earley{}
	e.nterms = len(tree.rules)
	e.byLHS = make([][]int, len(tree.rules))
	var addProd func(nt int, rhs []esym)
	addProd = func(nt int, rhs []esym) {
		for len(e.byLHS) <= nt {
			e.byLHS = append(e.byLHS, nil)
		}
		e.byLHS[nt] = append(e.byLHS[nt], len(e.prods))
		e.prods = append(e.prods, rhs)
		e.lhs = append(e.lhs, nt)
	}
	newNT := func() int { e.nterms++; return e.nterms - 1 }
	var syms func(x *expr) []esym
	syms = func(x *expr) []esym {
		switch x.kind {
		case xSeq:
			var out []esym
			for _, it := range x.items {
				out = append(out, syms(it)...)
			}
			return out
		case xAlt:
			nt := newNT()
			for _, a := range x.items {
				addProd(nt, syms(a))
			}
			return []esym{{nt: nt}}
		case xLit:
			var out []esym
			for _, r := range x.runes {
				out = append(out, esym{nt: -1, cls: &expr{kind: xLit, runes: []rune{r}}})
			}
			return out
		case xClass, xAny:
			return []esym{{nt: -1, cls: x}}
		case xRef:
			return []esym{{nt: tree.index[x.name]}}
		case xRepeat:
			body := syms(x.items[0])
			nt := newNT()
			var base []esym
			for range x.min {
				base = append(base, body...)
			}
			if x.max < 0 {
				loop := newNT()
				addProd(loop, append(append([]esym(nil), body...), esym{nt: loop}))
				addProd(loop, nil)
				addProd(nt, append(base, esym{nt: loop}))
			} else {
				seq := base
				for k := x.min; k <= x.max; k++ {
					addProd(nt, append([]esym(nil), seq...))
					seq = append(seq, body...)
				}
			}
			return []esym{{nt: nt}}
		}
		t.Fatalf("earley: expression kind %d not supported", x.kind)
		return nil
	}
	for i, r := range tree.rules {
		for _, a := range r.body.items {
			addProd(i, syms(a))
		}
	}
	for len(e.byLHS) < e.nterms {
		e.byLHS = append(e.byLHS, nil)
	}
	e.start = tree.index["root"]
	e.null = make([]bool, e.nterms)
	for changed := true; changed; {
		changed = false
		for p, rhs := range e.prods {
			if e.null[e.lhs[p]] {
				continue
			}
			all := true
			for _, s := range rhs {
				if s.nt < 0 || !e.null[s.nt] {
					all = false
					break
				}
			}
			if all {
				e.null[e.lhs[p]], changed = true, true
			}
		}
	}
	return e
}

type eitem struct{ prod, dot, origin int }

// closure completes item set i (predictions and completions).
func (e *earley) closure(sets []map[eitem]bool, i int) {
	var queue []eitem
	add := func(it eitem) {
		if !sets[i][it] {
			sets[i][it] = true
			queue = append(queue, it)
		}
	}
	for it := range sets[i] {
		queue = append(queue, it)
	}
	for len(queue) > 0 {
		it := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		rhs := e.prods[it.prod]
		if it.dot == len(rhs) { // complete
			nt := e.lhs[it.prod]
			for o := range sets[it.origin] {
				if r := e.prods[o.prod]; o.dot < len(r) && r[o.dot].nt == nt {
					add(eitem{o.prod, o.dot + 1, o.origin})
				}
			}
			continue
		}
		if s := rhs[it.dot]; s.nt >= 0 { // predict
			for _, p := range e.byLHS[s.nt] {
				add(eitem{p, 0, i})
			}
			if e.null[s.nt] {
				add(eitem{it.prod, it.dot + 1, it.origin})
			}
		}
	}
}

// scan moves the items of set i over r into a new set i+1.
func (e *earley) scan(sets []map[eitem]bool, i int, r rune) []map[eitem]bool {
	next := map[eitem]bool{}
	for it := range sets[i] {
		if rhs := e.prods[it.prod]; it.dot < len(rhs) && rhs[it.dot].nt < 0 && rhs[it.dot].matches(r) {
			next[eitem{it.prod, it.dot + 1, it.origin}] = true
		}
	}
	return append(sets[:i+1:i+1], next)
}

// chart runs the recognizer over runes and returns the closed item sets;
// a set is empty once the input cannot be continued.
func (e *earley) chart(rs []rune) []map[eitem]bool {
	sets := []map[eitem]bool{{}}
	for _, p := range e.byLHS[e.start] {
		sets[0][eitem{p, 0, 0}] = true
	}
	e.closure(sets, 0)
	return e.extend(sets, rs)
}

// extend continues closed sets (for rs[:len(sets)-1]) over the rest of rs,
// leaving the given sets unchanged.
func (e *earley) extend(sets []map[eitem]bool, rs []rune) []map[eitem]bool {
	for i := len(sets) - 1; i < len(rs); i++ {
		sets = e.scan(sets, i, rs[i])
		if len(sets[i+1]) == 0 {
			for len(sets) < len(rs)+1 {
				sets = append(sets, map[eitem]bool{})
			}
			return sets
		}
		e.closure(sets, i+1)
	}
	return sets
}

// decode splits text into complete runes and a trailing partial sequence.
func decode(text string) ([]rune, []byte) {
	var rs []rune
	b := []byte(text)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			break
		}
		rs = append(rs, r)
		b = b[n:]
	}
	return rs, b
}

// status reports whether text (bytes, maybe ending inside a character) is
// a complete match, and whether it can still be extended or completed.
func (e *earley) status(text string) (complete, viable bool) {
	rs, partial := decode(text)
	return e.statusOf(e.chart(rs), rs, partial)
}

// statusFrom is status for text, reusing the chart of a prefix of it.
func (e *earley) statusFrom(sets []map[eitem]bool, text string) (complete, viable bool) {
	rs, partial := decode(text)
	return e.statusOf(e.extend(sets, rs), rs, partial)
}

func (e *earley) statusOf(sets []map[eitem]bool, rs []rune, b []byte) (complete, viable bool) {
	last := sets[len(rs)]
	if len(last) == 0 {
		return false, false
	}
	if len(b) == 0 {
		for it := range last {
			if it.origin == 0 && it.dot == len(e.prods[it.prod]) && e.lhs[it.prod] == e.start {
				complete = true
			}
		}
		return complete, true
	}
	// A partial character: can some completion of it be scanned next?
	lo, hi, ok := partialRange(b)
	if !ok {
		return false, false
	}
	for it := range last {
		rhs := e.prods[it.prod]
		if it.dot < len(rhs) && rhs[it.dot].nt < 0 && rhs[it.dot].matchesSome(lo, hi) {
			return false, true
		}
	}
	return false, false
}

// partialRange is the code points whose UTF-8 form starts with b (1 to 3
// bytes of an incomplete sequence), from the table of well-formed UTF-8
// (the second byte's range depends on the first).
func partialRange(b []byte) (lo, hi rune, ok bool) {
	n := 0
	second := [2]byte{0x80, 0xBF}
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		n, second = 3, [2]byte{0xA0, 0xBF}
	case c == 0xED:
		n, second = 3, [2]byte{0x80, 0x9F}
	case c >= 0xE1 && c <= 0xEF:
		n = 3
	case c == 0xF0:
		n, second = 4, [2]byte{0x90, 0xBF}
	case c == 0xF4:
		n, second = 4, [2]byte{0x80, 0x8F}
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	default:
		return 0, 0, false
	}
	if len(b) >= n {
		return 0, 0, false
	}
	for i, c := range b[1:] {
		if i == 0 && (c < second[0] || c > second[1]) || c&0xC0 != 0x80 {
			return 0, 0, false
		}
	}
	fill := func(k int) rune {
		full := append([]byte(nil), b...)
		for len(full) < n {
			v := byte(0x80 + k*0x3F)
			if len(full) == 1 {
				v = second[k]
			}
			full = append(full, v)
		}
		r, _ := utf8.DecodeRune(full)
		return r
	}
	return fill(0), fill(1), true
}

// matchesSome reports whether the terminal matches a code point in lo..hi.
func (s esym) matchesSome(lo, hi rune) bool {
	switch s.cls.kind {
	case xAny:
		return true
	case xLit:
		return s.cls.runes[0] >= lo && s.cls.runes[0] <= hi
	}
	if !s.cls.neg {
		for _, r := range s.cls.ranges {
			if r.lo <= hi && r.hi >= lo {
				return true
			}
		}
		return false
	}
	cands := []rune{lo}
	for _, r := range s.cls.ranges {
		if r.hi+1 >= lo && r.hi+1 <= hi {
			cands = append(cands, r.hi+1)
		}
	}
	for _, c := range cands {
		if s.matches(c) {
			return true
		}
	}
	return false
}

func TestEarleySelfCheck(t *testing.T) {
	e := newEarley(t, `root ::= "a" b* | "x"{2,3}
b ::= [0-9] | "(" root ")"`)
	for text, want := range map[string][2]bool{
		"a":       {true, true},
		"a1(a)2":  {true, true},
		"a1(a":    {false, true},
		"xx":      {true, true},
		"xxx":     {true, true},
		"xxxx":    {false, false},
		"b":       {false, false},
		"a(xx)":   {true, true},
		"a(xx)(":  {false, true},
		"a((":     {false, false},
		"":        {false, true},
		"a\u00e9": {false, false},
	} {
		c, v := e.status(text)
		if c != want[0] || v != want[1] {
			t.Errorf("%q: complete %v viable %v, want %v", text, c, v, want)
		}
	}
	e = newEarley(t, `root ::= [^a] "é"`)
	for text, want := range map[string][2]bool{
		"b\xc3":     {false, true},
		"b\xc3\xa9": {true, true},
		"b\xc4":     {false, false},
		"\xe2\x82":  {false, true},
		"a":         {false, false},
	} {
		c, v := e.status(text)
		if c != want[0] || v != want[1] {
			t.Errorf("%q: complete %v viable %v, want %v", text, c, v, want)
		}
	}
}
