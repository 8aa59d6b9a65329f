package grammar

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The compiled form follows llama.cpp's (llama_grammar_rules): every rule
// is a list of alternatives, each a run of elements closed by an end
// element, all in one flat array, so that a parse position is an index.
// Repetitions are rewritten as llama.cpp's parser does (S{m,n} is m copies
// of S then n-m nested optional helper rules; S{m,} is m copies then
// S' ::= S S' | ), groups of several alternatives become helper rules, and
// character classes become byte-level elements (utf8.go). The element set is
// therefore: a byte set, a rule reference, a token, a negated token, end.

type elemKind uint8

const (
	kEnd      elemKind = iota // end of an alternative
	kBytes                    // one byte in sets[arg]
	kRef                      // rule arg
	kToken                    // the token tokens[arg]
	kTokenNot                 // any token but tokens[arg] (end-of-generation tokens excluded)
)

type elem struct {
	kind elemKind
	arg  int32
}

// tokenRef is a grammar's reference to one token, by id or by text.
type tokenRef struct {
	id   int32 // -1: by text
	text string
}

type progRule struct {
	name string
	user int     // index of the user rule it was generated for
	alts []int32 // start positions in elems
}

type program struct {
	elems  []elem
	rules  []progRule
	sets   []byteSet
	tokens []tokenRef
	root   int32
}

type compiler struct {
	lim      Limits
	tree     *syntaxTree
	alts     [][][]elem // per rule: alternatives (before flattening)
	rules    []progRule
	nelems   int
	sets     []byteSet
	setIndex map[byteSet]int32
	tokens   []tokenRef
	classes  map[string]int32 // normalized class -> helper rule (multi-path classes)
	u8rules  map[string]int32 // automaton node -> helper rule
	user     int              // user rule being compiled
	gen      map[int]int      // generated helper count per user rule
}

func compile(tree *syntaxTree, lim Limits) (*program, error) {
	lim = lim.withDefaults()
	c := &compiler{lim: lim, tree: tree, setIndex: map[byteSet]int32{}, classes: map[string]int32{},
		u8rules: map[string]int32{}, gen: map[int]int{}}
	root, ok := tree.index["root"]
	if !ok {
		return nil, &Error{Msg: "no root rule (the start rule must be called root)"}
	}
	// User rules keep their indexes; helper rules follow.
	for i, r := range tree.rules {
		c.rules = append(c.rules, progRule{name: r.name, user: i})
		c.alts = append(c.alts, nil)
	}
	for i, r := range tree.rules {
		c.user = i
		var alts [][]elem
		for _, a := range r.body.items {
			seq, err := c.emit(a, nil)
			if err != nil {
				return nil, err
			}
			alts = append(alts, seq)
			if err := c.count(len(seq) + 1); err != nil {
				return nil, err
			}
		}
		c.alts[i] = alts
	}
	p := &program{sets: c.sets, tokens: c.tokens, root: int32(root)}
	p.elems = make([]elem, 0, c.nelems)
	for i, alts := range c.alts {
		rule := c.rules[i]
		for _, a := range alts {
			rule.alts = append(rule.alts, int32(len(p.elems)))
			p.elems = append(p.elems, a...)
			p.elems = append(p.elems, elem{kind: kEnd})
		}
		p.rules = append(p.rules, rule)
	}
	if err := p.checkLeftRecursion(); err != nil {
		return nil, err
	}
	return p, nil
}

func (c *compiler) count(n int) error {
	c.nelems += n
	if c.nelems > c.lim.Elements {
		return &Error{Rule: c.tree.rules[c.user].name, Msg: fmt.Sprintf("grammar expands to more than %d elements (repetitions and character classes are expanded)", c.lim.Elements)}
	}
	return nil
}

// newRule adds a helper rule for the user rule being compiled, named like
// llama.cpp's generated symbols (name_N).
func (c *compiler) newRule(alts [][]elem) (int32, error) {
	if len(c.rules) >= c.lim.Rules {
		return 0, &Error{Rule: c.tree.rules[c.user].name, Msg: fmt.Sprintf("grammar expands to more than %d rules", c.lim.Rules)}
	}
	n := 0
	for _, a := range alts {
		n += len(a) + 1
	}
	if err := c.count(n); err != nil {
		return 0, err
	}
	c.gen[c.user]++
	name := c.tree.rules[c.user].name + "_" + strconv.Itoa(c.gen[c.user])
	c.rules = append(c.rules, progRule{name: name, user: c.user})
	c.alts = append(c.alts, alts)
	return int32(len(c.rules) - 1), nil
}

