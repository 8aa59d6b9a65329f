package gateway

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// testPool is a pool of n live replicas with the given slots and no HTTP behind them.
func testPool(t *testing.T, n, slots int) (*pool, []*replica) {
	t.Helper()
	o := &Options{}
	o.defaults()
	p := newPool(o)
	var rs []Replica
	for i := range n {
		rs = append(rs, Replica{URL: fmt.Sprintf("http://r%d.test", i), Slots: slots, Name: fmt.Sprintf("r%d", i)})
	}
	p.set(rs)
	for _, r := range p.reps {
		r.healthy = true
	}
	return p, p.reps
}

// measured sets what a replica has measured: seconds per evaluated prompt token and the rest of a request.
func measured(r *replica, perToken, base float64) {
	r.est.prefill = prefillFit{}
	r.est.prefill.add(1000, 1000*perToken, false)
	r.est.base = ewma{v: base, n: 1}
}

func key(p *pool, id uint64, prompt, shared float64, now time.Time) *keyState {
	ks := p.keys.get(id, now)
	ks.prompt = ewma{v: prompt, n: 1}
	if shared > 0 {
		ks.shared = ewma{v: shared, n: 1}
	}
	return ks
}

// busy puts a request of expected service expect on r, started at start.
func busy(p *pool, r *replica, ks *keyState, expect float64, start time.Time) {
	p.take(choice{r: r, why: routeHolder, expect: expect}, &routeReq{ks: ks}, start, start)
}

// TestChooseWaitOrSpill checks the decision against hand-computed costs. Both replicas evaluate a prompt token
// in 1 ms and spend 0.1 s on the rest of a request; the key's prompts have 7,000 tokens of which 6,300 are
// shared. A hit costs 0.1 + 700 × 0.001 = 0.8 s, a miss 0.1 + 7,000 × 0.001 = 7.1 s. The holder r0 is busy
// with a hit that just started (0.8 s left) and q more hits queued for it (0.8 s each): waiting costs
// 0.8 + 0.8q + 0.8, spilling to r1 costs 7.1, so the request waits up to q = 6 (6.4 s) and spills at q = 7
// (7.2 s). When r1 holds another key in use whose 3,000 shared tokens it would evict, spilling costs 7.1 + 3.0
// = 10.1 s: the request waits up to q = 10 (9.6 s) and spills at q = 11 (10.4 s).
func TestChooseWaitOrSpill(t *testing.T) {
	p, r := testPool(t, 2, 1)
	now := time.Now()
	for _, x := range r {
		measured(x, 0.001, 0.1)
	}
	ks := key(p, 1, 7000, 6300, now)
	busy(p, r[0], ks, 0.8, now)
	if !holds(r[0], ks) || holds(r[1], ks) {
		t.Fatal("taking a slot did not make r0 the key's holder")
	}
	rq := &routeReq{key: 1, ks: ks}
	decide := func(q int) choice {
		return p.choose(rq, now, map[*replica]float64{r[0]: 0.8 * float64(q)})
	}
	for q, wantSpill := range map[int]bool{0: false, 6: false, 7: true, 20: true} {
		c := decide(q)
		switch {
		case wantSpill && (c.r != r[1] || c.why != routeSpill || c.expect < 7.09 || c.expect > 7.11):
			t.Errorf("q=%d: %+v, want a spill to r1 expecting 7.1 s", q, c)
		case !wantSpill && (c.r != nil || c.target != r[0] || c.why != routeHolder || c.expect < 0.79 || c.expect > 0.81):
			t.Errorf("q=%d: %+v, want to wait for r0 expecting 0.8 s", q, c)
		}
	}
	// r1 now holds another key, used a moment ago: evicting it costs its 3,000 shared tokens.
	other := key(p, 2, 3500, 3000, now)
	p.holdKey(r[1], other)
	for q, wantSpill := range map[int]bool{7: false, 10: false, 11: true} {
		if c := decide(q); (c.r == r[1]) != wantSpill {
			t.Errorf("r1 holding a key in use, q=%d: %+v, spill %v", q, c, wantSpill)
		}
	}
	// A key last used long ago costs nothing to evict (its window: max(30 s, 10 × its 3.6 s miss) = 36 s).
	other.lastSeen = now.Add(-37 * time.Second)
	if c := decide(7); c.r != r[1] {
		t.Errorf("evicting a key idle for 37 s still counted: %+v", c)
	}
	other.lastSeen = now.Add(-35 * time.Second)
	if c := decide(7); c.r != nil {
		t.Errorf("evicting a key idle for 35 s did not count: %+v", c)
	}
	// A holder with a free slot is taken at once.
	p.holdKey(r[1], ks)
	if c := decide(0); c.r != r[1] || c.why != routeHolder {
		t.Errorf("free holder: %+v", c)
	}
}

