package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// TestAuth: several client keys are accepted, anything else gets 401 (health excepted), and the replica
// receives its own key, never the client's.
func TestAuth(t *testing.T) {
	var seen sync.Map
	inner := api.New(api.Options{APIKey: "replica-secret-key"})
	inner.SetEngine(enginetest.NewFake(enginetest.Options{ID: "tiny"}))
	f := startFake(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization"), true)
		inner.Handler().ServeHTTP(w, r)
	}))
	g, ts := newGateway(t, Options{APIKeys: []string{"client-key-one", "client-key-two"}},
		Replica{URL: f.URL(), APIKey: "replica-secret-key"})
	waitLive(t, g, 1)
	ctx := context.Background()
	for _, c := range []struct {
		key  string
		want int
	}{{"", 401}, {"wrong", 401}, {"client-key-one ", 200}, {"client-key-one", 200}, {"client-key-two", 200}, {"client-key-on", 401}} {
		code, b, err := post(ctx, http.DefaultClient, ts.URL, c.key, chatBody)
		if err != nil || code != c.want {
			t.Errorf("key %q: %d %s %v, want %d", c.key, code, b, err, c.want)
		}
		if code == 401 && !strings.Contains(string(b), "invalid_api_key") {
			t.Errorf("401 body %s", b)
		}
	}
	if code, _ := get(t, ts.URL+"/health", ""); code != 200 {
		t.Errorf("/health without a key: %d", code)
	}
	for _, p := range []string{"/metrics", "/v1/models"} {
		if code, _ := get(t, ts.URL+p, ""); code != 401 {
			t.Errorf("%s without a key: %d, want 401", p, code)
		}
		if code, _ := get(t, ts.URL+p, "client-key-two"); code != 200 {
			t.Errorf("%s with a key: %d", p, code)
		}
	}
	seen.Range(func(k, _ any) bool {
		if strings.Contains(k.(string), "client-key") {
			t.Errorf("the replica received the client's key %q", k)
		}
		return true
	})
	if _, err := New(Options{APIKeys: []string{""}}); err == nil {
		t.Error("an empty key was accepted")
	}
}

func modelIDs(t *testing.T, url string) []string {
	t.Helper()
	code, b := get(t, url+"/v1/models", "")
	var l struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &l); err != nil || code != 200 || l.Object != "list" {
		t.Fatalf("/v1/models: %d %s %v", code, b, err)
	}
	var ids []string
	for _, d := range l.Data {
		ids = append(ids, d.ID)
	}
	return ids
}

// TestModelsAndRouting: /v1/models lists what the live replicas serve, and a request names its replica by
// model when replicas serve different models.
func TestModelsAndRouting(t *testing.T) {
	a := engineReplica(t, enginetest.Options{ID: "alpha"}, api.Options{})
	b := engineReplica(t, enginetest.Options{ID: "beta"}, api.Options{})
	g, ts := newGateway(t, Options{}, Replica{URL: a.URL()}, Replica{URL: b.URL()})
	waitLive(t, g, 2)
	if ids := modelIDs(t, ts.URL); !slices.Equal(ids, []string{"alpha", "beta"}) {
		t.Fatalf("models %v", ids)
	}
	for range 6 {
		code, body, err := post(context.Background(), http.DefaultClient, ts.URL, "", strings.Replace(chatBody, "tiny", "beta", 1))
		if err != nil || code != 200 {
			t.Fatalf("%d %s %v", code, body, err)
		}
	}
	if a.hits.Load() != 0 || b.hits.Load() != 6 {
		t.Fatalf("model beta went to alpha %d times, beta %d", a.hits.Load(), b.hits.Load())
	}
	if code, body := get(t, ts.URL+"/v1/models/beta", ""); code != 200 || !strings.Contains(string(body), `"beta"`) {
		t.Fatalf("/v1/models/beta: %d %s", code, body)
	}
	a.kill()
	waitFor(t, "alpha down", func() bool { return !g.Replicas()[0].Live })
	if ids := modelIDs(t, ts.URL); !slices.Equal(ids, []string{"beta"}) {
		t.Fatalf("models after alpha died: %v", ids)
	}
	if code, _ := get(t, ts.URL+"/v1/models/alpha", ""); code != 404 {
		t.Fatalf("/v1/models/alpha after it died: %d", code)
	}
}