func (c *compiler) set(s byteSet) elem {
	i, ok := c.setIndex[s]
	if !ok {
		i = int32(len(c.sets))
		c.sets = append(c.sets, s)
		c.setIndex[s] = i
	}
	return elem{kind: kBytes, arg: i}
}

// emit appends the elements matching e to out.
func (c *compiler) emit(e *expr, out []elem) ([]elem, error) {
	var err error
	switch e.kind {
	case xSeq:
		for _, it := range e.items {
			if out, err = c.emit(it, out); err != nil {
				return nil, err
			}
		}
	case xAlt:
		if len(e.items) == 1 {
			return c.emit(e.items[0], out)
		}
		var alts [][]elem
		for _, a := range e.items {
			seq, err := c.emit(a, nil)
			if err != nil {
				return nil, err
			}
			alts = append(alts, seq)
		}
		r, err := c.newRule(alts)
		if err != nil {
			return nil, err
		}
		out = append(out, elem{kind: kRef, arg: r})
	case xLit:
		var buf [utf8.UTFMax]byte
		for _, r := range e.runes {
			n := utf8.EncodeRune(buf[:], r)
			for _, b := range buf[:n] {
				var s byteSet
				s.add(b)
				out = append(out, c.set(s))
			}
		}
	case xClass:
		return c.emitClass(normalizeClass(e.ranges, e.neg), out)
	case xAny:
		return c.emitClass(normalizeClass(nil, true), out)
	case xRef:
		i, ok := c.tree.index[e.name]
		if !ok {
			return nil, &SyntaxError{Line: e.line, Col: e.col, Msg: fmt.Sprintf("undefined rule %q", e.name)}
		}
		out = append(out, elem{kind: kRef, arg: int32(i)})
	case xToken:
		kind := kToken
		if e.neg {
			kind = kTokenNot
		}
		c.tokens = append(c.tokens, tokenRef{id: e.tokenID, text: e.name})
		out = append(out, elem{kind: kind, arg: int32(len(c.tokens) - 1)})
	case xRepeat:
		return c.emitRepeat(e, out)
	default:
		return nil, fmt.Errorf("grammar: unknown expression kind %d", e.kind) // programmer error
	}
	return out, nil
}

func (c *compiler) emitRepeat(e *expr, out []elem) ([]elem, error) {
	body, err := c.emit(e.items[0], nil)
	if err != nil {
		return nil, err
	}
	if e.min > 0 {
		if err := c.count(len(body) * (e.min - 1)); err != nil {
			return nil, err
		}
		for range e.min {
			out = append(out, body...)
		}
	}
	if e.max < 0 {
		// S' ::= S S' | (the reference to itself is filled in below)
		id := int32(len(c.rules))
		rec := append(append([]elem(nil), body...), elem{kind: kRef, arg: id})
		r, err := c.newRule([][]elem{rec, nil})
		if err != nil {
			return nil, err
		}
		return append(out, elem{kind: kRef, arg: r}), nil
	}
	last := int32(-1)
	for i := range e.max - e.min {
		alt := append([]elem(nil), body...)
		if i > 0 {
			alt = append(alt, elem{kind: kRef, arg: last})
		}
		if last, err = c.newRule([][]elem{alt, nil}); err != nil {
			return nil, err
		}
	}
	if last >= 0 {
		out = append(out, elem{kind: kRef, arg: last})
	}
	return out, nil
}

// emitClass appends the byte-level form of a normalized class: one byte
// set when every member is one byte, a chain of byte sets when the
// automaton never branches, or a reference to a helper rule per branching
// automaton state.
func (c *compiler) emitClass(cls []cpRange, out []elem) ([]elem, error) {
	edges := rootEdges(cls)
	switch len(edges) {
	case 0:
		return append(out, c.set(byteSet{})), nil // matches nothing
	case 1:
		out = append(out, c.set(edges[0].bytes))
		return c.emitNode(edges[0].next, out)
	}
	key := rangesKey(-1, cls)
	r, ok := c.classes[key]
	if !ok {
		alts, err := c.edgeAlts(edges)
		if err != nil {
			return nil, err
		}
		if r, err = c.newRule(alts); err != nil {
			return nil, err
		}
		c.classes[key] = r
	}
	return append(out, elem{kind: kRef, arg: r}), nil
}

