package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// clock is a manual clock for the limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestLimiterBucket(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := newLimiter(2, 3, 100, c.now) // 2 per second, bursts of 3
	for i := range 3 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("burst request %d refused", i)
		}
	}
	ok, wait := l.allow("a")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("4th request: ok %v wait %v, want refused for 500ms", ok, wait)
	}
	if ok, _ := l.allow("b"); !ok {
		t.Fatal("another client shares a's bucket")
	}
	c.advance(250 * time.Millisecond)
	if ok, wait := l.allow("a"); ok || wait != 250*time.Millisecond {
		t.Fatalf("after 250ms: ok %v wait %v", ok, wait)
	}
	c.advance(250 * time.Millisecond)
	if ok, _ := l.allow("a"); !ok {
		t.Fatal("refill: a token after 500ms at 2/s")
	}
	// A long pause refills to the burst, not beyond.
	c.advance(time.Hour)
	for i := range 3 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("after a pause, request %d refused", i)
		}
	}
	if ok, _ := l.allow("a"); ok {
		t.Fatal("bucket grew past its burst")
	}
	// The clock going backwards (it is wall time) must not mint tokens or panic.
	c.advance(-time.Minute)
	if ok, _ := l.allow("a"); ok {
		t.Fatal("a backwards clock refilled the bucket")
	}
}

// TestLimiterBounded: a flood of distinct clients (rotating addresses) keeps at most max buckets.
func TestLimiterBounded(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	l := newLimiter(1, 1, 1000, c.now)
	for i := range 100_000 {
		l.allow("client-" + strconv.Itoa(i))
	}
	if n := l.tracked(); n != 1000 {
		t.Fatalf("%d buckets tracked, want 1000", n)
	}
	// The most recent clients are the ones kept: the last one is still limited.
	if ok, _ := l.allow("client-99999"); ok {
		t.Fatal("the most recent client lost its bucket")
	}
}

func TestClientAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:5000":               "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443":   "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":     "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:80":        "192.0.2.7",
		"not an address":               "not an address",
		"[fe80::1%eth0]:80":            "fe80::/64",
		"[2001:db8:1:3:3:4:5:6]:443":   "2001:db8:1:3::/64",
		"127.0.0.1:1":                  "127.0.0.1",
		"[2001:db8::]:0":               "2001:db8::/64",
		"[2001:db8:0:0:1::]:9":         "2001:db8::/64",
		"[2001:0db8:0000:0000::1]:443": "2001:db8::/64",
	} {
		r := &http.Request{RemoteAddr: addr}
		if got := clientAddress(r); got != want {
			t.Errorf("clientAddress(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestRateLimitPerKey: each API key has its own bucket; over it the gateway answers 429 with Retry-After
// (OpenAI's rate_limit_error), never reaching the replica, and the bucket refills with time.
func TestRateLimitPerKey(t *testing.T) {
	rep := engineReplica(t, enginetest.Options{ID: "tiny", Parallel: 4}, api.Options{})
	g, ts := newGateway(t, Options{APIKeys: []string{"key-one-0001", "key-two-0002"}, RateLimit: 1, RateBurst: 2},
		Replica{URL: rep.URL()})
	c := &clock{t: time.Unix(5000, 0)}
	g.limiter.now = c.now
	waitLive(t, g, 1)
	ctx := context.Background()
	send := func(key string) (int, http.Header) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", stringsReader(chatBody))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	for i := range 2 {
		if code, _ := send("key-one-0001"); code != 200 {
			t.Fatalf("request %d within the burst: %d", i, code)
		}
	}
	hits := rep.hits.Load()
	code, h := send("key-one-0001")
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "1" {
		t.Fatalf("over the limit: %d, Retry-After %q", code, h.Get("Retry-After"))
	}
	if rep.hits.Load() != hits {
		t.Fatal("a rate-limited request reached the replica")
	}
	if code, _ := send("key-two-0002"); code != 200 {
		t.Fatalf("the other key was limited too: %d", code)
	}
	// A wrong key is refused as unauthorized, not counted against anyone.
	if code, _ := send("key-three"); code != http.StatusUnauthorized {
		t.Fatalf("unknown key: %d", code)
	}
	c.advance(time.Second)
	if code, _ := send("key-one-0001"); code != 200 {
		t.Fatalf("after refill: %d", code)
	}
	if code, _ := send("key-one-0001"); code != http.StatusTooManyRequests {
		t.Fatalf("second after refill: %d", code)
	}
	// /health is never limited.
	for range 5 {
		if code, _ := get(t, ts.URL+"/health", ""); code != 200 {
			t.Fatalf("/health: %d", code)
		}
	}
	_, metrics := get(t, ts.URL+"/metrics", "key-two-0002")
	if want := "phonellm_gateway_rate_limited_total 2"; !containsLine(string(metrics), want) {
		t.Fatalf("metrics lack %q", want)
	}
}

// TestRateLimitPerAddress: without API keys the bucket belongs to the client address.
func TestRateLimitPerAddress(t *testing.T) {
	g, err := New(Options{RateLimit: 1, RateBurst: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	c := &clock{t: time.Unix(0, 0)}
	g.limiter.now = c.now
	call := func(addr string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
		req.RemoteAddr = addr
		g.ServeHTTP(rec, req)
		return rec.Code
	}
	if call("192.0.2.1:1000") != 200 || call("192.0.2.1:1001") != 429 || call("192.0.2.2:1000") != 200 {
		t.Fatal("per-address buckets")
	}
	if call("[2001:db8:1:2::1]:1") != 200 || call("[2001:db8:1:2::ffff]:2") != 429 {
		t.Fatal("one /64 is one client")
	}
	if s := fmt.Sprint(call("[2001:db8:1:3::1]:1")); s != "200" {
		t.Fatalf("another /64: %s", s)
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

func containsLine(text, line string) bool { return strings.Contains("\n"+text, "\n"+line+"\n") }
