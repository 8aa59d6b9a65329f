package tokenizer

// pairTable maps a pair of token ids to the merge that joins them: its rank (its index in the merges list,
// lower first) and the id of the merged token. Open addressing with linear probing at a load factor of at
// most 1/2: a lookup is one multiply and usually one cache line, several times faster than a Go map on the
// BPE inner loop.
type pairTable struct {
	slots []pairSlot
	mask  uint64
	bits  uint
}

// pairSlot keeps a key next to its value: one cache line per probe.
type pairSlot struct {
	key uint64 // left<<32 | right
	val uint64 // (rank+1)<<32 | merged id; 0 marks an empty slot
}

func newPairTable(n int) pairTable {
	bits := uint(4)
	for 1<<bits < 2*n {
		bits++
	}
	size := 1 << bits
	return pairTable{slots: make([]pairSlot, size), mask: uint64(size - 1), bits: bits}
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func (p *pairTable) slot(key uint64) uint64 {
	return (key * 0x9E3779B97F4A7C15) >> (64 - p.bits)
}

// insert adds a merge; it reports false when the pair is already there.
func (p *pairTable) insert(a, b, rank, merged int32) bool {
	key := pairKey(a, b)
	for i := p.slot(key); ; i = (i + 1) & p.mask {
		sl := &p.slots[i]
		if sl.val == 0 {
			*sl = pairSlot{key, uint64(rank+1)<<32 | uint64(uint32(merged))}
			return true
		}
		if sl.key == key {
			return false
		}
	}
}

// get returns the merge of the pair (a, b).
func (p *pairTable) get(a, b int32) (rank, merged int32, ok bool) {
	key := pairKey(a, b)
	for i := p.slot(key); ; i = (i + 1) & p.mask {
		sl := p.slots[i]
		if sl.val == 0 {
			return 0, 0, false
		}
		if sl.key == key {
			return int32(sl.val>>32) - 1, int32(uint32(sl.val)), true
		}
	}
}
