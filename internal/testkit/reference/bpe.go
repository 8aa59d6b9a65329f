package reference

import (
	"container/heap"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

// byteLevel maps every byte of s to its ByteLevel character (GPT-2's bytes_to_unicode: package bytelevel is
// that table and nothing else, shared with the production tokenizer; no code path is).
func byteLevel(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		sb.WriteRune(bytelevel.Rune[s[i]])
	}
	return sb.String()
}

// byteLevelDecode is the ByteLevel decoder: each token whose characters are all in the table becomes those
// bytes; a token with any other character contributes its own UTF-8 bytes. The result is decoded as UTF-8 with
// Rust's String::from_utf8_lossy rules.
func byteLevelDecode(tokens []string) string {
	var buf []byte
	for _, t := range tokens {
		start := len(buf)
		ok := true
		for _, r := range t {
			b, in := bytelevel.Byte(r)
			if !in {
				ok = false
				break
			}
			buf = append(buf, b)
		}
		if !ok {
			buf = append(buf[:start], t...)
		}
	}
	return lossyUTF8(buf)
}

// lossyUTF8 replaces each maximal invalid subsequence (Unicode "substitution of maximal subparts", which Rust's
// from_utf8_lossy follows) by one U+FFFD.
func lossyUTF8(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); {
		if r, n := utf8.DecodeRune(b[i:]); r != utf8.RuneError || n > 1 {
			sb.WriteRune(r)
			i += n
			continue
		}
		// Invalid: length of the maximal prefix of a well-formed sequence.
		c := b[i]
		need, lo, hi := 0, byte(0x80), byte(0xBF)
		switch {
		case c >= 0xC2 && c <= 0xDF:
			need = 1
		case c == 0xE0:
			need, lo = 2, 0xA0
		case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
			need = 2
		case c == 0xED:
			need, hi = 2, 0x9F
		case c == 0xF0:
			need, lo = 3, 0x90
		case c >= 0xF1 && c <= 0xF3:
			need = 3
		case c == 0xF4:
			need, hi = 3, 0x8F
		}
		j := i + 1
		for k := 0; k < need && j < len(b); k++ {
			if k == 0 && (b[j] < lo || b[j] > hi) || k > 0 && (b[j] < 0x80 || b[j] > 0xBF) {
				break
			}
			j++
		}
		sb.WriteRune(utf8.RuneError)
		i = j
	}
	return sb.String()
}

type mergeRule struct{ rank, id int }

// bpeModel is the tokenizers BPE model without dropout, unk fusing or subword prefixes/suffixes.
type bpeModel struct {
	vocab        map[string]int
	merges       map[[2]int]mergeRule
	unk          int // -1 when there is no unk_token
	ignoreMerges bool

	mu    sync.Mutex
	cache map[string][]int // word → ids; guarded by mu
}

type bpeSym struct{ id, prev, next, size int } // size 0: merged away

type bpeCand struct{ rank, pos, id int }

type bpeHeap []bpeCand

func (h bpeHeap) Len() int { return len(h) }
func (h bpeHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h bpeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *bpeHeap) Push(x any)   { *h = append(*h, x.(bpeCand)) }
func (h *bpeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// word tokenizes one pre-tokenized, byte-level-mapped word (tokenizers' Word::merge_all): a min-heap of candidate
// merges ordered by (rank, position); a popped candidate is applied only if the pair at its position still exists
// and still merges into the same token, and each merge queues the new pairs with its neighbours.
func (m *bpeModel) word(w string) []int {
	m.mu.Lock()
	ids, ok := m.cache[w]
	m.mu.Unlock()
	if ok {
		return slices.Clone(ids)
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return []int{id}
		}
	}
	var syms []bpeSym
	for _, r := range w {
		id, ok := m.vocab[string(r)]
		if !ok {
			if m.unk < 0 {
				continue // tokenizers drops characters it cannot represent when there is no unk token
			}
			id = m.unk
		}
		syms = append(syms, bpeSym{id: id, prev: len(syms) - 1, next: len(syms) + 1, size: 1})
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	h := &bpeHeap{}
	for i := 0; i+1 < len(syms); i++ {
		if r, ok := m.merges[[2]int{syms[i].id, syms[i+1].id}]; ok {
			*h = append(*h, bpeCand{r.rank, i, r.id})
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		c := heap.Pop(h).(bpeCand)
		cur := syms[c.pos]
		if cur.size == 0 || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		if r, ok := m.merges[[2]int{cur.id, right.id}]; !ok || r.id != c.id {
			continue
		}
		syms[c.pos].id = c.id
		syms[c.pos].size += right.size
		syms[c.pos].next = right.next
		syms[cur.next].size = 0
		if right.next >= 0 {
			syms[right.next].prev = c.pos
		}
		if cur.prev >= 0 {
			if r, ok := m.merges[[2]int{syms[cur.prev].id, c.id}]; ok {
				heap.Push(h, bpeCand{r.rank, cur.prev, r.id})
			}
		}
		if right.next >= 0 {
			if r, ok := m.merges[[2]int{c.id, syms[right.next].id}]; ok {
				heap.Push(h, bpeCand{r.rank, c.pos, r.id})
			}
		}
	}
	for i := 0; i < len(syms); i++ {
		if syms[i].size > 0 {
			ids = append(ids, syms[i].id)
		}
	}
	m.mu.Lock()
	if m.cache != nil && len(m.cache) < 1<<16 {
		m.cache[w] = ids
	}
	m.mu.Unlock()
	return slices.Clone(ids)
}
