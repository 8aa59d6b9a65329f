package api

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/internal/memstat"
	"github.com/phonellm/phonellm/internal/testkit/abuse"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// maxAbuseRSS is issue 14's bound on peak memory growth under abuse.
const maxAbuseRSS = 1536 << 20

// TestAbuse is issue 14's server abuse acceptance for serve, on the fake engine: every attack at once
// (internal/testkit/abuse) while /health keeps answering; afterwards every slot, queue place, prep worker
// and body byte is free, no goroutine is left behind, and peak RSS grew less than 1.5 GB.
func TestAbuse(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	memstat.ResetPeak()
	before := memstat.PeakRSS()
	f := enginetest.NewFake(enginetest.Options{Parallel: 2, ContextLength: 2048, TokenDelay: time.Millisecond})
	s := New(Options{APIKey: "abuse-test-key", QueueSize: 16, RequestTimeout: time.Minute,
		// Short enough that the slow attacks end within seconds, long enough that a well-formed client
		// of this same process, descheduled on a loaded machine, still sends its headers in time.
		HTTP: httpx.ServerOptions{ReadHeaderTimeout: 3 * time.Second, ReadTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
			WriteTimeout: 5 * time.Second, ShutdownTimeout: time.Second}})
	s.SetEngine(f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()

	rep := abuse.Run(t, abuse.Target{URL: "http://" + ln.Addr().String(), Key: "abuse-test-key", Model: "fake"})
	t.Logf("%s", rep)
	if rep.Statuses["crowd: client chat"][200] == 0 {
		t.Errorf("no well-formed chat was served during the abuse: %v", rep.Statuses["crowd: client chat"])
	}

	s.mu.Lock()
	inflight, busy, queued := s.inflight, s.busy, s.queued
	s.mu.Unlock()
	if inflight != 0 || busy != 0 || queued != 0 || len(s.prep) != 0 || s.budget.Used() != 0 {
		t.Errorf("after the abuse: %d in flight, %d busy, %d queued, %d prep workers, %d body bytes held",
			inflight, busy, queued, len(s.prep), s.budget.Used())
	}
	if grew := memstat.PeakRSS() - before; grew > maxAbuseRSS && !raceEnabled {
		t.Errorf("peak RSS grew by %d MiB under abuse, limit %d MiB", grew>>20, maxAbuseRSS>>20)
	} else {
		t.Logf("peak RSS grew by %d MiB", grew>>20)
	}

	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	waitGoroutines(t, goroutines)
}

// waitGoroutines waits for the goroutine count to come back to about n (a few belong to the runtime and
// net/http's idle machinery).
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > n+5 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}