// TestChooseBeforeMeasuring: before a key has been seen to reuse anything, a hit is assumed to cost a miss,
// so a busy holder does not keep its requests waiting while another replica is free (routing by load).
func TestChooseBeforeMeasuring(t *testing.T) {
	p, r := testPool(t, 2, 1)
	now := time.Now()
	for _, x := range r {
		measured(x, 0.001, 0.1)
	}
	ks := key(p, 1, 7000, 0, now)
	busy(p, r[0], ks, 7.1, now)
	if c := p.choose(&routeReq{key: 1, ks: ks}, now, nil); c.r != r[1] || c.why != routeSpill {
		t.Errorf("%+v, want r1 at once", c)
	}
}

// TestChooseNewKey: a key without a holder goes to a free replica that evicts nothing in use, else to the one
// whose eviction costs least; with nothing to tell replicas apart, rendezvous hashing decides, the same way
// for the same key in any pool over the same replicas.
func TestChooseNewKey(t *testing.T) {
	p, r := testPool(t, 3, 1)
	now := time.Now()
	for _, x := range r {
		measured(x, 0.001, 0.1)
	}
	p.holdKey(r[0], key(p, 10, 5000, 4000, now))
	p.holdKey(r[1], key(p, 11, 5000, 4500, now))
	ks := key(p, 12, 5000, 0, now)
	if c := p.choose(&routeReq{key: 12, ks: ks}, now, nil); c.r != r[2] || c.why != routeNew {
		t.Fatalf("new key with r2 empty: %+v", c)
	}
	p.holdKey(r[2], key(p, 13, 5000, 100, now))
	if c := p.choose(&routeReq{key: 12, ks: ks}, now, nil); c.r != r[2] {
		t.Fatalf("new key, every replica holding a key in use: %+v, want r2 (evicting 100 shared tokens)", c)
	}
	// The key whose share is not known yet counts with its whole prompt.
	p.holdKey(r[2], key(p, 14, 6000, 0, now))
	if c := p.choose(&routeReq{key: 12, ks: ks}, now, nil); c.r != r[0] {
		t.Fatalf("%+v, want r0 (4,000 shared tokens, less than r1's 4,500 and r2's unknown share of 6,000)", c)
	}

	// Rendezvous: fresh pools, no measurements, many keys: each goes where its hash says, in every pool.
	for id := uint64(100); id < 140; id++ {
		var got []string
		for range 2 {
			q, _ := testPool(t, 4, 1)
			ks := q.keys.get(id, now)
			c := q.choose(&routeReq{key: id, ks: ks}, now, nil)
			got = append(got, c.r.conf().Name)
		}
		if got[0] != got[1] {
			t.Fatalf("key %d went to %v", id, got)
		}
	}
}

// TestChooseDeadHolder: a replica that is not live holds nothing as far as routing goes: its keys go to a free
// replica at once (they move as soon as the replica is marked down, by a failed request or the next probe).
func TestChooseDeadHolder(t *testing.T) {
	p, r := testPool(t, 2, 1)
	now := time.Now()
	for _, x := range r {
		measured(x, 0.001, 0.1)
	}
	ks := key(p, 1, 7000, 6300, now)
	p.holdKey(r[0], ks)
	r[0].healthy = false
	c := p.choose(&routeReq{key: 1, ks: ks}, now, nil)
	if c.r != r[1] || c.why != routeNew {
		t.Fatalf("%+v, want r1", c)
	}
	l := p.take(c, &routeReq{key: 1, ks: ks}, now, now)
	if ks.holders[0] != r[1] {
		t.Fatalf("holders %v", ks.holders)
	}
	// r1 reports a hit-free first answer, then r0 comes back: r1 is the most recent holder and keeps the key.
	p.mu.Lock()
	p.learn(l, usage{known: true, prompt: 7000, cached: 0, promptSec: 7}, 7100*time.Millisecond, now)
	p.mu.Unlock()
	r[1].inflight, r[1].active = 0, nil
	r[0].healthy = true
	if c := p.choose(&routeReq{key: 1, ks: ks}, now, nil); c.r != r[1] {
		t.Fatalf("after r0 came back: %+v, want r1 (the most recent holder)", c)
	}
}

