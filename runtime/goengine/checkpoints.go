package goengine

import (
	"github.com/ollama/ollama/kvcache"
)

// A hybrid model's recurrent layers cannot be rolled back token by token: Ollama's cache
// (kvcache/recurrent_checkpoints.go @ v0.24.0) saves their state at the end of a forward batch, into a ring of
// kvcache.DefaultCheckpointCount entries per slot, and a later prompt resumes only just after one of those
// positions. A batch ending at position p records a checkpoint when p >= DefaultCheckpointMinPos and either no
// checkpoint was recorded yet or p is at least DefaultCheckpointInterval past the last one; restoring to a
// checkpoint drops the ring's later entries and makes it the last one; freeing the slot clears the ring. The
// engine cannot set those constants, but it chooses where its batches end: ckStore mirrors the ring (the rule
// is deterministic, so the mirror is exact), and plan picks batch ends so that a checkpoint lands at the end
// of a prompt's shared prefix (Request.CacheBoundary), or as close before it as the rule allows.

// ckRule is when a cache records checkpoints: at batch ends from minPos on, at least interval apart, keeping
// count of them.
type ckRule struct{ minPos, interval, count int }

// ollamaRule is Ollama's (kvcache.DefaultCheckpoint*).
var ollamaRule = ckRule{minPos: int(kvcache.DefaultCheckpointMinPos), interval: int(kvcache.DefaultCheckpointInterval),
	count: kvcache.DefaultCheckpointCount}

// ckStore mirrors one slot's checkpoint ring: the positions it holds (-1 empty), the entry written next and
// the last recorded position (-1 none).
type ckStore struct {
	rule ckRule
	pos  []int
	next int
	last int
}

func newCkStore(rule ckRule) *ckStore {
	s := &ckStore{rule: rule, pos: make([]int, rule.count)}
	s.reset()
	return s
}

// reset mirrors slotCheckpointStore.reset (the slot's cache was cleared).
func (s *ckStore) reset() {
	for i := range s.pos {
		s.pos[i] = -1
	}
	s.next, s.last = 0, -1
}

// fires says whether a batch ending at position p records a checkpoint (Recurrent.planCheckpoints).
func (s *ckStore) fires(p int) bool {
	return p >= s.rule.minPos && (s.last < 0 || p-s.last >= s.rule.interval)
}

// batchEnded mirrors a forward batch of this slot ending at position p.
func (s *ckStore) batchEnded(p int) {
	if !s.fires(p) || len(s.pos) == 0 {
		return
	}
	s.pos[s.next] = p
	s.next = (s.next + 1) % len(s.pos)
	s.last = p
}

// best is the position a prompt sharing n leading tokens with the slot resumes from (the largest checkpoint
// below n), or -1 (slotCheckpointStore.bestIndex).
func (s *ckStore) best(n int) int {
	b := -1
	for _, p := range s.pos {
		if p >= 0 && p < n && p > b {
			b = p
		}
	}
	return b
}

// restored mirrors a restore to the checkpoint at position p (slotCheckpointStore.pruneAfter).
func (s *ckStore) restored(p int) {
	size, next, minPos, minIdx := 0, -1, int(^uint(0)>>1), 0
	for i := range s.pos {
		if s.pos[i] > p {
			s.pos[i] = -1
		}
		if s.pos[i] >= 0 {
			size++
			if s.pos[i] < minPos {
				minPos, minIdx = s.pos[i], i
			}
		} else if next == -1 {
			next = i
		}
	}
	if size == 0 {
		s.next, s.last = 0, -1
		return
	}
	if next != -1 {
		s.next = next
	} else {
		s.next = minIdx
	}
	s.last = p
}

// plan returns the slot lengths at which prompt chunks must end so that, evaluating from slot length at with
// the slot's last checkpoint at position s.last (-1: none), a checkpoint is recorded at position boundary-1 —
// a later prompt sharing the first boundary tokens then resumes at exactly boundary — and the length it lands
// at (boundary when reachable). Batches hold at most batch tokens. When the rule cannot land on boundary-1 (a
// checkpoint fires at the first batch end past the threshold, so only some positions are reachable), it lands
// on the latest reachable position before it; when none is reachable it returns no cuts and landed 0.
//
// Reachability: the first checkpoint can land anywhere in [lo, lo-1+batch] where lo is the first position that
// fires (minPos with no checkpoint yet, else last+interval; not before at), and each further one interval to
// interval-1+batch after the previous one. The plan is the chain c1 < ... < ck ending at the target; before each
// c it ends a batch at c-batch (so the batch that fires ends exactly at c), and the batches before that end
// below the threshold, so nothing else fires. It does not change s.
func (s *ckStore) plan(at, boundary, batch int) (cuts []int, landed int) {
	target := boundary - 1
	if batch < 1 || target < at {
		return nil, 0
	}
	r := s.rule
	lo, hi := r.minPos, r.minPos-1+batch
	if s.last >= 0 {
		lo, hi = s.last+r.interval, s.last+r.interval-1+batch
	}
	lo = max(lo, at)
	if target < lo || hi < lo {
		return nil, 0
	}
	step := r.interval - 1 + batch
	// The largest k whose interval [lo+(k-1)·interval, hi+(k-1)·step] starts at or before the target.
	k := 1 + (target-lo)/r.interval
	land := min(target, hi+(k-1)*step)
	chain := make([]int, k)
	chain[k-1] = land
	for j := k - 2; j >= 0; j-- {
		chain[j] = min(hi+j*step, chain[j+1]-r.interval)
	}
	prev := at - 1
	for _, c := range chain {
		if e := c - batch; e > prev {
			cuts = append(cuts, e+1)
		}
		cuts = append(cuts, c+1)
		prev = c
	}
	return cuts, land + 1
}
