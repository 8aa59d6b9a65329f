package gateway

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// replica is the gateway's state for one upstream. Fields below mu are guarded by pool.mu.
type replica struct {
	cfg  atomic.Pointer[Replica] // replaced whole by SetReplicas; read with conf()
	base *url.URL
	stop chan struct{} // closed when the replica is removed
	kick chan struct{} // asks the health loop for a probe now (buffered 1)

	inflight     int
	learned      int // slots reported by the replica; 0 = unknown
	healthy      bool
	downAt       time.Time // last time a request failure marked it down
	fails        int       // consecutive failures
	ejections    int       // consecutive ejections (reset by a success)
	ejectedUntil time.Time
	models       []modelEntry
	modelsAt     time.Time
	lastErr      string
	removed      bool
	stats        replicaStats

	// Routing state (route.go).
	hashID uint64      // rendezvous-hashing identity (from the URL)
	active []*lease    // requests in flight, with their expected service
	recent []*keyState // keys whose prefix it holds, most recent first, at most capacity()
	keepN  int         // prefixes it has shown to keep at once (0: its slots)
	est    estimates   // what it measured
}

// lease is one request's hold on a replica slot.
type lease struct {
	r      *replica
	key    *keyState // nil: unkeyed
	held   bool      // the replica held the key's prefix before this request
	bytes  int       // content bytes of the request
	why    string    // routing decision
	start  time.Time // slot taken
	expect float64   // expected service seconds
	queued time.Duration
}

// modelEntry is one model a replica lists. Only OpenAI's fields are kept: whatever else a replica says
// about itself (file paths, settings) is not the gateway's to publish.
type modelEntry struct {
	id      string
	created int64
	ownedBy string
}

func (r *replica) conf() *Replica { return r.cfg.Load() }

func (r *replica) slots(def int) int {
	switch {
	case r.conf().Slots > 0:
		return r.conf().Slots
	case r.learned > 0:
		return r.learned
	}
	return def
}

func (r *replica) live(now time.Time) bool {
	return !r.removed && r.healthy && !now.Before(r.ejectedUntil)
}

func (r *replica) lists(model string) bool {
	for _, m := range r.models {
		if m.id == model {
			return true
		}
	}
	return false
}

// outcome is how an attempt on a replica ended, for the circuit breaker.
type outcome int

const (
	outSuccess  outcome = iota // a response other than 5xx/429 was delivered
	outOverload                // 429: busy, not broken
	outFailure                 // 5xx or an error while reading the response
	outDown                    // transport error: connection refused, reset, timeout
	outCanceled                // the client went away; says nothing about the replica
)

var (
	errQueueFull    = errors.New("queue full")
	errQueueTimeout = errors.New("timed out waiting for a free slot")
	errClosed       = errors.New("gateway closed")
)

type waiter struct {
	rq     *routeReq
	since  time.Time
	target *replica    // the replica it waits for, as last decided
	expect float64     // its expected service there
	ch     chan *lease // receives the lease (slot taken), or nil when the gateway closes
}

// pool holds the replicas, picks one per attempt and queues requests when every slot is busy.
type pool struct {
	o *Options

	mu      sync.Mutex
	reps    []*replica
	waiters []*waiter
	rr      int
	closed  bool
	keys    *keyTable
	est     estimates // fleet-wide measurements: the fallback for replicas not measured yet
	routed  map[string]uint64
}

func newPool(o *Options) *pool {
	return &pool{o: o, keys: newKeyTable(o.Affinity.MaxKeys), routed: map[string]uint64{}}
}

// set replaces the membership; it returns the replicas to start probing and those to stop probing.
func (p *pool) set(rs []Replica) (added, removed []*replica) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := map[string]*replica{}
	for _, r := range p.reps {
		old[r.conf().URL] = r
	}
	next := make([]*replica, 0, len(rs))
	for _, c := range rs {
		if r, ok := old[c.URL]; ok {
			r.cfg.Store(&c)
			delete(old, c.URL)
			next = append(next, r)
			continue
		}
		u, _ := url.Parse(c.URL) // validated by SetReplicas
		r := &replica{base: u, stop: make(chan struct{}), kick: make(chan struct{}, 1), stats: newReplicaStats(),
			hashID: replicaHash(c.URL)}
		r.cfg.Store(&c)
		if p.closed {
			r.removed = true
		} else {
			added = append(added, r)
		}
		next = append(next, r)
	}
	for _, r := range p.reps {
		if _, gone := old[r.conf().URL]; gone {
			r.removed = true
			r.dropAll()
			removed = append(removed, r)
		}
	}
	p.reps = next
	p.dispatch()
	return added, removed
}

