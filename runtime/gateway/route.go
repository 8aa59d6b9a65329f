package gateway

import (
	"container/list"
	"hash/fnv"
	"math"
	"time"
)

// This file is the routing decision. Everything here runs with pool.mu held.
//
// A keyed request (see keyOf) goes to a replica that holds its key's prefix (served that key last, within the
// replica's capacity of prefixes) when one has a free slot. When every holder is busy, the request either
// waits for the holder expected to free first or spills to a free replica, whichever is expected to finish
// first: waiting costs the holder's expected queue time (the remaining service of its requests in flight and
// of the requests queued ahead for it, per slot) plus a hit's service; spilling costs a miss's service plus,
// when the free replica's prefixes are all in use by other active keys, the miss it causes the key it evicts.
// Service times come from what the replicas measured and reported (prompt evaluation time against evaluated
// tokens, and the rest of each request as timed by the gateway) and from what each key's requests reused (its
// shared tokens). Until a key has been seen to hit, its shared tokens are the bytes its first request showed as
// shared (the system messages, the keyed prefix) at the fleet's measured tokens per byte; with nothing known
// (a prompt_cache_key, a cold gateway) a hit is assumed to cost as much as a miss, so the gateway routes by load
// until the replicas show that reuse pays. A key without a live holder goes to a free replica
// that has room for another prefix (the cheapest of those), else to the free replica whose miss plus eviction
// costs least, ties broken by rendezvous hashing of the key (so the same key prefers the same replica across
// restarts and gateways); with no free replica it waits for the replica expected to free first.
// A replica never takes more requests than its slots.

// ewmaWeight is the weight of a new sample in the moving averages.
const ewmaWeight = 0.2

// ewma is an exponentially weighted moving average; n counts the samples.
type ewma struct {
	v float64
	n int
}

func (e *ewma) add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return
	}
	if e.n == 0 {
		e.v = x
	} else {
		e.v += ewmaWeight * (x - e.v)
	}
	e.n++
}

// prefillFit is the prompt evaluation time of a replica as a line y = a + b·x through two moving averages:
// the (evaluated tokens, seconds) of the evaluations that reused most of their prompt (short ones: hits) and of
// the others (long ones: misses). Each class keeps its own average, so a long run of hits does not wash out what
// a miss costs — a least-squares fit over recent samples would, and then a miss would look as cheap as a hit. The
// fixed part (scheduling, the first batch's setup) is what makes a short evaluation's seconds per token look
// many times a long one's; the line separates it from the per-token cost.
type prefillFit struct {
	hitX, hitY, missX, missY ewma
	n                        int
}

// add records one evaluation of x tokens in y seconds; hit says it reused most of its prompt.
func (f *prefillFit) add(x, y float64, hit bool) {
	if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) || x <= 0 || y < 0 {
		return
	}
	if hit {
		f.hitX.add(x)
		f.hitY.add(y)
	} else {
		f.missX.add(x)
		f.missY.add(y)
	}
	f.n++
}

// coef returns the intercept and slope, both at least 0: the line through the two classes' averages when they
// are apart in x, else a line through the origin and the average there is.
func (f *prefillFit) coef() (a, b float64) {
	h, m := f.hitX.n > 0, f.missX.n > 0
	switch {
	case h && m && f.missX.v > 1.1*f.hitX.v:
		b = (f.missY.v - f.hitY.v) / (f.missX.v - f.hitX.v)
		a = f.hitY.v - b*f.hitX.v
		if b >= 0 && a >= 0 {
			return a, b
		}
		return 0, max(f.missY.v/f.missX.v, 0)
	case m:
		return 0, max(f.missY.v/f.missX.v, 0)
	case h:
		return 0, max(f.hitY.v/f.hitX.v, 0)
	}
	return 0, 0
}

// at predicts the seconds of evaluating x tokens.
func (f *prefillFit) at(x float64) float64 {
	a, b := f.coef()
	return a + b*x
}

