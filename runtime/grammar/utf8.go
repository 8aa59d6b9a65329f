package grammar

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Character classes are matched on bytes: each class becomes the set of
// UTF-8 byte strings of its code points, as elements over byte sets and
// helper rules (a small deterministic automaton). The matcher then never
// decodes UTF-8 or carries partial code points, and a token ending inside a
// character is handled like any other position. Only valid UTF-8 is
// generated (no surrogates, no overlong forms, no NUL — llama.cpp never
// generates NUL either, and decodes some invalid sequences as code points).

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }
func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s *byteSet) addRange(lo, hi int) {
	for b := lo; b <= hi; b++ {
		s.add(byte(b))
	}
}

// cpRange is an inclusive range of code points.
type cpRange struct{ lo, hi uint32 }

const maxRune = 0x10FFFF

// normalizeClass returns the sorted, merged code points of a class, with
// negation applied against [U+0001, U+10FFFF] and surrogates and NUL
// removed.
func normalizeClass(rs []runeRange, neg bool) []cpRange {
	var out []cpRange
	for _, r := range rs {
		out = append(out, cpRange{uint32(r.lo), uint32(r.hi)})
	}
	out = mergeRanges(out)
	if neg {
		var comp []cpRange
		next := uint32(0)
		for _, r := range out {
			if r.lo > next {
				comp = append(comp, cpRange{next, r.lo - 1})
			}
			next = r.hi + 1
		}
		if next <= maxRune {
			comp = append(comp, cpRange{next, maxRune})
		}
		out = comp
	}
	out = subtractRange(out, 0, 0)
	out = subtractRange(out, 0xD800, 0xDFFF)
	return out
}

func mergeRanges(rs []cpRange) []cpRange {
	slices.SortFunc(rs, func(a, b cpRange) int {
		if a.lo != b.lo {
			if a.lo < b.lo {
				return -1
			}
			return 1
		}
		return 0
	})
	var out []cpRange
	for _, r := range rs {
		if r.hi > maxRune {
			r.hi = maxRune
		}
		if r.lo > r.hi {
			continue
		}
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

func subtractRange(rs []cpRange, lo, hi uint32) []cpRange {
	var out []cpRange
	for _, r := range rs {
		if r.hi < lo || r.lo > hi {
			out = append(out, r)
			continue
		}
		if r.lo < lo {
			out = append(out, cpRange{r.lo, lo - 1})
		}
		if r.hi > hi {
			out = append(out, cpRange{hi + 1, r.hi})
		}
	}
	return out
}

// window returns the parts of rs (sorted, disjoint) inside [lo, hi],
// shifted down by lo; a binary search finds the first, so a class of many
// ranges costs in proportion to what each window holds.
func window(rs []cpRange, lo, hi uint32) []cpRange {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].hi >= lo })
	var out []cpRange
	for ; i < len(rs) && rs[i].lo <= hi; i++ {
		out = append(out, cpRange{max(rs[i].lo, lo) - lo, min(rs[i].hi, hi) - lo})
	}
	return out
}

func rangesKey(k int, rs []cpRange) string {
	var sb strings.Builder
	sb.WriteString(strconv.Itoa(k))
	for _, r := range rs {
		sb.WriteByte(':')
		sb.WriteString(strconv.FormatUint(uint64(r.lo), 16))
		sb.WriteByte('-')
		sb.WriteString(strconv.FormatUint(uint64(r.hi), 16))
	}
	return sb.String()
}

// utf8Node is a state of a class's byte automaton: k continuation bytes
// remain, and their 6-bit payloads, read as one number below 64^k, must lie
// in set. k = 0 is the accepting state.
type utf8Node struct {
	k   int
	set []cpRange
	key string
}

// utf8Edge is a group of bytes leading from one node to the same next node.
type utf8Edge struct {
	bytes byteSet
	next  utf8Node
}

// rootEdges groups the first bytes of the class's encodings by the state
// they lead to, in byte order of each group's first byte.
func rootEdges(cls []cpRange) []utf8Edge {
	var edges []utf8Edge
	add := func(b int, next utf8Node) {
		for i := range edges {
			if edges[i].next.key == next.key {
				edges[i].bytes.add(byte(b))
				return
			}
		}
		e := utf8Edge{next: next}
		e.bytes.add(byte(b))
		edges = append(edges, e)
	}
	accept := utf8Node{k: 0, key: "0"}
	for b := 1; b < 0x80; b++ {
		if len(window(cls, uint32(b), uint32(b))) > 0 {
			add(b, accept)
		}
	}
	lead := func(b, k int, base, lo, hi uint32) {
		set := window(cls, max(base, lo), min(base+(1<<(6*k))-1, hi))
		if len(set) == 0 {
			return
		}
		if lo > base { // re-base a window that starts past the block start
			for i := range set {
				set[i].lo += lo - base
				set[i].hi += lo - base
			}
		}
		add(b, utf8Node{k: k, set: set, key: rangesKey(k, set)})
	}
	for b := 0xC2; b <= 0xDF; b++ {
		lead(b, 1, uint32(b&0x1F)<<6, 0x80, 0x7FF)
	}
	for b := 0xE0; b <= 0xEF; b++ {
		lead(b, 2, uint32(b&0x0F)<<12, 0x800, 0xFFFF)
	}
	for b := 0xF0; b <= 0xF4; b++ {
		lead(b, 3, uint32(b&0x07)<<18, 0x10000, maxRune)
	}
	return edges
}

// edges groups the continuation bytes of node n by the state they lead to.
func (n utf8Node) edges() []utf8Edge {
	var edges []utf8Edge
	span := uint32(1) << (6 * (n.k - 1))
	for v := range uint32(64) {
		set := window(n.set, v*span, v*span+span-1)
		if len(set) == 0 {
			continue
		}
		next := utf8Node{k: n.k - 1, set: set, key: rangesKey(n.k-1, set)}
		if n.k == 1 {
			next = utf8Node{k: 0, key: "0"}
		}
		b := byte(0x80 | v)
		found := false
		for i := range edges {
			if edges[i].next.key == next.key {
				edges[i].bytes.add(b)
				found = true
				break
			}
		}
		if !found {
			e := utf8Edge{next: next}
			e.bytes.add(b)
			edges = append(edges, e)
		}
	}
	return edges
}
