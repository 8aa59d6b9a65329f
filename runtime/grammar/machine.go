package grammar

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// The machine runs llama.cpp's pushdown recognizer (llama_grammar_advance_stack,
// llama_grammar_accept) over bytes, with everything memoized:
//
//   - A stack is a list of positions: the top is the element to match next
//     (always a byte set or a token element once expanded), the ones below
//     are where to continue when the rule above ends. Stacks are interned as
//     (position, parent stack) pairs, so a stack is an int32 and equal stacks
//     are equal numbers. Stack 0 is the empty stack: the text is complete.
//   - A state is the set of stacks alive after the text so far (the grammar
//     may be ambiguous), interned as a sorted list: again an int32.
//   - The step from a state on a byte is computed once and cached, so
//     walking the vocabulary trie (trie.go) mostly reads cached steps.
//
// Everything grows with the positions a generation visits; a machine past
// Limits.States is replaced by a fresh one holding only the current state
// (matcher.go), and one past twice that fails.

const (
	deadState    = -1 // no stack alive: the text cannot be completed
	unknownState = -2 // step not computed yet
)

type stackNode struct {
	pos    int32 // element position; unused for stack 0
	parent int32
}

type smallStep struct {
	b  byte
	to int32
}

type state struct {
	stacks    []int32 // sorted; 0 means the text may end here
	accept    bool    // stacks contains 0
	done      bool    // stacks is exactly {0}
	tokenTops bool    // some stack has a token element on top
	nsmall    uint8
	small     [4]smallStep
	full      *[256]int32
}

type machine struct {
	p   *program
	lim Limits

	stacks   []stackNode
	stackIdx map[stackNode]int32
	expanded map[int32][]int32 // stack with a reference on top -> stacks with terminals on top
	after    map[int32][]int32 // stack with a terminal on top -> stacks after matching it

	states   []state
	stateIdx map[string]int32
	nfull    int
	fulls    []*[256]int32 // per state: its full step table, or nil (the mask walk's fast lookup)

	mark    []uint32 // per stack: epoch of the last union it joined
	epoch   uint32
	scratch []int32
	keyBuf  []byte

	masks maskCache
	err   error
}

func newMachine(p *program, lim Limits) *machine {
	m := &machine{p: p, lim: lim, stackIdx: map[stackNode]int32{}, expanded: map[int32][]int32{},
		after: map[int32][]int32{}, stateIdx: map[string]int32{}}
	m.stacks = append(m.stacks, stackNode{pos: -1, parent: -1}) // 0: empty
	m.mark = append(m.mark, 0)
	return m
}

// fail records the first bound exceeded; the machine then yields dead states.
func (m *machine) fail(format string, args ...any) {
	if m.err == nil {
		m.err = &Error{Msg: fmt.Sprintf(format, args...)}
	}
}

func (m *machine) stack(pos, parent int32) int32 {
	k := stackNode{pos: pos, parent: parent}
	if id, ok := m.stackIdx[k]; ok {
		return id
	}
	id := int32(len(m.stacks))
	m.stacks = append(m.stacks, k)
	m.mark = append(m.mark, 0)
	m.stackIdx[k] = id
	return id
}

// large reports that the caches are past the soft bound.
func (m *machine) large() bool {
	return len(m.states) > m.lim.States || len(m.stacks) > 8*m.lim.States
}

// overflow reports that the caches are past the hard bound.
func (m *machine) overflow() bool {
	return len(m.states) > 2*m.lim.States || len(m.stacks) > 16*m.lim.States
}

// expand returns the stacks with a terminal (or nothing) on top that stack
// s stands for: references on top are replaced by each alternative of the
// rule, empty alternatives and ended sequences pop to the parent.
func (m *machine) expand(s int32) []int32 {
	if s == 0 {
		return []int32{0}
	}
	top := m.stacks[s].pos
	if m.p.elems[top].kind != kRef {
		return []int32{s}
	}
	if r, ok := m.expanded[s]; ok {
		return r
	}
	parent := m.stacks[s].parent
	rest := parent
	if m.p.elems[top+1].kind != kEnd {
		rest = m.stack(top+1, parent)
	}
	var out []int32
	seen := map[int32]bool{}
	for _, a := range m.p.rules[m.p.elems[top].arg].alts {
		var sub []int32
		if m.p.elems[a].kind == kEnd {
			sub = m.expand(rest)
		} else {
			sub = m.expand(m.stack(a, rest))
		}
		for _, x := range sub {
			if !seen[x] {
				seen[x] = true
				out = append(out, x)
			}
		}
		if len(out) > m.lim.StackSet {
			m.fail("the grammar is too ambiguous: more than %d parse stacks at one position", m.lim.StackSet)
			break
		}
	}
	m.expanded[s] = out
	return out
}

// advance returns the stacks after the terminal on top of s matched.
func (m *machine) advance(s int32) []int32 {
	if r, ok := m.after[s]; ok {
		return r
	}
	top, parent := m.stacks[s].pos, m.stacks[s].parent
	var r []int32
	if m.p.elems[top+1].kind == kEnd {
		r = m.expand(parent)
	} else {
		r = m.expand(m.stack(top+1, parent))
	}
	m.after[s] = r
	return r
}

// union collects stacks without duplicates into m.scratch.
func (m *machine) beginUnion() {
	m.epoch++
	if m.epoch == 0 {
		clear(m.mark)
		m.epoch = 1
	}
	m.scratch = m.scratch[:0]
}

func (m *machine) addAll(ss []int32) {
	for _, x := range ss {
		if int(x) >= len(m.mark) {
			m.mark = append(m.mark, make([]uint32, int(x)+1-len(m.mark))...)
		}
		if m.mark[x] != m.epoch {
			m.mark[x] = m.epoch
			m.scratch = append(m.scratch, x)
		}
	}
}

