package grammar

import (
	"errors"
	"fmt"

	"github.com/phonellm/phonellm/runtime/engine"
)

// Grammar is a compiled GBNF grammar: an engine.Constraint. It is immutable
// and safe for concurrent use; each generation gets its own Matcher.
type Grammar struct {
	src  string
	prog *program
	lim  Limits
}

var _ engine.Constraint = (*Grammar)(nil)

// Parse compiles a GBNF grammar (llama.cpp's format) with default limits.
func Parse(src string) (*Grammar, error) { return ParseLimits(src, Limits{}) }

// ParseLimits compiles a GBNF grammar within lim.
func ParseLimits(src string, lim Limits) (*Grammar, error) {
	lim = lim.withDefaults()
	tree, err := parseGBNF(src, lim)
	if err != nil {
		return nil, err
	}
	prog, err := compile(tree, lim)
	if err != nil {
		return nil, err
	}
	return &Grammar{src: src, prog: prog, lim: lim}, nil
}

// String returns the grammar's GBNF source.
func (g *Grammar) String() string { return g.src }

// NewMatcher implements engine.Constraint. It resolves the grammar's token
// references against v (an error names a reference v lacks) and builds v's
// token trie on first use.
func (g *Grammar) NewMatcher(v *engine.Vocabulary) (engine.Matcher, error) {
	m, err := g.matcher(v)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (g *Grammar) matcher(v *engine.Vocabulary) (*Matcher, error) {
	ids := make([]int32, len(g.prog.tokens))
	for i, ref := range g.prog.tokens {
		if ref.id >= 0 {
			if int(ref.id) >= v.Size() {
				return nil, &Error{Msg: fmt.Sprintf("token reference <[%d]> outside the model's vocabulary of %d tokens", ref.id, v.Size())}
			}
			ids[i] = ref.id
			continue
		}
		id, err := lookupToken(v, ref.text)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	mc := newMachine(g.prog, g.lim)
	m := &Matcher{g: g, v: v, trie: vocabTrie(v), ids: ids, m: mc}
	m.st = mc.start()
	if mc.err != nil {
		return nil, mc.err
	}
	if m.st < 0 {
		return nil, &Error{Rule: "root", Msg: "matches nothing"}
	}
	return m, nil
}

type textIndexKey struct{}

// lookupToken finds the one token whose text is text (llama.cpp tokenizes
// it and requires exactly one token; an exact vocabulary entry is the same
// for the special tokens such references name). The index of token texts
// is built once per vocabulary, on the first grammar that needs it.
func lookupToken(v *engine.Vocabulary, text string) (int32, error) {
	index := v.Derived(textIndexKey{}, func(v *engine.Vocabulary) any {
		ix := make(map[string]int32, v.Size())
		for i := range int32(v.Size()) {
			t, _ := v.Token(i)
			if _, dup := ix[t.Text]; dup {
				ix[t.Text] = -1 // ambiguous
			} else {
				ix[t.Text] = i
			}
		}
		return ix
	}).(map[string]int32)
	id, ok := index[text]
	switch {
	case !ok:
		return 0, &Error{Msg: fmt.Sprintf("token reference %s: the model's vocabulary has no such token", text)}
	case id < 0:
		return 0, &Error{Msg: fmt.Sprintf("token reference %s is ambiguous: several tokens have that text", text)}
	}
	return id, nil
}

// Matcher follows one generation through a Grammar (engine.Matcher).
type Matcher struct {
	g    *Grammar
	v    *engine.Vocabulary
	trie *trie
	ids  []int32
	m    *machine
	st   int32
	err  error
	walk []int32 // per trie depth: state (mask walks)
}

var _ engine.Matcher = (*Matcher)(nil)

// ErrNotAllowed is wrapped by Accept's error for a token the grammar does
// not allow at that point.
var ErrNotAllowed = errors.New("token not allowed by the grammar here")

// refresh replaces a machine past its soft bound with a fresh one holding
// only the current state; clones keep the old one.
func (mt *Matcher) refresh() {
	if mt.err != nil || !mt.m.large() {
		return
	}
	pos := mt.m.positions(mt.st)
	fresh := newMachine(mt.g.prog, mt.g.lim)
	st := fresh.rebuild(pos)
	if fresh.err != nil || st < 0 {
		mt.err = fresh.err
		if mt.err == nil {
			mt.err = &Error{Msg: "internal: state lost while renewing the matcher's cache"}
		}
		return
	}
	mt.m, mt.st = fresh, st
}

// next computes the state after token t (deadState when not allowed).
func (mt *Matcher) next(t int32) int32 {
	if mt.v.IsEOG(t) {
		if mt.m.states[mt.st].accept {
			return mt.st
		}
		return deadState
	}
	to := int32(deadState)
	if piece, ok := inTrie(mt.v, t); ok {
		to = mt.m.walk(mt.st, piece)
	}
	if mt.m.states[mt.st].tokenTops {
		to = mt.m.merge(to, mt.m.tokenStep(mt.st, t, false, mt.ids))
	}
	return to
}

// Allows implements engine.Matcher.
func (mt *Matcher) Allows(t int32) bool {
	mt.refresh()
	if mt.err != nil || t < 0 || int(t) >= mt.v.Size() {
		return false
	}
	to := mt.next(t)
	if mt.m.err != nil {
		mt.err = mt.m.err
		return false
	}
	return to >= 0
}

// Accept implements engine.Matcher.
func (mt *Matcher) Accept(t int32) error {
	mt.refresh()
	if mt.err != nil {
		return mt.err
	}
	if t < 0 || int(t) >= mt.v.Size() {
		return fmt.Errorf("grammar: token %d outside the vocabulary of %d: %w", t, mt.v.Size(), ErrNotAllowed)
	}
	to := mt.next(t)
	if mt.m.err != nil {
		mt.err = mt.m.err
		return mt.err
	}
	if to < 0 {
		return fmt.Errorf("grammar: token %d (%q): %w", t, mt.v.Piece(t), ErrNotAllowed)
	}
	mt.st = to
	return nil
}

// Done implements engine.Matcher.
func (mt *Matcher) Done() bool { return mt.err == nil && mt.m.states[mt.st].done }

// CanEnd reports whether the text so far is a complete match (an
// end-of-generation token is allowed).
func (mt *Matcher) CanEnd() bool { return mt.err == nil && mt.m.states[mt.st].accept }

// Err returns the error that stopped the matcher (a bound exceeded).
func (mt *Matcher) Err() error { return mt.err }

// Clone implements engine.Matcher.
func (mt *Matcher) Clone() engine.Matcher {
	c := *mt
	c.walk = nil
	return &c
}

// Allowed implements engine.Matcher: one pass over the vocabulary trie from
// the current state, skipping every subtree the grammar rejects, then the
// grammar's token references and the end-of-generation tokens. Masks of
// recently seen states are cached.
func (mt *Matcher) Allowed(mask *engine.TokenMask) (int, error) {
	mt.refresh()
	if mt.err != nil {
		return 0, mt.err
	}
	if mask.Len() != mt.v.Size() {
		return 0, fmt.Errorf("grammar: mask for %d tokens, vocabulary has %d", mask.Len(), mt.v.Size())
	}
	if mt.m.masks.get(mt.st, mask) {
		return mask.Count(), nil
	}
	if err := mt.computeMask(mask); err != nil {
		return 0, err
	}
	mt.m.masks.put(mt.st, mask)
	return mask.Count(), nil
}

// computeMask fills mask for the current state without the cache.
func (mt *Matcher) computeMask(mask *engine.TokenMask) error {
	mask.Clear()
	words := mask.Words()
	m, t := mt.m, mt.trie
	if cap(mt.walk) < t.maxDepth+1 {
		mt.walk = make([]int32, t.maxDepth+1)
	}
	walk := mt.walk[:t.maxDepth+1]
	walk[0] = mt.st
	if !m.states[mt.st].done {
		for i, n := 0, len(t.label); i < n; {
			d := t.depth[i]
			from, b := walk[d-1], t.label[i]
			var to int32 = unknownState
			if f := m.fulls[from]; f != nil {
				to = f[b]
			}
			if to == unknownState {
				to = m.next(from, b)
			}
			if to < 0 {
				i = int(t.skip[i])
				continue
			}
			walk[d] = to
			for _, id := range t.toks[t.tokStart[i]:t.tokStart[i+1]] {
				words[id>>6] |= 1 << (uint(id) & 63)
			}
			i++
		}
	}
	if m.err != nil {
		mt.err = m.err
		return mt.err
	}
	st := m.states[mt.st]
	if st.tokenTops {
		mt.tokenMask(mask)
	}
	if st.accept {
		for _, id := range mt.v.EOG() {
			mask.Set(id)
		}
	}
	return nil
}

// tokenMask adds the tokens the grammar's token elements on top of the
// current stacks allow.
func (mt *Matcher) tokenMask(mask *engine.TokenMask) {
	m := mt.m
	for _, x := range m.states[mt.st].stacks {
		if x == 0 {
			continue
		}
		e := m.p.elems[m.stacks[x].pos]
		switch e.kind {
		case kToken:
			if id := mt.ids[e.arg]; !mt.v.IsEOG(id) {
				mask.Set(id)
			}
		case kTokenNot:
			not := mt.ids[e.arg]
			w := mask.Words()
			for i := range w {
				w[i] = ^uint64(0)
			}
			if r := mask.Len() % 64; r != 0 {
				w[len(w)-1] = 1<<uint(r) - 1
			}
			for _, id := range mt.v.EOG() {
				w[id>>6] &^= 1 << (uint(id) & 63)
			}
			if !mt.v.IsEOG(not) {
				// Put back whatever other stacks allow for it.
				if mt.next(not) < 0 {
					w[not>>6] &^= 1 << (uint(not) & 63)
				}
			}
			return
		}
	}
}

// maskCache keeps the masks of the last few states computed.
type maskCache struct {
	st   [8]int32
	w    [8][]uint64
	n    int
	next int
}

func (c *maskCache) get(st int32, mask *engine.TokenMask) bool {
	for i := range c.n {
		if c.st[i] == st && len(c.w[i]) == len(mask.Words()) {
			copy(mask.Words(), c.w[i])
			return true
		}
	}
	return false
}

func (c *maskCache) put(st int32, mask *engine.TokenMask) {
	i := c.next
	c.next = (c.next + 1) % len(c.st)
	if c.n < len(c.st) {
		c.n++
	}
	c.st[i] = st
	c.w[i] = append(c.w[i][:0], mask.Words()...)
}