// TestDownReplicaDropsKeys: a replica marked down — by a failed probe, or by a request that could not reach it —
// holds no key from then on (it most likely comes back restarted, its cache empty), so the keys' later requests
// are not sent to it as hits when it returns; a replica that is only ejected for failing requests (alive, its
// cache likely intact) keeps its keys.
func TestDownReplicaDropsKeys(t *testing.T) {
	p, r := testPool(t, 3, 2) // two slots: each keeps two prefixes
	now := time.Now()
	ks := key(p, 1, 7000, 6300, now)
	other := key(p, 2, 7000, 6300, now)
	p.holdKey(r[2], ks)
	p.holdKey(r[1], ks)
	p.holdKey(r[0], ks)
	p.holdKey(r[2], other)
	p.probed(r[0], now, false, 0, nil, "connection refused")
	if indexOf(ks.holders, r[0]) >= 0 || len(r[0].recent) != 0 {
		t.Fatalf("after a failed probe: holders %v, r0 keeps %d keys", ks.holders, len(r[0].recent))
	}
	l := p.take(choice{r: r[1], why: routeHolder}, &routeReq{key: 1, ks: ks}, now, now)
	p.release(l, outDown, "connection reset", 0, 0, usage{})
	if indexOf(ks.holders, r[1]) >= 0 || len(r[1].recent) != 0 || r[1].healthy {
		t.Fatalf("after an unreachable request: holders %v, r1 keeps %d keys, healthy %v", ks.holders, len(r[1].recent), r[1].healthy)
	}
	// r2 answers 5xx until the circuit breaker ejects it: it keeps its keys.
	for range p.o.FailureThreshold {
		l := p.take(choice{r: r[2], why: routeHolder}, &routeReq{key: 1, ks: ks}, now, now)
		p.release(l, outFailure, "500", 500, 0, usage{})
	}
	if r[2].live(time.Now()) {
		t.Fatal("r2 not ejected")
	}
	if len(ks.holders) != 1 || ks.holders[0] != r[2] || len(r[2].recent) != 2 {
		t.Fatalf("after the ejection: holders %v, r2 keeps %d keys", ks.holders, len(r[2].recent))
	}
}

// TestLearnCapacity: a replica that reports reusing a prefix the gateway had counted as evicted keeps more
// prefixes than its slots (llama-server's host-memory prompt cache); one that reports losing a prefix it was
// thought to hold keeps fewer.
func TestLearnCapacity(t *testing.T) {
	p, r := testPool(t, 1, 1)
	now := time.Now()
	a := key(p, 1, 1000, 900, now)
	b := key(p, 2, 1000, 900, now)
	p.holdKey(r[0], a)
	p.holdKey(r[0], b) // capacity 1: a is taken to be evicted
	if holds(r[0], a) || !holds(r[0], b) {
		t.Fatal("capacity 1 kept two keys")
	}
	l := &lease{r: r[0], key: a, held: false, start: now}
	p.learn(l, usage{known: true, prompt: 1000, cached: 900}, time.Second, now)
	if r[0].capacity(1) != 2 {
		t.Fatalf("capacity %d after a hit on an 'evicted' prefix, want 2", r[0].capacity(1))
	}
	p.holdKey(r[0], a)
	if !holds(r[0], a) || !holds(r[0], b) {
		t.Fatal("capacity 2 did not keep both keys")
	}
	l = &lease{r: r[0], key: b, held: true, start: now}
	p.learn(l, usage{known: true, prompt: 1000, cached: 3}, time.Second, now)
	if r[0].capacity(1) != 1 {
		t.Fatalf("capacity %d after a miss on a held prefix, want 1", r[0].capacity(1))
	}
	if b.shared.v != 900 {
		t.Fatalf("a lost prefix changed the key's shared estimate to %v", b.shared.v)
	}
}