// TestSlotsRespected: the gateway never has more requests on a replica than its slots; the rest wait in the
// gateway's queue, and a full queue answers 429 with Retry-After.
func TestSlotsRespected(t *testing.T) {
	var cur, peak atomic.Int64
	inner := api.New(api.Options{})
	inner.SetEngine(enginetest.NewFake(enginetest.Options{ID: "tiny", Parallel: 2, TokenDelay: 5 * time.Millisecond}))
	f := startFake(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			n := cur.Add(1)
			defer cur.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
		}
		inner.Handler().ServeHTTP(w, r)
	}))
	g, ts := newGateway(t, Options{}, Replica{URL: f.URL()})
	waitLive(t, g, 1)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, err := post(context.Background(), http.DefaultClient, ts.URL, "", chatBody); err != nil || code != 200 {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 || peak.Load() != 2 {
		t.Fatalf("%d failed; peak concurrency on the replica %d, want 2 (its slots)", bad.Load(), peak.Load())
	}
}

func TestQueueLimits(t *testing.T) {
	release := make(chan struct{})
	f := startFake(t, chatOnly(func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = w.Write([]byte(`{}`))
	}))
	defer close(release)
	g, ts := newGateway(t, Options{QueueSize: 1, QueueTimeout: 300 * time.Millisecond}, Replica{URL: f.URL(), Slots: 1})
	waitLive(t, g, 1)
	ctx := context.Background()
	go func() { _, _, _ = post(ctx, http.DefaultClient, ts.URL, "", chatBody) }() // takes the slot
	waitFor(t, "slot taken", func() bool { return g.Replicas()[0].InFlight == 1 })
	queued := make(chan int, 1)
	go func() {
		code, _, _ := post(ctx, http.DefaultClient, ts.URL, "", chatBody)
		queued <- code
	}()
	waitFor(t, "one queued", func() bool { _, _, _, _, q := g.pool.capacity(time.Now()); return q == 1 })
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("full queue: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code := <-queued; code != 429 {
		t.Fatalf("queued past QueueTimeout: %d, want 429", code)
	}
}

func TestNoReplica(t *testing.T) {
	_, ts := newGateway(t, Options{QueueTimeout: 50 * time.Millisecond})
	code, b, err := post(context.Background(), http.DefaultClient, ts.URL, "", chatBody)
	if err != nil || code != 503 || !strings.Contains(string(b), "no_replica") {
		t.Fatalf("%d %s %v", code, b, err)
	}
	if code, _ := get(t, ts.URL+"/health", ""); code != 503 {
		t.Fatalf("/health without replicas: %d", code)
	}
}

// TestSetReplicas: membership changes take effect at once; removed replicas get no new requests.
func TestSetReplicas(t *testing.T) {
	eo := enginetest.Options{ID: "tiny", Parallel: 2}
	a := engineReplica(t, eo, api.Options{})
	b := engineReplica(t, eo, api.Options{})
	g, ts := newGateway(t, Options{}, Replica{URL: a.URL()})
	waitLive(t, g, 1)
	if err := g.SetReplicas([]Replica{{URL: b.URL() + "/"}, {URL: b.URL()}}); err != nil {
		t.Fatal(err)
	}
	if n := len(g.Replicas()); n != 1 {
		t.Fatalf("%d replicas after setting one URL twice", n)
	}
	waitLive(t, g, 1)
	for range 5 {
		if code, _, err := post(context.Background(), http.DefaultClient, ts.URL, "", chatBody); err != nil || code != 200 {
			t.Fatal(code, err)
		}
	}
	if a.hits.Load() != 0 || b.hits.Load() != 5 {
		t.Fatalf("removed replica got %d, new one %d", a.hits.Load(), b.hits.Load())
	}
	for _, bad := range []string{"ftp://x", "127.0.0.1:80", "http://", "http://h/?q=1"} {
		if err := g.SetReplicas([]Replica{{URL: bad}}); err == nil {
			t.Errorf("URL %q accepted", bad)
		}
	}
	if err := g.SetReplicas([]Replica{{URL: "http://user:pw@127.0.0.1:1"}}); err != nil || strings.Contains(g.Replicas()[0].URL, "pw") {
		t.Errorf("userinfo kept: %v %v", g.Replicas(), err)
	}
	_, h := get(t, ts.URL+"/health", "")
	if !strings.Contains(string(h), `"replicas":1`) {
		t.Errorf("/health %s", h)
	}
}

