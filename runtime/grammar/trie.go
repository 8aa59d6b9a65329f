package grammar

import (
	"slices"
	"strings"

	"github.com/phonellm/phonellm/runtime/engine"
)

// maxPiece bounds the pieces the trie holds; longer tokens (none in real
// vocabularies: Qwen's longest is 256 bytes) are never allowed by
// character rules.
const maxPiece = 1 << 12

// trie is the byte trie of a vocabulary's pieces, flattened in depth-first
// order so that a mask is one forward pass over arrays: node i's parent
// comes before it, its subtree is i..skip[i]-1, and a dead state skips the
// subtree in one jump. End-of-generation tokens and tokens with an empty
// piece (control tokens) are not in it: character rules never allow them.
// One trie per model vocabulary is built on first use and shared by every
// matcher (engine.Vocabulary.Derived).
type trie struct {
	label    []byte   // byte on the edge into node i
	depth    []uint16 // 1 for children of the root
	skip     []int32  // first node after i's subtree
	tokStart []int32  // tokens ending at node i: toks[tokStart[i]:tokStart[i+1]]
	toks     []int32
	maxDepth int
	size     int // vocabulary size
}

type trieKey struct{}

// vocabTrie returns v's shared trie.
func vocabTrie(v *engine.Vocabulary) *trie {
	return v.Derived(trieKey{}, func(v *engine.Vocabulary) any { return buildTrie(v) }).(*trie)
}

// inTrie reports whether token id can be allowed by character rules.
func inTrie(v *engine.Vocabulary, id int32) (string, bool) {
	t, ok := v.Token(id)
	if !ok || t.EOG || t.Piece == "" || len(t.Piece) > maxPiece {
		return "", false
	}
	return t.Piece, true
}

func buildTrie(v *engine.Vocabulary) *trie {
	n := v.Size()
	ids := make([]int32, 0, n)
	for i := range n {
		if _, ok := inTrie(v, int32(i)); ok {
			ids = append(ids, int32(i))
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := strings.Compare(v.Piece(a), v.Piece(b)); c != 0 {
			return c
		}
		return int(a - b)
	})
	t := &trie{size: n}
	var path []int32 // node index at each depth of the previous piece
	prev := ""
	for _, id := range ids {
		piece := v.Piece(id)
		lcp := 0
		for lcp < len(piece) && lcp < len(prev) && piece[lcp] == prev[lcp] {
			lcp++
		}
		// Close the previous piece's nodes below the common prefix.
		for d := len(path); d > lcp; d-- {
			t.skip[path[d-1]] = int32(len(t.label))
		}
		path = path[:lcp]
		for d := lcp; d < len(piece); d++ {
			path = append(path, int32(len(t.label)))
			t.label = append(t.label, piece[d])
			t.depth = append(t.depth, uint16(d+1))
			t.skip = append(t.skip, 0)
			t.tokStart = append(t.tokStart, int32(len(t.toks)))
		}
		// Tokens ending at the deepest node are appended before any of its
		// descendants exist, so toks stays in node order.
		t.toks = append(t.toks, id)
		t.maxDepth = max(t.maxDepth, len(piece))
		prev = piece
	}
	for d := len(path); d > 0; d-- {
		t.skip[path[d-1]] = int32(len(t.label))
	}
	t.tokStart = append(t.tokStart, int32(len(t.toks)))
	return t
}

// nodes is the number of trie nodes.
func (t *trie) nodes() int { return len(t.label) }
