package tokenizer

import (
	"context"
	"math"
	"math/bits"
	"slices"
)

// BPE of one pre-tokenized piece ("word"), exactly as Hugging Face tokenizers' Word::merge_all and
// llama.cpp's llm_tokenizer_bpe_session do it: the word starts as one symbol per byte (its byte-level
// character's token); repeatedly, of all adjacent symbol pairs that have a merge, the one with the lowest
// merge rank is merged, and among pairs of equal rank the leftmost. Both implementations keep a priority
// queue ordered by (rank, position of the left symbol) and skip entries whose pair has changed since they
// were queued; any implementation that always merges the least (rank, position) pair present gives the same
// result, and the two paths below do.

// smallWord is the longest word merged by the quadratic path, which rescans the pairs of a short array
// instead of keeping a queue (faster for the short words that make up nearly all text).
const smallWord = 48

// scratch holds the buffers one Encode call reuses from word to word.
type scratch struct {
	ids   []int32  // symbol ids: by symbol (small words) or by byte position (large words)
	ranks []int32  // small words: rank of the pair (k, k+1), math.MaxInt32 when it has no merge
	mids  []int32  // small words: the token that pair merges into
	live  []uint64 // large words: bit i set when a symbol starts at byte i
	heap  []uint64 // large words: candidate merges, rank<<32 | position, a min-heap
	pops  int
}

// bpe appends the tokens of word w (non-empty) to out.
func (t *Tokenizer) bpe(ctx context.Context, w string, sc *scratch, out []int32) ([]int32, error) {
	start := len(out)
	var err error
	switch {
	case len(w) == 1:
		out = append(out, t.byteID[w[0]])
	case len(w) <= smallWord:
		out = t.bpeSmall(w, sc, out)
	default:
		out, err = t.bpeLarge(ctx, w, sc, out)
	}
	if t.missingBytes {
		out = out[:start+len(slices.DeleteFunc(out[start:], func(id int32) bool { return id == t.noSymbol }))]
	}
	return out, err
}