// estimates are what the gateway measured of a replica (or of the whole fleet, as the fallback for a replica
// not measured yet).
type estimates struct {
	prefill     prefillFit // prompt evaluation seconds (as the replica reports them) against evaluated tokens
	base        ewma       // seconds of a request besides prompt evaluation (generation, transfer), as the gateway times it
	prompt      ewma       // prompt tokens per request
	prefillHit  ewma       // reported prompt-evaluation seconds of requests that reused at least half their prompt
	prefillMiss ewma       // ... and of the others
	queue       ewma       // seconds the requests routed to it waited in the gateway's queue
	tokPerByte  ewma       // prompt tokens per byte of request content (the fleet's: the prior of a new key's share)
}

// keyState is what the gateway knows about one routing key.
type keyState struct {
	id      uint64
	holders []*replica // replicas holding the key's prefix, most recent first
	prompt  ewma       // prompt tokens of its requests
	shared  ewma       // tokens its requests reused on a holder: the length of the shared prefix
	// sharedBytes is the content the key covers, in bytes (its system messages or prefix), as its first request
	// showed: before a hit is seen, the shared prefix is taken to be that many bytes' worth of tokens.
	sharedBytes int
	lastSeen    time.Time
	elem        *list.Element
}

// keyTable remembers at most max keys; the least recently used goes first.
type keyTable struct {
	max int
	m   map[uint64]*keyState
	lru *list.List
}

func newKeyTable(max int) *keyTable {
	return &keyTable{max: max, m: map[uint64]*keyState{}, lru: list.New()}
}

// get returns the key's state, creating it (and forgetting the least recently used key beyond max).
func (t *keyTable) get(id uint64, now time.Time) *keyState {
	if ks, ok := t.m[id]; ok {
		t.lru.MoveToFront(ks.elem)
		return ks
	}
	ks := &keyState{id: id, lastSeen: now}
	ks.elem = t.lru.PushFront(ks)
	t.m[id] = ks
	for t.lru.Len() > t.max {
		old := t.lru.Back().Value.(*keyState)
		t.forget(old)
	}
	return ks
}

func (t *keyTable) forget(ks *keyState) {
	for _, r := range ks.holders {
		r.dropKey(ks)
	}
	ks.holders = nil
	t.lru.Remove(ks.elem)
	ks.elem = nil // forgotten: a request in flight must not bring it back into replicas' lists
	delete(t.m, ks.id)
}

// routeReq is what routing needs to know about a request.
type routeReq struct {
	model       string
	key         uint64 // 0: no key, route by load
	sharedBytes int    // content bytes the key covers (0: unknown)
	bytes       int    // content bytes of the request, for the tokens-per-byte estimate
	loadOnly    bool   // route by load even if keyed (RoutingHeader); the key's statistics still learn
	tried       map[*replica]bool
	ks          *keyState // looked up by acquire
}

// Routing decisions, for metrics.
const (
	routeLoad   = "load"   // unkeyed or load-only: least outstanding requests per slot
	routeHolder = "holder" // a replica holding the key's prefix
	routeNew    = "new"    // no live holder: a free replica chosen for the key
	routeSpill  = "spill"  // every holder busy, and waiting was expected to cost more than a miss elsewhere
)

var routeDecisions = []string{routeLoad, routeHolder, routeNew, routeSpill}

// choice is the outcome of choose: a replica to take now, or the replica the request waits for.
type choice struct {
	r      *replica // take it now (slot free)
	why    string
	target *replica // when r is nil: the replica expected to serve it
	expect float64  // expected service seconds on r or target
}

// candidates are the live replicas a request may use: those serving its model (when replicas differ), and of
// those the ones it has not failed on yet, unless it failed on all.
func (p *pool) candidates(rq *routeReq, now time.Time) []*replica {
	filter := false
	if rq.model != "" {
		for _, r := range p.reps {
			if r.live(now) && r.lists(rq.model) {
				filter = true
				break
			}
		}
	}
	var untried, tried []*replica
	for _, r := range p.reps {
		if !r.live(now) || (filter && !r.lists(rq.model)) {
			continue
		}
		if rq.tried[r] {
			tried = append(tried, r)
		} else {
			untried = append(untried, r)
		}
	}
	if len(untried) > 0 {
		return untried
	}
	return tried
}

func (p *pool) free(r *replica) bool { return r.inflight < r.slots(p.o.DefaultSlots) }