func (c *compiler) edgeAlts(edges []utf8Edge) ([][]elem, error) {
	var alts [][]elem
	for _, e := range edges {
		alt, err := c.emitNode(e.next, []elem{c.set(e.bytes)})
		if err != nil {
			return nil, err
		}
		alts = append(alts, alt)
	}
	return alts, nil
}

// emitNode appends the elements matching the rest of a character from
// automaton state n.
func (c *compiler) emitNode(n utf8Node, out []elem) ([]elem, error) {
	if n.k == 0 {
		return out, nil
	}
	edges := n.edges()
	if len(edges) == 1 {
		out = append(out, c.set(edges[0].bytes))
		return c.emitNode(edges[0].next, out)
	}
	r, ok := c.u8rules[n.key]
	if !ok {
		alts, err := c.edgeAlts(edges)
		if err != nil {
			return nil, err
		}
		if r, err = c.newRule(alts); err != nil {
			return nil, err
		}
		c.u8rules[n.key] = r
	}
	return append(out, elem{kind: kRef, arg: r}), nil
}

// nullable computes which rules can match the empty string, in time
// linear in the grammar: an alternative made only of references becomes
// nullable when its last non-nullable reference does.
func (p *program) nullable() []bool {
	null := make([]bool, len(p.rules))
	type alt struct {
		rule    int32
		pending int
	}
	var alts []alt
	uses := make([][]int32, len(p.rules)) // rule -> alternatives referring to it (once per reference)
	var queue []int32
	for i, r := range p.rules {
		for _, a := range r.alts {
			id := int32(len(alts))
			n, terminal := 0, false
			for pos := a; p.elems[pos].kind != kEnd; pos++ {
				if e := p.elems[pos]; e.kind == kRef {
					uses[e.arg] = append(uses[e.arg], id)
					n++
				} else {
					terminal = true
				}
			}
			if terminal {
				n = -1 // never nullable; counting down never reaches 0
			}
			alts = append(alts, alt{rule: int32(i), pending: n})
			if n == 0 && !null[i] {
				null[i] = true
				queue = append(queue, int32(i))
			}
		}
	}
	for len(queue) > 0 {
		r := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, a := range uses[r] {
			alts[a].pending--
			if owner := alts[a].rule; alts[a].pending == 0 && !null[owner] {
				null[owner] = true
				queue = append(queue, owner)
			}
		}
	}
	return null
}

// checkLeftRecursion refuses a rule that can reach itself without
// consuming input, as llama.cpp does (llama_grammar_detect_left_recursion;
// here nullability is computed exactly, through any chain of rules).
func (p *program) checkLeftRecursion() error {
	null := p.nullable()
	// Edges: rule -> rules it may start with.
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(p.rules))
	type frame struct {
		rule int32
		alt  int
		pos  int32
	}
	for start := range p.rules {
		if color[start] != white {
			continue
		}
		stack := []frame{{rule: int32(start), alt: 0, pos: -1}}
		color[start] = grey
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			r := p.rules[f.rule]
			// Advance to the next leftmost reference of this rule.
			next := int32(-1)
			for next < 0 && f.alt < len(r.alts) {
				if f.pos < 0 {
					f.pos = r.alts[f.alt]
				} else {
					e := p.elems[f.pos]
					if e.kind == kRef && null[e.arg] {
						f.pos++
					} else {
						f.alt++
						f.pos = -1
						continue
					}
				}
				if e := p.elems[f.pos]; e.kind == kRef {
					next = e.arg
				} else {
					f.alt++
					f.pos = -1
				}
			}
			if next < 0 {
				color[f.rule] = black
				stack = stack[:len(stack)-1]
				continue
			}
			switch color[next] {
			case grey:
				return p.leftRecursionError(next)
			case white:
				color[next] = grey
				stack = append(stack, frame{rule: next, pos: -1})
			}
		}
	}
	return nil
}

func (p *program) leftRecursionError(r int32) error {
	name := p.rules[r].name
	msg := "left recursion: the rule can reach itself without consuming input (llama.cpp refuses such grammars too); rewrite it right-recursively"
	if p.rules[r].user != int(r) {
		msg = fmt.Sprintf("left recursion through %s: a repetition or group can reach itself without consuming input (e.g. a * of something that can be empty)", name)
		name = p.rules[p.rules[r].user].name
	}
	return &Error{Rule: name, Msg: msg}
}