// endUnion interns the collected stacks as a state.
func (m *machine) endUnion() int32 {
	if len(m.scratch) == 0 {
		return deadState
	}
	if len(m.scratch) > m.lim.StackSet {
		m.fail("the grammar is too ambiguous: more than %d parse stacks at one position", m.lim.StackSet)
		return deadState
	}
	slices.Sort(m.scratch)
	m.keyBuf = m.keyBuf[:0]
	for _, x := range m.scratch {
		m.keyBuf = binary.LittleEndian.AppendUint32(m.keyBuf, uint32(x))
	}
	if id, ok := m.stateIdx[string(m.keyBuf)]; ok {
		return id
	}
	if m.overflow() {
		m.fail("matching needs more than %d parser states (the grammar is too large or too ambiguous)", 2*m.lim.States)
		return deadState
	}
	st := state{stacks: slices.Clone(m.scratch)}
	for _, x := range st.stacks {
		if x == 0 {
			st.accept = true
			continue
		}
		if k := m.p.elems[m.stacks[x].pos].kind; k == kToken || k == kTokenNot {
			st.tokenTops = true
		}
	}
	st.done = st.accept && len(st.stacks) == 1
	id := int32(len(m.states))
	m.states = append(m.states, st)
	m.fulls = append(m.fulls, nil)
	m.stateIdx[string(m.keyBuf)] = id
	return id
}

// stateOf interns the expansion of the given stacks.
func (m *machine) stateOf(stacks []int32) int32 {
	var all []int32
	for _, s := range stacks {
		all = append(all, m.expand(s)...)
	}
	m.beginUnion()
	m.addAll(all)
	return m.endUnion()
}

// next is the state after byte b from state st (deadState when no stack
// takes b).
func (m *machine) next(st int32, b byte) int32 {
	s := &m.states[st]
	if s.full != nil {
		if to := s.full[b]; to != unknownState {
			return to
		}
	} else {
		for i := range s.nsmall {
			if s.small[i].b == b {
				return s.small[i].to
			}
		}
	}
	to := m.step(st, b)
	s = &m.states[st] // step may have grown m.states
	switch {
	case s.full != nil:
		s.full[b] = to
	case int(s.nsmall) < len(s.small):
		s.small[s.nsmall] = smallStep{b: b, to: to}
		s.nsmall++
	case m.nfull < m.lim.States/16:
		s.full = new([256]int32)
		for i := range s.full {
			s.full[i] = unknownState
		}
		for _, e := range s.small {
			s.full[e.b] = e.to
		}
		s.full[b] = to
		m.fulls[st] = s.full
		m.nfull++
	}
	return to
}

func (m *machine) step(st int32, b byte) int32 {
	m.beginUnion()
	for _, x := range m.states[st].stacks {
		if x == 0 {
			continue
		}
		e := m.p.elems[m.stacks[x].pos]
		if e.kind == kBytes && m.p.sets[e.arg].has(b) {
			m.addAll(m.advance(x))
		}
	}
	return m.endUnion()
}

// walk is the state after the bytes of piece from st.
func (m *machine) walk(st int32, piece string) int32 {
	for i := 0; i < len(piece) && st >= 0; i++ {
		st = m.next(st, piece[i])
	}
	return st
}

// tokenStep is the state after token id from st through the stacks with a
// token element on top (deadState when none takes it). ids holds the
// matcher's resolved token references; eog says whether id ends generation
// (negated references never match those).
func (m *machine) tokenStep(st int32, id int32, eog bool, ids []int32) int32 {
	if !m.states[st].tokenTops {
		return deadState
	}
	m.beginUnion()
	for _, x := range m.states[st].stacks {
		if x == 0 {
			continue
		}
		e := m.p.elems[m.stacks[x].pos]
		switch {
		case e.kind == kToken && ids[e.arg] == id,
			e.kind == kTokenNot && ids[e.arg] != id && !eog:
			m.addAll(m.advance(x))
		}
	}
	return m.endUnion()
}

// merge is the union of two states (either may be dead).
func (m *machine) merge(a, b int32) int32 {
	switch {
	case a < 0:
		return b
	case b < 0 || a == b:
		return a
	}
	m.beginUnion()
	m.addAll(m.states[a].stacks)
	m.addAll(m.states[b].stacks)
	return m.endUnion()
}

// positions returns the stacks of st as position lists, top first, so a
// fresh machine can rebuild the state.
func (m *machine) positions(st int32) [][]int32 {
	var out [][]int32
	for _, x := range m.states[st].stacks {
		var ps []int32
		for ; x != 0; x = m.stacks[x].parent {
			ps = append(ps, m.stacks[x].pos)
		}
		out = append(out, ps)
	}
	return out
}

// rebuild interns stacks given as position lists (top first) as a state.
func (m *machine) rebuild(stacks [][]int32) int32 {
	var ids []int32
	for _, ps := range stacks {
		s := int32(0)
		for i := len(ps) - 1; i >= 0; i-- {
			s = m.stack(ps[i], s)
		}
		ids = append(ids, s)
	}
	m.beginUnion()
	m.addAll(ids)
	return m.endUnion()
}

// start is the initial state: the root rule's alternatives.
func (m *machine) start() int32 {
	var tops []int32
	for _, a := range m.p.rules[m.p.root].alts {
		if m.p.elems[a].kind == kEnd {
			tops = append(tops, 0)
		} else {
			tops = append(tops, m.stack(a, 0))
		}
	}
	return m.stateOf(tops)
}
