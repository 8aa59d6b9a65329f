package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// rubricBody is a review request: one of the rubrics as the system message, a case as the user message.
func rubricBody(rubric, c int) string {
	sys := fmt.Sprintf("Rubric %d. ", rubric) + strings.Repeat(fmt.Sprintf("Rule %d: weigh the evidence. ", rubric), 100)
	return chat("tiny", "system", sys, "user", fmt.Sprintf("Case %d: a card payment from abroad.", c))
}

// cachedOf returns the prompt and cached tokens a chat completion reports.
func cachedOf(t *testing.T, b []byte) (prompt, cached int) {
	t.Helper()
	prompt, cached, err := usageOf(b)
	if err != nil {
		t.Fatal(err)
	}
	return prompt, cached
}

// usageOf is cachedOf for goroutines other than the test's.
func usageOf(b []byte) (prompt, cached int, err error) {
	var r struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, 0, fmt.Errorf("%v: %.200s", err, b)
	}
	return r.Usage.PromptTokens, r.Usage.Details.CachedTokens, nil
}

// rubricReplicas start n fake replicas whose prompt evaluation takes 50 µs a token: a miss (a ~2,900-token
// rubric) costs ~150 ms, a hit well under a millisecond, so waiting for the replica that holds a rubric stays
// cheaper than a miss elsewhere even when the machine (or the race detector) adds tens of milliseconds to
// every request — the router's decision, which these tests check, is not a coin toss on a busy machine.
func rubricReplicas(t *testing.T, n, parallel int) ([]*fakeReplica, []Replica) {
	t.Helper()
	eo := enginetest.Options{ID: "tiny", Parallel: parallel, ContextLength: 8192, PromptDelay: 50 * time.Microsecond,
		Reply: func(string) string { return "RISK_LEVEL: 2" }}
	var fs []*fakeReplica
	var rs []Replica
	for i := range n {
		f := engineReplica(t, eo, api.Options{})
		fs = append(fs, f)
		rs = append(rs, Replica{URL: f.URL(), Name: fmt.Sprintf("replica-%d", i)})
	}
	return fs, rs
}

