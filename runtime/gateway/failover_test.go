package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// TestFailoverKillRestart: 200 concurrent non-streaming requests over 3 replicas while one is killed with
// requests in flight and later restarted. No request may fail, and the restarted replica must serve again.
func TestFailoverKillRestart(t *testing.T) {
	eo := enginetest.Options{ID: "tiny", Parallel: 2, TokenDelay: 4 * time.Millisecond,
		Reply: func(string) string { return "the answer is forty two" }}
	var reps []*fakeReplica
	var rs []Replica
	for range 3 {
		f := engineReplica(t, eo, api.Options{})
		reps = append(reps, f)
		rs = append(rs, Replica{URL: f.URL()})
	}
	g, ts := newGateway(t, Options{HealthInterval: 25 * time.Millisecond, EjectBase: 200 * time.Millisecond}, rs...)
	waitLive(t, g, 3)
	if s := g.Replicas()[0].Slots; s != 2 {
		t.Fatalf("slots learned from /health = %d, want 2", s)
	}

	const n = 200
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var done, failed atomic.Int64
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, b, err := post(ctx, client, ts.URL, "", chatBody)
			if err == nil && code == http.StatusOK {
				err = checkChat(b)
			} else if err == nil {
				err = fmt.Errorf("status %d: %s", code, b)
			}
			if err != nil {
				failed.Add(1)
				mu.Lock()
				errs = append(errs, fmt.Sprintf("request %d: %v", i, err))
				mu.Unlock()
			}
			done.Add(1)
		}()
	}
	waitFor(t, "30 answers", func() bool { return done.Load() >= 30 })
	waitFor(t, "requests in flight on replica 0", func() bool { return g.Replicas()[0].InFlight > 0 })
	reps[0].kill()
	killedAt := done.Load()
	waitFor(t, "replica 0 marked down", func() bool { return !g.Replicas()[0].Live })
	waitFor(t, "40 more answers", func() bool { return done.Load() >= killedAt+40 })
	hitsBefore := reps[0].hits.Load()
	reps[0].restart()
	waitFor(t, "replica 0 live again", func() bool { return g.Replicas()[0].Live })
	wg.Wait()

	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed: %s", failed.Load(), n, strings.Join(errs[:min(len(errs), 5)], "; "))
	}
	if reps[0].hits.Load() == hitsBefore {
		t.Errorf("restarted replica 0 served no request after coming back")
	}
	g.m.mu.Lock()
	retries := g.m.retries
	g.m.mu.Unlock()
	if retries == 0 {
		t.Errorf("no retry recorded although replica 0 was killed with requests in flight")
	}
	t.Logf("killed after %d answers; retries %d; hits per replica %d/%d/%d", killedAt, retries,
		reps[0].hits.Load(), reps[1].hits.Load(), reps[2].hits.Load())
	for _, r := range g.Replicas() {
		if r.InFlight != 0 {
			t.Errorf("replica %s still has %d requests in flight", r.Name, r.InFlight)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCircuitBreaker: a replica that is healthy on /health but fails every request is ejected after
// FailureThreshold failures, gets nothing during the ejection, is probed back afterwards, and one failure on
// probation ejects it again for twice as long. Clients never see its failures.
func TestCircuitBreaker(t *testing.T) {
	broken := startFake(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			_, _ = w.Write([]byte(`{"status":"ok","slots":4}`))
			return
		}
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
	}))
	good := engineReplica(t, enginetest.Options{ID: "tiny", Parallel: 4}, api.Options{})
	const base = 400 * time.Millisecond
	// Load routing, so that the same request keeps being offered to both replicas.
	g, ts := newGateway(t, Options{HealthInterval: 20 * time.Millisecond, FailureThreshold: 2, EjectBase: base, EjectMax: 10 * time.Second,
		Affinity: AffinityOptions{Mode: AffinityOff}},
		Replica{URL: broken.URL(), Name: "broken"}, Replica{URL: good.URL(), Name: "good"})
	waitLive(t, g, 2)
	ctx := context.Background()
	send := func() {
		t.Helper()
		code, b, err := post(ctx, http.DefaultClient, ts.URL, "", chatBody)
		if err != nil || code != http.StatusOK {
			t.Fatalf("client saw %d %s %v", code, b, err)
		}
	}
	for broken.hits.Load() < 2 {
		send()
	}
	st := g.Replicas()[0]
	if st.Live || st.EjectedUntil.IsZero() {
		t.Fatalf("after 2 failures the broken replica is not ejected: %+v", st)
	}
	h := broken.hits.Load()
	for range 20 {
		send()
	}
	if broken.hits.Load() != h {
		t.Fatalf("ejected replica got %d requests", broken.hits.Load()-h)
	}
	// After the ejection a probe brings it back; one failure on probation ejects it for 2×base.
	waitFor(t, "probe after ejection", func() bool { return g.Replicas()[0].Live })
	for broken.hits.Load() == h {
		send()
	}
	st = g.Replicas()[0]
	if left := time.Until(st.EjectedUntil); left < base+base/2 {
		t.Fatalf("second ejection ends in %v, want about %v", left, 2*base)
	}
	_, m := get(t, ts.URL+"/metrics", "")
	for _, want := range []string{
		`phonellm_gateway_replica_ejections_total{replica="broken"} 2`,
		`phonellm_gateway_replica_ejected{replica="broken"} 1`,
		`phonellm_gateway_replica_requests_total{replica="broken",code="500"} 3`,
		`phonellm_gateway_replica_failures_total{replica="good"} 0`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// flaky answers with fail for the first `bad` calls of /v1/*, then with a chat completion.
func flaky(bad int, fail func(w http.ResponseWriter)) http.Handler {
	var calls atomic.Int64
	return chatOnly(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= int64(bad) {
			fail(w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"fine"}}]}`))
	})
}

func hijackClose(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = c.Close()
	}
}

// TestRetryBeforeFirstByte: failures that happen before any byte reached the client are retried (here on
// the only replica, which is allowed once no untried replica is live); 4xx answers are not.
func TestRetryBeforeFirstByte(t *testing.T) {
	cases := []struct {
		name      string
		bad       int
		fail      func(w http.ResponseWriter)
		wantCode  int
		wantHits  int64
		wantInErr string
	}{
		{"503", 1, func(w http.ResponseWriter) { http.Error(w, "loading", http.StatusServiceUnavailable) }, 200, 2, ""},
		{"429", 1, func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusTooManyRequests)
		}, 200, 2, ""},
		{"reset before headers", 1, hijackClose, 200, 2, ""},
		{"body cut short", 1, func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte(`{"object":"chat`))
			http.NewResponseController(w).Flush()
			hijackClose(w)
		}, 200, 2, ""},
		{"always 502", 99, func(w http.ResponseWriter) { http.Error(w, "upstream says no", http.StatusBadGateway) }, 502, 3, "upstream says no"},
		{"always reset", 99, hijackClose, 502, 3, "upstream_failed"},
		{"no headers in time", 1, func(w http.ResponseWriter) { time.Sleep(2 * time.Second) }, 200, 2, ""},
		{"400 not retried", 99, func(w http.ResponseWriter) { http.Error(w, "bad request", http.StatusBadRequest) }, 400, 1, "bad request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := startFake(t, flaky(c.bad, c.fail))
			g, ts := newGateway(t, Options{FailureThreshold: 100, ResponseTimeout: 300 * time.Millisecond}, Replica{URL: f.URL()})
			waitLive(t, g, 1)
			code, b, err := post(context.Background(), http.DefaultClient, ts.URL, "", chatBody)
			if err != nil {
				t.Fatal(err)
			}
			if code != c.wantCode || f.hits.Load() != c.wantHits {
				t.Fatalf("status %d after %d attempts (%s), want %d after %d", code, f.hits.Load(), b, c.wantCode, c.wantHits)
			}
			if code == 200 {
				if err := checkChat(b); err != nil {
					t.Fatal(err)
				}
			} else if !strings.Contains(string(b), c.wantInErr) {
				t.Fatalf("error body %q lacks %q", b, c.wantInErr)
			}
		})
	}
}