// choose decides where a request goes. queued holds, per replica, the expected service of the requests that
// wait ahead of this one for it.
func (p *pool) choose(rq *routeReq, now time.Time, queued map[*replica]float64) choice {
	cands := p.candidates(rq, now)
	if len(cands) == 0 {
		return choice{}
	}
	ks := rq.ks
	if ks == nil || rq.loadOnly || p.o.Affinity.Mode == AffinityOff {
		return p.chooseLoad(cands, ks, now, queued)
	}
	var holders []*replica
	for _, h := range ks.holders {
		for _, c := range cands {
			if c == h {
				holders = append(holders, h)
				break
			}
		}
	}
	// A holder with a free slot: the prefix is reused at once.
	for _, h := range holders {
		if p.free(h) {
			return choice{r: h, why: routeHolder, expect: p.service(h, ks, true)}
		}
	}
	// The free replica where a miss costs least, counting the key it would evict.
	var alt *replica
	altCost := math.Inf(1)
	for _, c := range cands {
		if !p.free(c) {
			continue
		}
		cost := p.service(c, ks, false) + p.evictPenalty(c, ks, now)
		if alt == nil || cost < altCost || (cost == altCost && hrw(ks.id, c) > hrw(ks.id, alt)) {
			alt, altCost = c, cost
		}
	}
	if len(holders) == 0 {
		// A free replica with room for another prefix comes first: it evicts nothing, and the differences of
		// speed between replicas are noisier than the miss an eviction is sure to cost.
		var roomy *replica
		roomyCost := math.Inf(1)
		for _, c := range cands {
			if !p.free(c) || p.evictPenalty(c, ks, now) > 0 {
				continue
			}
			cost := p.service(c, ks, false)
			if roomy == nil || cost < roomyCost || (cost == roomyCost && hrw(ks.id, c) > hrw(ks.id, roomy)) {
				roomy, roomyCost = c, cost
			}
		}
		if roomy != nil {
			return choice{r: roomy, why: routeNew, expect: roomyCost}
		}
		if alt != nil {
			return choice{r: alt, why: routeNew, expect: p.service(alt, ks, false)}
		}
		// Wait for the replica expected to free first (ties: rendezvous order).
		var best *replica
		bestCost := math.Inf(1)
		for _, c := range cands {
			cost := p.wait(c, now, queued) + p.evictPenalty(c, ks, now)
			if best == nil || cost < bestCost || (cost == bestCost && hrw(ks.id, c) > hrw(ks.id, best)) {
				best, bestCost = c, cost
			}
		}
		return choice{target: best, why: routeNew, expect: p.service(best, ks, false)}
	}
	// Every holder is busy: wait for the one expected to serve first, unless a miss elsewhere is cheaper.
	var hold *replica
	holdCost := math.Inf(1)
	for _, h := range holders {
		cost := p.wait(h, now, queued) + p.service(h, ks, true)
		if hold == nil || cost < holdCost {
			hold, holdCost = h, cost
		}
	}
	if alt != nil && altCost < holdCost {
		return choice{r: alt, why: routeSpill, expect: p.service(alt, ks, false)}
	}
	return choice{target: hold, why: routeHolder, expect: p.service(hold, ks, true)}
}

// chooseLoad picks the free candidate with the lowest in-flight/slots ratio (round robin among equals), or
// waits for the least loaded one.
func (p *pool) chooseLoad(cands []*replica, ks *keyState, now time.Time, queued map[*replica]float64) choice {
	n := len(cands)
	var best *replica
	for k := range n {
		r := cands[(p.rr+k)%n]
		s := r.slots(p.o.DefaultSlots)
		if r.inflight >= s {
			continue
		}
		if best != nil && r.inflight*best.slots(p.o.DefaultSlots) >= best.inflight*s {
			continue
		}
		best = r
	}
	if best != nil {
		p.rr++
		return choice{r: best, why: routeLoad, expect: p.service(best, ks, holds(best, ks))}
	}
	var target *replica
	cost := math.Inf(1)
	for _, r := range cands {
		if c := p.wait(r, now, queued); target == nil || c < cost {
			target, cost = r, c
		}
	}
	return choice{target: target, why: routeLoad, expect: p.service(target, ks, holds(target, ks))}
}