func (t *Tokenizer) bpeSmall(w string, sc *scratch, out []int32) []int32 {
	n := len(w)
	ids, ranks, mids := sc.ids[:0], sc.ranks[:0], sc.mids[:0]
	for i := 0; i < n; i++ {
		ids = append(ids, t.byteID[w[i]])
	}
	for k := 0; k+1 < n; k++ {
		r, m := t.pairRank(ids[k], ids[k+1])
		ranks, mids = append(ranks, r), append(mids, m)
	}
	for {
		best, bestRank := -1, int32(math.MaxInt32)
		for k, r := range ranks {
			if r < bestRank { // strict: the leftmost of equal ranks
				best, bestRank = k, r
			}
		}
		if best < 0 {
			break
		}
		ids[best] = mids[best]
		ids = append(ids[:best+1], ids[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		mids = append(mids[:best], mids[best+1:]...)
		if best > 0 {
			ranks[best-1], mids[best-1] = t.pairRank(ids[best-1], ids[best])
		}
		if best < len(ranks) {
			ranks[best], mids[best] = t.pairRank(ids[best], ids[best+1])
		}
	}
	sc.ids, sc.ranks, sc.mids = ids, ranks, mids
	return append(out, ids...)
}

// pairRank is the rank and result of the merge of (a, b), or MaxInt32 when there is none.
func (t *Tokenizer) pairRank(a, b int32) (int32, int32) {
	if r, m, ok := t.merges.get(a, b); ok {
		return r, m
	}
	return math.MaxInt32, 0
}

// bpeLarge merges a long word with a priority queue, in O(n log n) time and about 12 bytes of memory per
// byte of the word: the symbol starting at each byte position (4 bytes), a bitmap of the positions where a
// symbol starts, and the queue of candidate merges (8 bytes each, at most about one per position: stale
// entries are dropped when the queue fills). A symbol's end is its start plus its token's length, so no
// links are stored; the previous symbol is found in the bitmap, at most the longest token's length back.
func (t *Tokenizer) bpeLarge(ctx context.Context, w string, sc *scratch, out []int32) ([]int32, error) {
	n := len(w)
	if n > math.MaxUint32 {
		return out, &LimitError{Limit: LimitInputBytes, Max: math.MaxUint32, Count: n}
	}
	ids := grow(sc.ids, n)
	for i := 0; i < n; i++ {
		ids[i] = t.byteID[w[i]]
	}
	live := growBits(sc.live, n)
	for i := range live {
		live[i] = ^uint64(0)
	}
	// Count the initial candidates first so that the queue is allocated once, at its size (plus a quarter
	// for the pairs merges create before stale entries are dropped).
	pairs := 0
	for i := 0; i+1 < n; i++ {
		if _, _, ok := t.merges.get(ids[i], ids[i+1]); ok {
			pairs++
		}
	}
	h := sc.heap[:0]
	if want := pairs + pairs/4 + 16; cap(h) < want {
		h = make([]uint64, 0, want)
	}
	for i := 0; i+1 < n; i++ {
		if r, _, ok := t.merges.get(ids[i], ids[i+1]); ok {
			h = append(h, uint64(r)<<32|uint64(i))
		}
	}
	q := mergeQueue{h: h}
	q.init()
	end := func(pos int) int { return pos + int(t.tokLen[ids[pos]]) }
	// valid reports whether a queued merge is still the pair at its position. Pairs at a position never
	// repeat (the symbol there only grows), so a rank identifies the pair.
	valid := func(e uint64) bool {
		pos := int(uint32(e))
		if live[pos>>6]&(1<<(pos&63)) == 0 {
			return false
		}
		r := end(pos)
		if r >= n {
			return false
		}
		rank, _, ok := t.merges.get(ids[pos], ids[r])
		return ok && uint64(rank) == e>>32
	}
	push := func(e uint64) {
		if len(q.h) == cap(q.h) {
			q.compact(valid)
		}
		q.push(e)
	}
	for len(q.h) > 0 {
		if sc.pops++; sc.pops&(1<<16-1) == 0 {
			if err := ctx.Err(); err != nil {
				sc.ids, sc.live, sc.heap = ids, live, q.h
				return out, err
			}
		}
		e := q.pop()
		if !valid(e) {
			continue
		}
		pos := int(uint32(e))
		r := end(pos)
		_, merged, _ := t.merges.get(ids[pos], ids[r])
		ids[pos] = merged
		live[r>>6] &^= 1 << (r & 63)
		if p := prevSet(live, pos); p >= 0 {
			if rank, _, ok := t.merges.get(ids[p], merged); ok {
				push(uint64(rank)<<32 | uint64(p))
			}
		}
		if nx := end(pos); nx < n {
			if rank, _, ok := t.merges.get(merged, ids[nx]); ok {
				push(uint64(rank)<<32 | uint64(pos))
			}
		}
	}
	count := 0
	for i := 0; i < n; i = end(i) {
		count++
	}
	out = slices.Grow(out, count)
	for i := 0; i < n; i = end(i) {
		out = append(out, ids[i])
	}
	sc.ids, sc.live, sc.heap = ids, live, q.h
	return out, nil
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func growBits(s []uint64, n int) []uint64 {
	w := (n + 63) >> 6
	if cap(s) < w {
		return make([]uint64, w)
	}
	return s[:w]
}

// prevSet returns the largest j < i whose bit is set, or -1.
func prevSet(b []uint64, i int) int {
	if i <= 0 {
		return -1
	}
	i--
	w := i >> 6
	word := b[w] & (^uint64(0) >> (63 - uint(i&63)))
	for {
		if word != 0 {
			return w<<6 + 63 - bits.LeadingZeros64(word)
		}
		if w--; w < 0 {
			return -1
		}
		word = b[w]
	}
}

// mergeQueue is a 4-ary min-heap of rank<<32 | position: the least rank first, then the leftmost position.
// Four children per node halve the depth of a binary heap and put siblings in one cache line, which is what
// a queue of millions of entries (a long word) is bound by.
type mergeQueue struct{ h []uint64 }

const arity = 4

func (q *mergeQueue) init() {
	if len(q.h) < 2 {
		return
	}
	for i := (len(q.h) - 2) / arity; i >= 0; i-- {
		q.down(i)
	}
}

func (q *mergeQueue) push(e uint64) {
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / arity
		if q.h[p] <= e {
			break
		}
		q.h[i] = q.h[p]
		i = p
	}
	q.h[i] = e
}

func (q *mergeQueue) pop() uint64 {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h = q.h[:last]
	if last > 0 {
		q.down(0)
	}
	return top
}

func (q *mergeQueue) down(i int) {
	h := q.h
	n := len(h)
	e := h[i]
	for {
		first := arity*i + 1
		if first >= n {
			break
		}
		c, m := first, h[first]
		for k := first + 1; k < min(first+arity, n); k++ {
			if h[k] < m {
				c, m = k, h[k]
			}
		}
		if e <= m {
			break
		}
		h[i] = m
		i = c
	}
	h[i] = e
}

// compact drops the entries that are no longer valid and restores the heap order; when the valid ones still
// fill more than 3/4 of the capacity, the capacity grows by half so that compactions stay rare.
func (q *mergeQueue) compact(valid func(uint64) bool) {
	k := 0
	for _, e := range q.h {
		if valid(e) {
			q.h[k] = e
			k++
		}
	}
	q.h = q.h[:k]
	if c := cap(q.h); k > c*3/4 {
		grown := make([]uint64, k, c+c/2+16)
		copy(grown, q.h)
		q.h = grown
	}
	q.init()
}