func TestFollow(t *testing.T) {
	a := engineReplica(t, enginetest.Options{ID: "tiny"}, api.Options{})
	b := engineReplica(t, enginetest.Options{ID: "tiny"}, api.Options{})
	g, _ := newGateway(t, Options{})
	type step struct {
		rs  []Replica
		err error
	}
	steps := make(chan step)
	calls := make(chan struct{})
	list := func(ctx context.Context) ([]Replica, error) {
		select {
		case calls <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case s := <-steps:
			return s.rs, s.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Follow(ctx, time.Millisecond, list) }()
	only := func(url string) {
		t.Helper()
		if rs := g.Replicas(); len(rs) != 1 || rs[0].URL != url {
			t.Fatalf("replicas %+v, want only %s", rs, url)
		}
	}
	<-calls
	steps <- step{rs: []Replica{{URL: a.URL()}}}
	<-calls // the first answer has been applied
	only(a.URL())
	steps <- step{err: context.DeadlineExceeded} // a failing source keeps the set
	<-calls
	only(a.URL())
	steps <- step{} // so does an empty answer
	<-calls
	only(a.URL())
	steps <- step{rs: []Replica{{URL: b.URL()}}}
	<-calls
	only(b.URL())
	cancel()
	<-done
}

func TestParsers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{{`{"status":"ok","slots_idle":3,"slots_processing":1}`, 4}, {`{"status":"ok","slots":2}`, 2},
		{`{"status":"ok"}`, 0}, {`{"slots":-1}`, 0}, {`{"slots":1e9}`, 0}, {`not json`, 0}, {`{"slots_idle":3}`, 0}} {
		if got := healthSlots([]byte(c.in)); got != c.want {
			t.Errorf("healthSlots(%s) = %d, want %d", c.in, got, c.want)
		}
	}
	m := "# TYPE phonellm_slots_total gauge\nphonellm_slots_busy 1\nphonellm_slots_total 4\n"
	if got := metricSlots([]byte(m)); got != 4 {
		t.Errorf("metricSlots = %d", got)
	}
	ms := parseModels([]byte(`{"data":[{"id":"a"},{"id":""},{"x":1},{"id":"b","owned_by":"me","meta":{"path":"/home/x.gguf"}}]}`))
	if len(ms) != 2 || ms[0].id != "a" || ms[1].id != "b" || ms[1].ownedBy != "me" {
		t.Errorf("parseModels = %+v", ms)
	}
	if ms := parseModels([]byte(`[`)); ms == nil || len(ms) != 0 {
		t.Errorf("parseModels(garbage) = %#v, want empty non-nil", ms)
	}
}

func FuzzParsers(f *testing.F) {
	f.Add([]byte(`{"status":"ok","slots_idle":3,"slots_processing":1,"data":[{"id":"a"}]}`))
	f.Add([]byte("phonellm_slots_total 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n := healthSlots(b); n < 0 || n > 1024 {
			t.Fatalf("healthSlots = %d", n)
		}
		if n := metricSlots(b); n < 0 || n > 1024 {
			t.Fatalf("metricSlots = %d", n)
		}
		if ms := parseModels(b); len(ms) > maxModels {
			t.Fatalf("%d models", len(ms))
		}
		o := AffinityOptions{}
		o.defaults()
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			if k, apiErr := keyOf(b, path, &o); k.ok && (k.key == 0 || apiErr != nil || k.shared > k.total+len("user\x00")) {
				t.Fatalf("keyOf: %+v, error %v", k, apiErr)
			}
		}
		if u := parseUsage(b); u.known && (u.prompt < 0 || u.cached < 0 || u.cached > u.prompt || u.promptSec < 0) {
			t.Fatalf("parseUsage = %+v", u)
		}
		var s sseUsage
		s.write(b)
		s.endLine()
		if u := s.u; u.known && (u.cached > u.prompt || u.prompt < 0) {
			t.Fatalf("sse usage = %+v", u)
		}
	})
}
