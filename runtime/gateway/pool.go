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
	model string
	tried map[*replica]bool
	ch    chan *replica // receives the assigned replica (slot taken), or nil when the gateway closes
}

// pool holds the replicas, picks one per attempt and queues requests when every slot is busy.
type pool struct {
	o *Options

	mu      sync.Mutex
	reps    []*replica
	waiters []*waiter
	rr      int
	closed  bool
}

func newPool(o *Options) *pool { return &pool{o: o} }

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
		r := &replica{base: u, stop: make(chan struct{}), kick: make(chan struct{}, 1), stats: newReplicaStats()}
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
			removed = append(removed, r)
		}
	}
	p.reps = next
	p.dispatch()
	return added, removed
}

// acquire takes a slot on the best replica for a request, waiting in the queue (at most QueueTimeout) when
// none is free. tried holds the replicas this request already failed on: they are used again only when no
// untried replica is live.
func (p *pool) acquire(ctx context.Context, model string, tried map[*replica]bool) (*replica, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errClosed
	}
	if r := p.choose(model, tried, time.Now()); r != nil {
		r.inflight++
		p.mu.Unlock()
		return r, nil
	}
	if len(p.waiters) >= p.o.QueueSize {
		p.mu.Unlock()
		return nil, errQueueFull
	}
	w := &waiter{model: model, tried: tried, ch: make(chan *replica, 1)}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()

	t := time.NewTimer(p.o.QueueTimeout)
	defer t.Stop()
	var err error
	select {
	case r := <-w.ch:
		if r == nil {
			return nil, errClosed
		}
		return r, nil
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
	if r := <-w.ch; r != nil {
		p.release(r, outCanceled, "", 0, 0)
	}
	return nil, err
}

// choose returns the live replica with a free slot and the lowest in-flight/slots ratio, preferring untried
// ones, or nil when the request must wait. Called with mu held.
func (p *pool) choose(model string, tried map[*replica]bool, now time.Time) *replica {
	n := len(p.reps)
	if n == 0 {
		return nil
	}
	filter := false
	if model != "" {
		for _, r := range p.reps {
			if r.live(now) && r.lists(model) {
				filter = true
				break
			}
		}
	}
	var best *replica
	bestTried, untriedLive := false, false
	for k := range n {
		r := p.reps[(p.rr+k)%n]
		if !r.live(now) || (filter && !r.lists(model)) {
			continue
		}
		t := tried[r]
		if !t {
			untriedLive = true
		}
		s := r.slots(p.o.DefaultSlots)
		if r.inflight >= s {
			continue
		}
		if best != nil {
			bs := best.slots(p.o.DefaultSlots)
			if t && !bestTried {
				continue
			}
			if t == bestTried && r.inflight*bs >= best.inflight*s {
				continue
			}
		}
		best, bestTried = r, t
	}
	if best == nil || (bestTried && untriedLive) {
		return nil
	}
	p.rr++
	return best
}

// dispatch hands free slots to queued requests in arrival order. Called with mu held after anything that may
// free capacity.
func (p *pool) dispatch() {
	if len(p.waiters) == 0 {
		return
	}
	now := time.Now()
	kept := p.waiters[:0]
	for _, w := range p.waiters {
		if r := p.choose(w.model, w.tried, now); r != nil {
			r.inflight++
			w.ch <- r
			continue
		}
		kept = append(kept, w)
	}
	clear(p.waiters[len(kept):])
	p.waiters = kept
}

// release returns a slot, feeds the circuit breaker and counts the attempt (code 0: no HTTP answer; ttfb 0:
// not measured).
func (p *pool) release(r *replica, o outcome, detail string, code int, ttfb time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.inflight--
	now := time.Now()
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
			InFlight: r.inflight, Slots: r.slots(p.o.DefaultSlots), LastError: r.lastErr}
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