// TestAffinityKeepsRubricsApart: requests for three rubrics in a shuffled order over three one-slot replicas.
// With affinity each rubric settles on its own replica after its first request, so every later request reuses
// its rubric; routed by load (RoutingHeader), the same sequence reuses far less. The replicas' own reports
// (cached_tokens) are what is counted, by the client and by the gateway's /metrics and status.
func TestAffinityKeepsRubricsApart(t *testing.T) {
	_, rs := rubricReplicas(t, 3, 1)
	g, ts := newGateway(t, Options{}, rs...)
	waitLive(t, g, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, 24)
	for i := range order {
		order[i] = rng.IntN(3)
	}
	run := func(load bool) (hits int) {
		for i, rb := range order {
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(rubricBody(rb, i)))
			if load {
				req.Header.Set(RoutingHeader, "load")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d: %s %v", resp.StatusCode, b, err)
			}
			p, c := cachedOf(t, b)
			if 2*c >= p {
				hits++
			}
		}
		return hits
	}
	aff := run(false)
	// Every request but the first of each rubric is a hit.
	if want := len(order) - 3; aff != want {
		t.Errorf("affinity: %d hits of %d, want %d", aff, len(order), want)
	}
	var hitsPerReplica []uint64
	for _, r := range g.Replicas() {
		hitsPerReplica = append(hitsPerReplica, r.Cache.Hits)
		if r.Cache.Misses != 1 || r.Cache.Keys != 1 {
			t.Errorf("%s: %+v, want one miss (its rubric's first request) and one key", r.Name, r.Cache)
		}
	}
	load := run(true)
	t.Logf("hits: affinity %d, load %d of %d; per replica (affinity) %v", aff, load, len(order), hitsPerReplica)
	if load >= aff {
		t.Errorf("load routing reused as often as affinity (%d vs %d hits)", load, aff)
	}
	_, m := get(t, ts.URL+"/metrics", "")
	for _, want := range []string{
		`phonellm_gateway_routed_total{decision="holder"} 21`,
		`phonellm_gateway_routed_total{decision="new"} 3`,
		fmt.Sprintf(`phonellm_gateway_routed_total{decision="load"} %d`, len(order)),
		`phonellm_gateway_affinity_keys 3`,
		`phonellm_gateway_replica_cache_hit_rate{replica="replica-0"}`,
		`phonellm_gateway_replica_prompt_token_seconds{replica="replica-1"}`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestAffinityFailover: six clients send reviews for three rubrics to four one-slot replicas. The replica
// holding rubric 0 is killed with requests in flight: no request fails; once the replica is marked down (by
// the first request that fails on it, or by the first probe after the kill: within one health interval) it
// gets no request and its keys move: rubric 0's requests go to a live replica, and they reuse their prefix
// there again. No timing thresholds: the only deadlines are hang guards.
func TestAffinityFailover(t *testing.T) {
	fs, rs := rubricReplicas(t, 4, 1)
	g, ts := newGateway(t, Options{HealthInterval: 50 * time.Millisecond, EjectBase: 100 * time.Millisecond}, rs...)
	waitLive(t, g, 4)
	type result struct {
		rubric         int
		after          bool // sent after the replica was marked down
		prompt, cached int
		code           int
		err            error
		body           string
	}
	var mu sync.Mutex
	var results []result
	var down atomic.Bool
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	stop := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	// However the test ends (a hang guard firing included), the clients stop before the next test starts.
	t.Cleanup(func() {
		stopOnce.Do(func() { close(stop) })
		cancel()
		wg.Wait()
	})
	var sent atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				rb := rng.IntN(3)
				after := down.Load()
				code, b, err := post(ctx, client, ts.URL, "", rubricBody(rb, c*10000+i))
				res := result{rubric: rb, after: after, code: code, err: err, body: string(b)}
				if err == nil && code == 200 {
					res.prompt, res.cached, res.err = usageOf(b)
				}
				sent.Add(1)
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
			}
		}()
	}
	waitFor(t, "60 answers", func() bool { return sent.Load() >= 60 })
	rk, _ := keyOf([]byte(rubricBody(0, 0)), "/v1/chat/completions", &g.o.Affinity)
	k := rk.key
	// The victim is rubric 0's holder, taken while it has requests in flight. (Early on a rubric may have no
	// holder for a moment: a one-slot replica that takes another rubric drops the one it held.)
	var ks *keyState
	var victimRep *replica
	waitFor(t, "rubric 0's holder with requests in flight", func() bool {
		g.pool.mu.Lock()
		defer g.pool.mu.Unlock()
		ks = g.pool.keys.m[k]
		if ks == nil || len(ks.holders) == 0 || ks.holders[0].inflight == 0 {
			return false
		}
		victimRep = ks.holders[0]
		return true
	})
	g.pool.mu.Lock()
	victim := indexOf(g.pool.reps, victimRep)
	g.pool.mu.Unlock()
	fs[victim].kill()
	waitFor(t, "the victim marked down", func() bool { return !g.Replicas()[victim].Live })
	down.Store(true)
	attempts := func() (n uint64) {
		g.pool.mu.Lock()
		defer g.pool.mu.Unlock()
		for _, c := range victimRep.stats.requests {
			n += c
		}
		return n
	}
	before := attempts()
	marked := sent.Load()
	waitFor(t, "150 answers after the kill", func() bool { return sent.Load() >= marked+150 })
	stopOnce.Do(func() { close(stop) })
	wg.Wait()

	var failed []string
	hitsAfter, rubric0After := 0, 0
	for _, r := range results {
		if r.err != nil || r.code != 200 {
			failed = append(failed, fmt.Sprintf("%d %v %.200s", r.code, r.err, r.body))
			continue
		}
		if r.after && r.rubric == 0 {
			rubric0After++
			if 2*r.cached >= r.prompt {
				hitsAfter++
			}
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d requests failed: %s", len(failed), len(results), strings.Join(failed[:min(3, len(failed))], "; "))
	}
	if n := attempts() - before; n != 0 {
		t.Errorf("the replica got %d attempts after it was marked down", n)
	}
	g.pool.mu.Lock()
	stillHeld := indexOf(ks.holders, victimRep) >= 0
	g.pool.mu.Unlock()
	if stillHeld {
		t.Errorf("rubric 0 is still held by the killed replica")
	}
	st := g.Replicas()
	t.Logf("victim replica-%d; after the kill rubric 0: %d hits of %d; replicas %+v / %+v / %+v / %+v", victim, hitsAfter, rubric0After,
		st[0].Cache, st[1].Cache, st[2].Cache, st[3].Cache)
	// Rubric 0 reuses its prefix on its new holder: most of its requests after the move are hits.
	if rubric0After == 0 || 2*hitsAfter < rubric0After {
		t.Errorf("rubric 0 after the kill: %d hits of %d requests", hitsAfter, rubric0After)
	}
}
