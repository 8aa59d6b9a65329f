package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// fakeReplica is a real HTTP server on a fixed loopback port that can be killed (every connection dropped at
// once, as when a phone or process dies) and restarted on the same port.
type fakeReplica struct {
	t       *testing.T
	addr    string
	handler http.Handler
	hits    atomic.Int64 // requests under /v1/ except /v1/models

	mu  sync.Mutex
	srv *http.Server
}

func startFake(t *testing.T, h http.Handler) *fakeReplica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeReplica{t: t, addr: ln.Addr().String()}
	f.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Path) > 4 && r.URL.Path[:4] == "/v1/" && r.URL.Path != "/v1/models" {
			f.hits.Add(1)
		}
		h.ServeHTTP(w, r)
	})
	f.serve(ln)
	t.Cleanup(f.kill)
	return f
}

func (f *fakeReplica) URL() string { return "http://" + f.addr }

func (f *fakeReplica) serve(ln net.Listener) {
	srv := &http.Server{Handler: f.handler, ErrorLog: nil}
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// kill closes the listener and every connection, in flight or idle.
func (f *fakeReplica) kill() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// restart listens again on the same address.
func (f *fakeReplica) restart() {
	f.t.Helper()
	var ln net.Listener
	var err error
	for range 100 {
		if ln, err = net.Listen("tcp", f.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		f.t.Fatalf("restart %s: %v", f.addr, err)
	}
	f.serve(ln)
}

// chatOnly passes POST /v1/chat/completions to h, answers GET /health with {"status":"ok"} and everything
// else (the gateway's /metrics and /v1/models probes) with 404, so test handlers see only chat requests.
func chatOnly(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		case "/v1/chat/completions":
			h(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// engineReplica is a fakeReplica running phonellm's real API server over the fake engine.
func engineReplica(t *testing.T, eo enginetest.Options, ao api.Options) *fakeReplica {
	t.Helper()
	s := api.New(ao)
	s.SetEngine(enginetest.NewFake(eo))
	return startFake(t, s.Handler())
}

// newGateway starts a gateway over the replicas, served by an httptest server.
func newGateway(t *testing.T, o Options, reps ...Replica) (*Gateway, *httptest.Server) {
	t.Helper()
	if o.HealthInterval == 0 {
		o.HealthInterval = 50 * time.Millisecond
	}
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SetReplicas(reps); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(g)
	t.Cleanup(func() {
		ts.Close()
		g.Close()
	})
	return g, ts
}

// waitLive waits until n replicas are live.
func waitLive(t *testing.T, g *Gateway, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for time.Now().Before(deadline) {
		live := 0
		for _, r := range g.Replicas() {
			if r.Live {
				live++
			}
		}
		if live == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("replicas never became %d live: %+v", n, g.Replicas())
}

const chatBody = `{"model":"tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`

// post sends a chat completion and returns the status and body.
func post(ctx context.Context, client *http.Client, url, key, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewBufferString(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// checkChat fails unless b is a complete chat completion.
func checkChat(b []byte) error {
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	if c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].Message.Content == "" {
		return errors.New("not a chat completion: " + string(b))
	}
	return nil
}

// get fetches path from the gateway.
func get(t *testing.T, url, key string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