func holds(r *replica, ks *keyState) bool {
	if ks == nil {
		return false
	}
	for _, h := range ks.holders {
		if h == r {
			return true
		}
	}
	return false
}

// wait is the expected time until r can start one more request: the remaining expected service of its
// requests in flight and of those queued ahead for it, shared over its slots.
func (p *pool) wait(r *replica, now time.Time, queued map[*replica]float64) float64 {
	s := r.slots(p.o.DefaultSlots)
	if r.inflight < s && queued[r] == 0 {
		return 0
	}
	work := queued[r]
	for _, l := range r.active {
		work += max(l.expect-now.Sub(l.start).Seconds(), 0)
	}
	return work / float64(s)
}

// service is the expected service seconds of a request of key ks on r, reusing the key's shared prefix or not.
func (p *pool) service(r *replica, ks *keyState, hit bool) float64 {
	base := pick(&r.est.base, &p.est.base)
	prompt := 0.0
	if ks != nil && ks.prompt.n > 0 {
		prompt = ks.prompt.v
	} else {
		prompt = pick(&r.est.prompt, &p.est.prompt)
	}
	if hit {
		if shared := p.sharedTokens(ks); shared > 0 {
			prompt = max(prompt-shared, 1)
		}
	}
	return base + p.prefill(r).at(prompt)
}

// sharedTokens is the key's shared prefix in tokens: what its hits reused, or before any, the bytes its first
// request showed as shared at the fleet's tokens per byte; 0 when unknown.
func (p *pool) sharedTokens(ks *keyState) float64 {
	switch {
	case ks == nil:
		return 0
	case ks.shared.n > 0:
		return ks.shared.v
	case ks.sharedBytes > 0 && p.est.tokPerByte.n > 0:
		return float64(ks.sharedBytes) * p.est.tokPerByte.v
	}
	return 0
}

// prefill is r's prompt-evaluation model, or the fleet's while r has not reported any.
func (p *pool) prefill(r *replica) *prefillFit {
	if r.est.prefill.n > 0 {
		return &r.est.prefill
	}
	return &p.est.prefill
}

// perToken is r's marginal seconds per evaluated prompt token.
func (p *pool) perToken(r *replica) float64 {
	_, b := p.prefill(r).coef()
	return b
}

// pick is the replica's measurement, else the fleet's, else 0.
func pick(own, fleet *ewma) float64 {
	if own.n > 0 {
		return own.v
	}
	if fleet.n > 0 {
		return fleet.v
	}
	return 0
}

// activeWindow is how recently a key must have been used for evicting its prefix to count as a cost.
func (p *pool) activeWindow(r *replica, ks *keyState) time.Duration {
	return max(30*time.Second, time.Duration(10*p.service(r, ks, false)*float64(time.Second)))
}

// evictPenalty is what taking key ks costs r's other keys: when r holds as many prefixes as it can keep and
// would drop one still in use, the next request of that key misses: it evaluates the key's shared prefix
// again (its whole prompt while the share is not known yet).
func (p *pool) evictPenalty(r *replica, ks *keyState, now time.Time) float64 {
	c := r.capacity(p.o.DefaultSlots)
	if holds(r, ks) || len(r.recent) < c {
		return 0
	}
	victim := r.recent[c-1]
	if now.Sub(victim.lastSeen) > p.activeWindow(r, victim) {
		return 0
	}
	tokens := victim.prompt.v
	if shared := p.sharedTokens(victim); shared > 0 {
		tokens = shared
	}
	return tokens * p.perToken(r)
}

// hrw is the rendezvous-hashing score of a replica for a key.
func hrw(key uint64, r *replica) float64 {
	x := key ^ r.hashID
	// splitmix64 finalizer
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x >> 11)
}

func replicaHash(url string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(url))
	return h.Sum64()
}

// capacity is how many prefixes r is taken to keep at once: its slots (each slot of phonellm serve or
// llama-server keeps its last prompt), more once it has shown it keeps more (llama-server's --cache-ram keeps
// prompts in host memory).
func (r *replica) capacity(def int) int { return max(r.keepN, r.slots(def)) }

// maxKeep bounds a replica's learned capacity of prefixes.
const maxKeep = 64