// TestKeyTableBound: the key table forgets the least recently used key beyond its bound, and with it the
// replicas' record of holding it.
func TestKeyTableBound(t *testing.T) {
	p, r := testPool(t, 1, 4)
	p.keys.max = 3
	now := time.Now()
	var first *keyState
	for id := uint64(1); id <= 5; id++ {
		ks := p.keys.get(id, now)
		if id == 1 {
			first = ks
		}
		p.holdKey(r[0], ks)
	}
	if len(p.keys.m) != 3 || p.keys.lru.Len() != 3 {
		t.Fatalf("%d keys kept, want 3", len(p.keys.m))
	}
	if holds(r[0], first) || indexOfKey(r[0].recent, first) >= 0 || first.elem != nil {
		t.Fatal("a forgotten key is still held")
	}
	// A request in flight for a forgotten key does not bring it back.
	p.learn(&lease{r: r[0], key: first, start: now}, usage{known: true, prompt: 10, cached: 9}, time.Second, now)
	if indexOfKey(r[0].recent, first) >= 0 {
		t.Fatal("learn re-added a forgotten key")
	}
}

// TestPrefillFit: the line through the hits' and misses' averages recovers an exact line; a long run of hits
// after a few misses does not lose what a miss costs (a least-squares fit over decaying samples would: its
// slope would come from the hits' noise alone); one class only gives a line through the origin; a negative
// intercept falls back to the misses' seconds per token; nothing known predicts 0.
func TestPrefillFit(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }
	var f prefillFit
	if f.at(1000) != 0 {
		t.Fatal("prediction before any sample")
	}
	line := func(x float64) float64 { return 0.001 + 1e-4*x } // 1 ms fixed, 0.1 ms per token
	f.add(2874, line(2874), false)
	f.add(43, line(43), true)
	if a, b := f.coef(); !near(a, 0.001) || !near(b, 1e-4) {
		t.Errorf("exact line: a=%v b=%v", a, b)
	}
	// 200 hits whose times wobble by 20 %: the miss's cost stands.
	for i := range 200 {
		f.add(43+float64(i%3), line(43)*(0.9+0.1*float64(i%3)), true)
	}
	if got := f.at(2874); got < 0.9*line(2874) || got > 1.1*line(2874) {
		t.Errorf("a miss after 200 hits: %v s, want about %v", got, line(2874))
	}
	var hits prefillFit
	hits.add(100, 0.5, true)
	hits.add(100, 0.7, true)
	if a, b := hits.coef(); a != 0 || !near(b, (0.5+0.2*(0.7-0.5))/100) {
		t.Errorf("hits only: a=%v b=%v, want the average through the origin", a, b)
	}
	var neg prefillFit
	neg.add(10, 0.5, true)
	neg.add(1000, 1, false) // the line through them: b = 0.5/990, a = 0.5 - 10b > 0
	if a, _ := neg.coef(); a <= 0 {
		t.Errorf("positive intercept lost: %v", a)
	}
	var neg2 prefillFit
	neg2.add(10, 0.001, true)
	neg2.add(1000, 10, false) // a = 0.001 - 10·(9.999/990) < 0: through the origin at the misses' rate
	if a, b := neg2.coef(); a != 0 || !near(b, 0.01) {
		t.Errorf("negative intercept: a=%v b=%v", a, b)
	}
}

// TestChooseSharedPrior: before a key has hit, its shared prefix is taken from what its first request showed
// as shared (the system message's bytes) at the fleet's tokens per byte, so a busy holder keeps the key's next
// request from the start instead of the first requests spreading (and evicting each other) as if nothing were
// shared. The same request with nothing known shared spills, as TestChooseBeforeMeasuring shows.
func TestChooseSharedPrior(t *testing.T) {
	p, r := testPool(t, 2, 1)
	now := time.Now()
	for _, x := range r {
		measured(x, 0.001, 0.1)
	}
	p.est.tokPerByte = ewma{v: 0.25, n: 1}
	ks := key(p, 1, 7000, 0, now)
	ks.sharedBytes = 25200 // 6,300 tokens at 0.25 per byte
	busy(p, r[0], ks, 0.8, now)
	c := p.choose(&routeReq{key: 1, ks: ks}, now, nil)
	if c.r != nil || c.target != r[0] || c.expect < 0.79 || c.expect > 0.81 {
		t.Fatalf("%+v, want to wait for r0 expecting a 0.8 s hit", c)
	}
	ks.sharedBytes = 0
	if c := p.choose(&routeReq{key: 1, ks: ks}, now, nil); c.r != r[1] {
		t.Fatalf("nothing known shared: %+v, want r1", c)
	}
}
