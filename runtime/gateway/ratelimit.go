package gateway

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Defaults of Options.RateLimit and Options.RateBurst. A fleet of phones serves a request per slot every few
// seconds (a 7,000-token prompt), so a client sending more than 100 a second is flooding, while a batch job
// that sends a thousand requests at once is a client the queue is there for: the bucket lets it through.
const (
	DefaultRateLimit = 100
	DefaultRateBurst = 1000
)

// limiter is a token bucket per client, the buckets in a bounded LRU: when max clients are tracked the one
// seen least recently is forgotten (it comes back with a full bucket, the permissive failure).
type limiter struct {
	rate  float64 // tokens per second
	burst float64
	max   int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*list.Element // of *bucket
	lru     list.List                // front: most recently seen
}

type bucket struct {
	client string
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst, max int, now func() time.Time) *limiter {
	return &limiter{rate: rate, burst: float64(max1(burst)), max: max1(max), now: now, buckets: map[string]*list.Element{}}
}

func max1(n int) int { return max(n, 1) }

// allow takes a token from client's bucket. When none is left it returns false and how long until one is.
func (l *limiter) allow(client string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var b *bucket
	if el, ok := l.buckets[client]; ok {
		b = el.Value.(*bucket)
		l.lru.MoveToFront(el)
		if dt := now.Sub(b.last).Seconds(); dt > 0 {
			b.tokens = min(l.burst, b.tokens+dt*l.rate)
		}
	} else {
		for l.lru.Len() >= l.max {
			old := l.lru.Back()
			l.lru.Remove(old)
			delete(l.buckets, old.Value.(*bucket).client)
		}
		b = &bucket{client: client, tokens: l.burst}
		l.buckets[client] = l.lru.PushFront(b)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

// tracked returns the number of clients with a bucket.
func (l *limiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// clientAddress is the rate-limiting identity of a client without an API key: its IP address as the
// connection shows it (forwarding headers are the client's to forge), IPv6 addresses by their /64, which one
// host typically owns whole.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