// acquire takes a slot on the best replica for a request (see route.go), waiting in the queue (at most
// QueueTimeout) when it should wait. rq.tried holds the replicas this request already failed on: they are used
// again only when no untried replica is live.
func (p *pool) acquire(ctx context.Context, rq *routeReq) (*lease, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errClosed
	}
	now := time.Now()
	if rq.key != 0 && rq.ks == nil {
		rq.ks = p.keys.get(rq.key, now)
		if rq.ks.sharedBytes == 0 {
			rq.ks.sharedBytes = rq.sharedBytes
		}
	}
	c := p.choose(rq, now, p.queuedWork())
	if c.r != nil {
		l := p.take(c, rq, now, now)
		p.mu.Unlock()
		return l, nil
	}
	if len(p.waiters) >= p.o.QueueSize {
		p.mu.Unlock()
		return nil, errQueueFull
	}
	w := &waiter{rq: rq, since: now, target: c.target, expect: c.expect, ch: make(chan *lease, 1)}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()

	t := time.NewTimer(p.o.QueueTimeout)
	defer t.Stop()
	var err error
	select {
	case l := <-w.ch:
		if l == nil {
			return nil, errClosed
		}
		return l, nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-t.C:
		err = errQueueTimeout
	}
	p.mu.Lock()
	if i := slices.Index(p.waiters, w); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1)
		p.mu.Unlock()
		return nil, err
	}
	p.mu.Unlock()
	// A replica was assigned as we gave up: hand its slot back.
	if l := <-w.ch; l != nil {
		p.release(l, outCanceled, "", 0, 0, usage{})
	}
	return nil, err
}

// take gives the request a slot on c.r. Called with mu held.
func (p *pool) take(c choice, rq *routeReq, since, now time.Time) *lease {
	r := c.r
	r.inflight++
	l := &lease{r: r, key: rq.ks, why: c.why, start: now, expect: c.expect, queued: now.Sub(since), bytes: rq.bytes}
	r.active = append(r.active, l)
	if ks := rq.ks; ks != nil && ks.elem != nil {
		// From now on the replica holds (or is computing) the key's prefix: the key's next requests wait for
		// it rather than spreading while this one runs.
		l.held = holds(r, ks)
		p.holdKey(r, ks)
	}
	p.routed[c.why]++
	r.est.queue.add(l.queued.Seconds())
	p.est.queue.add(l.queued.Seconds())
	return l
}

// queuedWork sums, per replica, the expected service of the requests waiting for it. Called with mu held.
func (p *pool) queuedWork() map[*replica]float64 {
	if len(p.waiters) == 0 {
		return nil
	}
	q := map[*replica]float64{}
	for _, w := range p.waiters {
		if w.target != nil {
			q[w.target] += w.expect
		}
	}
	return q
}

// dispatch hands free slots to queued requests in arrival order; a request that keeps waiting counts as work
// ahead of the later ones for the replica it waits for. Called with mu held after anything that may free
// capacity.
func (p *pool) dispatch() {
	if len(p.waiters) == 0 {
		return
	}
	now := time.Now()
	ahead := map[*replica]float64{}
	kept := p.waiters[:0]
	for _, w := range p.waiters {
		c := p.choose(w.rq, now, ahead)
		if c.r != nil {
			w.ch <- p.take(c, w.rq, w.since, now)
			continue
		}
		w.target, w.expect = c.target, c.expect
		if c.target != nil {
			ahead[c.target] += c.expect
		}
		kept = append(kept, w)
	}
	clear(p.waiters[len(kept):])
	p.waiters = kept
}

