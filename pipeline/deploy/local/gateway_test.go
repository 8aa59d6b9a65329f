package local

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/runtime/gateway"
)

// TestGatewayOverFleet is the acceptance scenario with real processes: 3 supervised replicas behind the
// gateway, 200 concurrent requests, one replica SIGKILLed mid-run and restarted by its supervisor. No
// request may fail and the restarted replica must serve again.
func TestGatewayOverFleet(t *testing.T) {
	t.Setenv("PHONELLM_TEST_FLEET_KEY", testKey)
	t.Setenv("PHONELLM_FAKE_TOKEN_DELAY", "3ms")
	f := testFleet(t, t.TempDir())
	spec := testSpec(t, 3)
	spec.APIKeyEnv = "PHONELLM_TEST_FLEET_KEY"
	d := deployT(t, f, spec)
	ctx := context.Background()
	eps, err := f.Endpoints(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	var reps []gateway.Replica
	for _, e := range eps {
		reps = append(reps, gateway.Replica{URL: e.URL, Slots: e.Slots, APIKey: os.Getenv(e.APIKeyEnv)})
	}
	g, err := gateway.New(gateway.Options{APIKeys: []string{"gateway-client-key"}, HealthInterval: 25 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetReplicas(reps); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(g)
	defer ts.Close()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		live := 0
		for _, r := range g.Replicas() {
			if r.Live {
				live++
			}
		}
		if live == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway replicas %+v", g.Replicas())
		}
		time.Sleep(10 * time.Millisecond)
	}

	const n = 200
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var done atomic.Int64
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"is this fraud?"}],"max_tokens":12}`))
			req.Header.Set("Authorization", "Bearer gateway-client-key")
			resp, err := client.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(string(b), `"chat.completion"`) {
					err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
				}
			}
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("request %d: %v", i, err))
				mu.Unlock()
			}
		}()
	}
	for done.Load() < 40 {
		time.Sleep(time.Millisecond)
	}
	st, err := f.Status(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	victim := details(t, st)[0]
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := done.Load()
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed after the kill at %d: %s", len(failures), n, killedAt, strings.Join(failures[:min(5, len(failures))], "; "))
	}
	waitStatus(t, f, d.ID, "replica 0 restarted", func(st deploy.Status, ds []Detail) bool {
		return ds[0].Restarts == 1 && st.Replicas[0].Healthy
	})
	for deadline := time.Now().Add(2 * time.Minute); !g.Replicas()[0].Live; {
		if time.Now().After(deadline) {
			t.Fatal("the gateway never took the restarted replica back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The restarted replica serves through the gateway again. The prompts differ: the gateway routes one prompt
	// to the replica that holds its prefix (affinity), and new prefixes to a replica with room for them, which
	// the restarted replica is once the others hold theirs.
	before := requestsOn(t, ts.URL, eps[0].URL)
	for i := range 12 {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(`{"messages":[{"role":"user","content":"again %d"}],"max_tokens":2}`, i)))
		req.Header.Set("Authorization", "Bearer gateway-client-key")
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("after restart: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	if after := requestsOn(t, ts.URL, eps[0].URL); after <= before {
		t.Errorf("restarted replica got no request through the gateway (%d -> %d)", before, after)
	}
	t.Logf("replica 0 killed after %d of %d answers; 0 failed", killedAt, n)
}

// requestsOn reads the gateway's count of 200 answers from the replica at url.
func requestsOn(t *testing.T, gw, url string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, gw+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer gateway-client-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	name := strings.TrimPrefix(url, "http://")
	prefix := fmt.Sprintf(`phonellm_gateway_replica_requests_total{replica="%s",code="200"} `, name)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}