// holdKey records that r now holds ks's prefix (it just served it): r becomes the key's most recent holder,
// ks r's most recent key, and the keys beyond r's capacity are taken to be evicted.
func (p *pool) holdKey(r *replica, ks *keyState) {
	if i := indexOf(ks.holders, r); i >= 0 {
		copy(ks.holders[1:i+1], ks.holders[:i])
		ks.holders[0] = r
	} else {
		ks.holders = append([]*replica{r}, ks.holders...)
	}
	if i := indexOfKey(r.recent, ks); i >= 0 {
		copy(r.recent[1:i+1], r.recent[:i])
		r.recent[0] = ks
	} else {
		r.recent = append([]*keyState{ks}, r.recent...)
	}
	for c := r.capacity(p.o.DefaultSlots); len(r.recent) > c; {
		old := r.recent[len(r.recent)-1]
		r.recent = r.recent[:len(r.recent)-1]
		if i := indexOf(old.holders, r); i >= 0 {
			old.holders = append(old.holders[:i], old.holders[i+1:]...)
		}
	}
}

// dropKey forgets that r holds ks.
func (r *replica) dropKey(ks *keyState) {
	if i := indexOfKey(r.recent, ks); i >= 0 {
		r.recent = append(r.recent[:i], r.recent[i+1:]...)
	}
}

// dropAll forgets every prefix r holds: it was removed, or went down (a replica that comes back has most likely
// restarted with an empty cache; one that kept its cache shows it by reporting hits, and takes its keys back).
func (r *replica) dropAll() {
	for _, ks := range r.recent {
		if i := indexOf(ks.holders, r); i >= 0 {
			ks.holders = append(ks.holders[:i], ks.holders[i+1:]...)
		}
	}
	r.recent = nil
}

func indexOf(rs []*replica, r *replica) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return -1
}

func indexOfKey(ks []*keyState, k *keyState) int {
	for i, x := range ks {
		if x == k {
			return i
		}
	}
	return -1
}

// learn records a finished request: the replica's measurements, its token counters, and what the key reused
// (the replica became the key's holder when it took the request). service is the time from taking the slot
// to the end of the answer.
func (p *pool) learn(l *lease, u usage, service time.Duration, now time.Time) {
	r := l.r
	st := &r.stats
	sec := service.Seconds()
	if u.known && l.bytes > 0 && u.prompt > 0 {
		p.est.tokPerByte.add(float64(u.prompt) / float64(l.bytes))
	}
	if u.known {
		st.promptTokens += uint64(u.prompt)
		st.cachedTokens += uint64(u.cached)
		if u.hit() {
			st.hits++
		} else {
			st.misses++
		}
		r.est.prompt.add(float64(u.prompt))
		p.est.prompt.add(float64(u.prompt))
		if ev := u.evaluated(); ev > 0 {
			prefill := u.promptSec
			if prefill == 0 {
				// The replica does not report its prompt time: count the whole request as prompt work.
				prefill = sec
			}
			r.est.prefill.add(float64(ev), prefill, u.hit())
			p.est.prefill.add(float64(ev), prefill, u.hit())
			r.est.base.add(max(sec-prefill, 0))
			p.est.base.add(max(sec-prefill, 0))
		}
		if u.promptSec > 0 {
			if u.hit() {
				r.est.prefillHit.add(u.promptSec)
			} else {
				r.est.prefillMiss.add(u.promptSec)
			}
		}
	}
	ks := l.key
	if ks == nil || ks.elem == nil {
		return
	}
	ks.lastSeen = now
	if !u.known {
		return
	}
	ks.prompt.add(float64(u.prompt))
	switch {
	case l.held && u.cached > 0:
		if ks.shared.n > 0 && float64(u.cached) < ks.shared.v/2 {
			// The replica had lost the prefix: it keeps fewer prefixes than assumed.
			r.keepN = max(r.slots(p.o.DefaultSlots), r.keepN-1)
		} else {
			ks.shared.add(float64(u.cached))
		}
	case !l.held && u.hit():
		// It kept a prefix the gateway had counted as evicted: it keeps more than assumed.
		r.keepN = min(r.capacity(p.o.DefaultSlots)+1, maxKeep)
		ks.shared.add(float64(u.cached))
	}
}
