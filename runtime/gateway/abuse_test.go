package gateway

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/internal/memstat"
	"github.com/phonellm/phonellm/internal/testkit/abuse"
	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// TestAbuse is issue 14's abuse acceptance for the gateway, in front of two replicas of phonellm's API on
// the fake engine: first the case that took the gateway to 2.2 GB (160 connections declaring 16 MiB bodies
// and sending "{"), then every attack of internal/testkit/abuse while /health keeps answering. Afterwards
// every replica slot and body byte is free and peak RSS grew less than 1.5 GB.
func TestAbuse(t *testing.T) {
	memstat.ResetPeak()
	before := memstat.PeakRSS()
	var reps []Replica
	for range 2 {
		f := engineReplica(t, enginetest.Options{ID: "tiny", Parallel: 2, ContextLength: 2048, TokenDelay: time.Millisecond},
			api.Options{QueueSize: 8})
		reps = append(reps, Replica{URL: f.URL()})
	}
	// One key for every attacker, limited to 20 requests a second in bursts of 400: the 160 held bodies all
	// reach the body reader, and the crowd meets the limit (the rate limit has its own tests too).
	g, err := New(Options{APIKeys: []string{"gateway-abuse-key"}, HealthInterval: 50 * time.Millisecond, QueueSize: 32,
		RateLimit: 20, RateBurst: 400,
		// Short enough that the slow attacks end within seconds, long enough that a well-formed client
		// of this same process, descheduled on a loaded machine, still sends its headers in time.
		HTTP: httpx.ServerOptions{ReadHeaderTimeout: 3 * time.Second, ReadTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
			WriteTimeout: 5 * time.Second, ShutdownTimeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetReplicas(reps); err != nil {
		t.Fatal(err)
	}
	waitLive(t, g, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	tgt := abuse.Target{URL: "http://" + ln.Addr().String(), Key: "gateway-abuse-key", Model: "tiny"}

	// 160 bodies declared at 16 MiB (the default limit) with one byte sent: each holds the first small
	// buffer, not 16 MiB (that was 2.5 GB).
	release := abuse.Holding(t, tgt, 160, 16<<20)
	waitFor(t, "160 bodies being read", func() bool { return g.budget.Used() >= 160*4096 })
	if used := g.budget.Used(); used > 160*4096 {
		t.Errorf("160 one-byte bodies hold %d bytes", used)
	}
	release()
	waitFor(t, "the held bodies released", func() bool { return g.budget.Used() == 0 })

	rep := abuse.Run(t, tgt)
	t.Logf("%s", rep)
	if rep.Statuses["crowd: client chat"][200] == 0 {
		t.Errorf("no well-formed chat was served during the abuse: %v", rep.Statuses["crowd: client chat"])
	}
	for _, r := range g.Replicas() {
		if r.InFlight != 0 || !r.Live {
			t.Errorf("replica %s after the abuse: %d in flight, live %v", r.Name, r.InFlight, r.Live)
		}
	}
	if used := g.budget.Used(); used != 0 {
		t.Errorf("%d body bytes still held", used)
	}
	if grew := memstat.PeakRSS() - before; grew > 1536<<20 && !raceEnabled {
		t.Errorf("peak RSS grew by %d MiB under abuse, limit 1536 MiB", grew>>20)
	} else {
		t.Logf("peak RSS grew by %d MiB", grew>>20)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
