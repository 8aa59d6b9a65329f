package tokenizer

import (
	"context"
	"slices"
)

// matcher finds special tokens in text in time linear in the text, whatever the number of special tokens
// and of their occurrences.
//
// Semantics: leftmost-longest, non-overlapping — scanning left to right, the match that starts first wins,
// the longest one among those starting there, and the scan resumes after it. This is what Hugging Face
// tokenizers' AddedVocabulary does (an Aho-Corasick automaton with MatchKind::LeftmostLongest). llama.cpp's
// tokenizer_st_partition instead takes each special token in order of decreasing length and splits every
// occurrence of it out of the remaining text; the two agree unless a suffix of one special token is a prefix
// of another and both occur overlapped in the text (Qwen's special tokens all start with '<' and end with
// '>', and none contains another, so for them the two are the same; TestQwenSpecialsDoNotOverlap checks it).
//
// Leftmost-longest is a greedy scan over L(s), the length of the longest special token that starts at s.
// L(s) for every s comes from one right-to-left pass of an Aho-Corasick automaton built on the reversed
// token texts: after reading text[s:] backwards, the automaton's state is the longest suffix of the
// reversed text read (a prefix of text[s:]) that is a trie node, and the longest reversed token ending there
// is the state's own token or its dictionary-suffix link. That is O(1) per byte after construction, which is
// linear in the total length of the tokens (bounded by MaxSpecialBytes).
type matcher struct {
	// Trie of the reversed token texts; node 0 is the root. The children of a node are contiguous, sorted by
	// their byte: first[n] .. first[n]+count[n]-1.
	first []int32
	count []uint16
	edge  []byte  // the byte on the edge into a node
	fail  []int32 // longest proper suffix of the node's string that is a node
	out   []int32 // token id of the longest token that is a suffix of the node's string (itself or via fail), or -1
	root  [256]int32
	// start marks bytes that end some token: the scan leaves the root only on them.
	start  [256]bool
	tokens []string // the vocabulary, for the length of a matched token
}

// newMatcher builds the matcher of the tokens whose type satisfies want. Returns nil when there are none.
func newMatcher(t *Tokenizer, want func(Type) bool) *matcher {
	var ids []int32
	for i, typ := range t.types {
		if want(typ) {
			ids = append(ids, int32(i))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	// Build the trie in breadth-first order straight from the reversed texts sorted lexicographically: the
	// children of each node then come out contiguous and sorted. Each level is a list of groups (a node and
	// the range of sorted strings below it).
	rev := make([]string, len(ids))
	byRev := make(map[string]int32, len(ids))
	for i, id := range ids {
		rev[i] = reverse(t.tokens[id])
		byRev[rev[i]] = id
	}
	slices.Sort(rev)
	m := &matcher{tokens: t.tokens}
	m.newNode(0)
	m.out[0] = -1
	type group struct {
		node   int32
		lo, hi int // rev[lo:hi] all have the node's string as prefix
	}
	level := []group{{0, 0, len(rev)}}
	for depth := 0; len(level) > 0; depth++ {
		var nextLevel []group
		for _, g := range level {
			lo := g.lo
			// The string equal to the node's own text sorts first in its range; it ends here.
			if lo < g.hi && len(rev[lo]) == depth {
				m.out[g.node] = byRev[rev[lo]]
				lo++
			}
			m.first[g.node] = int32(len(m.edge))
			for lo < g.hi {
				b := rev[lo][depth]
				hi := lo + 1
				for hi < g.hi && rev[hi][depth] == b {
					hi++
				}
				child := m.newNode(b)
				m.count[g.node]++
				nextLevel = append(nextLevel, group{child, lo, hi})
				lo = hi
			}
		}
		level = nextLevel
	}
	// Failure and output links, breadth first (node numbers are in BFS order).
	for b := range 256 {
		m.root[b] = 0
	}
	for c := m.first[0]; c < m.first[0]+int32(m.count[0]); c++ {
		m.root[m.edge[c]] = c
		m.start[m.edge[c]] = true
	}
	for n := int32(1); n < int32(len(m.edge)); n++ {
		for c := m.first[n]; c < m.first[n]+int32(m.count[n]); c++ {
			f := m.fail[n]
			for {
				if g, ok := m.child(f, m.edge[c]); ok {
					m.fail[c] = g
					break
				}
				if f == 0 {
					m.fail[c] = 0
					break
				}
				f = m.fail[f]
			}
		}
		if m.out[n] < 0 {
			m.out[n] = m.out[m.fail[n]]
		}
	}
	return m
}

func (m *matcher) newNode(b byte) int32 {
	m.first = append(m.first, 0)
	m.count = append(m.count, 0)
	m.edge = append(m.edge, b)
	m.fail = append(m.fail, 0)
	m.out = append(m.out, -1)
	return int32(len(m.edge) - 1)
}

// child returns the child of node n on byte b.
func (m *matcher) child(n int32, b byte) (int32, bool) {
	if n == 0 {
		c := m.root[b]
		return c, c != 0
	}
	lo, hi := m.first[n], m.first[n]+int32(m.count[n])
	for lo < hi {
		mid := int32(uint32(lo+hi) >> 1)
		if m.edge[mid] < b {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < m.first[n]+int32(m.count[n]) && m.edge[lo] == b
}

func reverse(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

// span is a piece of the text: a special token (id >= 0) or text to pre-tokenize (id < 0).
type span struct {
	start, end int
	id         int32
}

// checkEvery is how many bytes of text the scans process between checks of the context.
const checkEvery = 64 << 10

// split cuts text into special tokens and the text between them, in order, and calls fn with each span.
func (m *matcher) split(ctx context.Context, text string, fn func(span) error) error {
	if m == nil {
		if text == "" {
			return nil
		}
		return fn(span{0, len(text), -1})
	}
	// Right to left: for each start s, the longest token starting there. Only starts with a match are kept.
	type hit struct{ start, id int32 } // text is shorter than 2 GiB (Encode checks)
	var hits []hit
	state := int32(0)
	for s := len(text) - 1; s >= 0; s-- {
		if s%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		b := text[s]
		if state == 0 && !m.start[b] {
			continue
		}
		for {
			if c, ok := m.child(state, b); ok {
				state = c
				break
			}
			if state == 0 {
				break
			}
			state = m.fail[state]
		}
		if id := m.out[state]; id >= 0 {
			hits = append(hits, hit{int32(s), id})
		}
	}
	// Left to right, greedy: the first match at or after the end of the previous one.
	pos := 0
	for i := len(hits) - 1; i >= 0; i-- {
		h := hits[i]
		start := int(h.start)
		if start < pos {
			continue
		}
		if start > pos {
			if err := fn(span{pos, start, -1}); err != nil {
				return err
			}
		}
		pos = start + len(m.tokens[h.id])
		if err := fn(span{start, pos, h.id}); err != nil {
			return err
		}
	}
	if pos < len(text) {
		return fn(span{pos, len(text), -1})
	}
	return nil
}