// release returns a slot, feeds the circuit breaker and counts the attempt (code 0: no HTTP answer; ttfb 0:
// not measured). A successful attempt teaches the router what the replica reported (u) and that the replica
// now holds the request's prefix.
func (p *pool) release(l *lease, o outcome, detail string, code int, ttfb time.Duration, u usage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := l.r
	r.inflight--
	if i := slices.Index(r.active, l); i >= 0 {
		r.active = slices.Delete(r.active, i, i+1)
	}
	now := time.Now()
	switch o {
	case outSuccess:
		p.learn(l, u, now.Sub(l.start), now)
	case outDown, outFailure, outOverload:
		if ks := l.key; ks != nil && !l.held {
			// It never got the prefix.
			if i := indexOf(ks.holders, r); i >= 0 {
				ks.holders = append(ks.holders[:i], ks.holders[i+1:]...)
			}
			r.dropKey(ks)
		}
	}
	if o != outCanceled || code != 0 {
		r.stats.requests[code]++
	}
	if ttfb > 0 {
		r.stats.ttfb.Observe(ttfb.Seconds())
	}
	switch o {
	case outSuccess:
		r.fails, r.ejections = 0, 0
	case outDown, outFailure:
		r.fails++
		r.stats.failures++
		r.lastErr = detail
		if o == outDown && r.healthy {
			// The process or tunnel is gone: stop routing to it until a probe says otherwise.
			r.healthy = false
			r.downAt = now
			r.dropAll()
			p.o.Logger.Warn("replica down", "replica", r.conf().Name, "error", detail)
		}
		// Eject after FailureThreshold consecutive failures, or after one failure on probation (the first
		// requests after an ejection). Failures of requests that were in flight when it was ejected do not
		// prolong the ejection.
		if now.Before(r.ejectedUntil) {
			r.fails = 0
		} else if r.fails >= p.o.FailureThreshold || r.ejections > 0 {
			r.ejections++
			d := p.o.EjectBase << min(r.ejections-1, 20)
			if d > p.o.EjectMax || d <= 0 {
				d = p.o.EjectMax
			}
			r.ejectedUntil = now.Add(d)
			r.healthy = false
			r.downAt = now
			r.fails = 0
			r.stats.ejections++
			p.o.Logger.Warn("replica ejected", "replica", r.conf().Name, "for", d, "error", detail)
		}
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	p.dispatch()
}

// probed records a health probe that started at start. A success counts only if the probe started after the
// last failure and after the ejection period, so a stale success cannot bring back a broken replica.
func (p *pool) probed(r *replica, start time.Time, ok bool, slots int, models []modelEntry, errText string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok {
		r.stats.probesOK++
	} else {
		r.stats.probesFailed++
	}
	if slots > 0 {
		r.learned = slots
	}
	if models != nil {
		r.models, r.modelsAt = models, start
	}
	switch {
	case ok && !start.Before(r.downAt) && !start.Before(r.ejectedUntil):
		if !r.healthy && !r.removed {
			p.o.Logger.Info("replica live", "replica", r.conf().Name, "slots", r.slots(p.o.DefaultSlots))
		}
		r.healthy = true
		r.lastErr = ""
	case !ok:
		if r.healthy {
			p.o.Logger.Warn("replica unhealthy", "replica", r.conf().Name, "error", errText)
			r.dropAll()
		}
		r.healthy = false
		r.lastErr = errText
	}
	p.dispatch()
}

// probeInfo says what a probe should also fetch.
func (p *pool) probeInfo(r *replica, now time.Time) (needSlots, needModels bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Both are refreshed when the replica comes back and every ModelsInterval, not on every probe.
	needModels = r.models == nil || now.Sub(r.modelsAt) >= p.o.ModelsInterval || !r.healthy
	return needModels && r.conf().Slots == 0 && r.learned == 0, needModels
}

// nextProbe is the wait before the replica's next probe: the interval, or less so that an ejected replica is
// probed as soon as its ejection ends.
func (p *pool) nextProbe(r *replica, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.o.HealthInterval
	if until := r.ejectedUntil.Sub(now); until > 0 && until < d {
		d = until + time.Millisecond
	}
	return max(d, 50*time.Millisecond)
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, w := range p.waiters {
		w.ch <- nil
	}
	p.waiters = nil
	for _, r := range p.reps {
		if !r.removed {
			r.removed = true
			close(r.stop)
		}
	}
}

func (p *pool) snapshot(now time.Time) []ReplicaStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ReplicaStatus, 0, len(p.reps))
	for _, r := range p.reps {
		s := ReplicaStatus{Name: r.conf().Name, URL: r.conf().URL, Live: r.live(now), Healthy: r.healthy,
			InFlight: r.inflight, Slots: r.slots(p.o.DefaultSlots), LastError: r.lastErr, Cache: r.cacheStats()}
		if r.ejectedUntil.After(now) {
			s.EjectedUntil = r.ejectedUntil
		}
		for _, m := range r.models {
			s.Models = append(s.Models, m.id)
		}
		out = append(out, s)
	}
	return out
}

// modelRouting reports whether live replicas serve different models, so requests must be routed by model.
func (p *pool) modelRouting(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := ""
	for _, r := range p.reps {
		if !r.live(now) {
			continue
		}
		for _, m := range r.models {
			if first == "" {
				first = m.id
			} else if m.id != first {
				return true
			}
		}
	}
	return false
}

func (p *pool) liveModels(now time.Time) []modelEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []modelEntry
	for _, r := range p.reps {
		if r.live(now) {
			out = append(out, r.models...)
		}
	}
	return out
}

// capacity sums the live replicas' slots and idle slots, and counts live and all replicas and queued requests.
func (p *pool) capacity(now time.Time) (live, total, slots, idle, queued int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.reps {
		total++
		if !r.live(now) {
			continue
		}
		live++
		s := r.slots(p.o.DefaultSlots)
		slots += s
		idle += max(s-r.inflight, 0)
	}
	return live, total, slots, idle, len(p.waiters)
}

func (r *replica) cacheStats() CacheStats {
	c := CacheStats{Hits: r.stats.hits, Misses: r.stats.misses, PromptTokens: r.stats.promptTokens,
		CachedTokens: r.stats.cachedTokens, Keys: len(r.recent)}
	if c.PromptTokens > 0 {
		c.HitRate = float64(c.CachedTokens) / float64(c.PromptTokens)
	}
	return c
}
