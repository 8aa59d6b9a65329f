package httpx

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestReadBodyGrowsWithWhatArrives(t *testing.T) {
	budget := NewBudget(1 << 20)
	// A declared 16 MiB with one byte sent: the reservation is the first small buffer, not 16 MiB.
	r := httptest.NewRequest("POST", "/", strings.NewReader("{"))
	r.ContentLength = 16 << 20
	body, release, err := ReadBody(r, 32<<20, budget)
	if err != nil || string(body) != "{" {
		t.Fatalf("%q %v", body, err)
	}
	if u := budget.Used(); u > 4<<10 {
		t.Fatalf("reserved %d bytes for a 1-byte body", u)
	}
	release()
	release() // idempotent
	if budget.Used() != 0 {
		t.Fatalf("budget not returned: %d", budget.Used())
	}

	// Exactly the limit passes; one byte more is a MaxBytesError, declared or not.
	for _, c := range []struct {
		n        int
		declared bool
		ok       bool
	}{{1000, false, true}, {1001, false, false}, {1001, true, false}, {0, false, true}} {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(make([]byte, c.n)))
		if !c.declared {
			r.ContentLength = -1
		}
		body, release, err := ReadBody(r, 1000, budget)
		var mbe *http.MaxBytesError
		if c.ok != (err == nil) || (!c.ok && !errors.As(err, &mbe)) || (c.ok && len(body) != c.n) {
			t.Errorf("%+v: len %d err %v", c, len(body), err)
		}
		release()
	}

	// Bodies held at once are bounded by the budget: the third 300 KB body does not fit 1 MiB.
	var releases []func()
	for i := range 4 {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(make([]byte, 300<<10)))
		_, rel, err := ReadBody(r, 1<<20, budget)
		releases = append(releases, rel)
		if i < 2 && err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		if i == 3 && !errors.Is(err, ErrBusy) {
			t.Fatalf("body %d: %v, want ErrBusy", i, err)
		}
	}
	if budget.Used() > 1<<20 {
		t.Fatalf("budget overdrawn: %d", budget.Used())
	}
	for _, rel := range releases {
		rel()
	}
	if budget.Used() != 0 {
		t.Fatalf("budget not returned: %d", budget.Used())
	}
	if e := BodyError(ErrBusy, 0); e.Status != 429 || e.RetryAfter <= 0 {
		t.Fatalf("%+v", e)
	}
	if e := BodyError(&http.MaxBytesError{Limit: 5}, 0); e.Status != 413 || !strings.Contains(e.Message, "5 bytes") {
		t.Fatalf("%+v", e)
	}
}

func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	a, b := <-accepted, <-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted while two were open")
	case <-time.After(100 * time.Millisecond):
	}
	if ln.Open() != 2 {
		t.Fatalf("open %d", ln.Open())
	}
	a.Close()
	a.Close() // a second Close must not free a second place
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("closing a connection did not let the next one in")
	}
	b.Close()
	ln.Close()
	for range accepted {
	}
	if ln.Open() != 0 {
		t.Fatalf("open %d after closing all", ln.Open())
	}
}

// startServe runs Serve on loopback with o and returns its address and a stop function that waits for it.
func startServe(t *testing.T, h http.Handler, o ServerOptions) (string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, o) }()
	var once atomic.Bool
	stop := func() error {
		if !once.CompareAndSwap(false, true) {
			return nil
		}
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Serve did not return")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), stop
}

// waitClosed reads from c until the server closes it, failing after a generous bound (a hang guard, not a
// timing assertion).
func waitClosed(t *testing.T, c net.Conn, what string) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open", what)
	}
	return b
}

func TestServeClosesSlowClients(t *testing.T) {
	var handled atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		_, err := io.ReadAll(r.Body)
		if err != nil {
			WriteError(w, BodyError(err, 0))
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	addr, _ := startServe(t, h, ServerOptions{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 400 * time.Millisecond,
		IdleTimeout: 300 * time.Millisecond})

	// Slowloris headers: a request line and one header, then silence.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
	waitClosed(t, c, "slow headers")

	// Slow body: headers promise 1000 bytes, one arrives.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
	got := waitClosed(t, c2, "slow body")
	if !bytes.Contains(got, []byte(" 408 ")) {
		t.Errorf("slow body answered %q, want 408", got)
	}

	// Idle keep-alive connection: served once, then closed after IdleTimeout.
	c3, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	fmt.Fprintf(c3, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	got = waitClosed(t, c3, "idle connection")
	if !bytes.Contains(got, []byte("200 OK")) {
		t.Errorf("idle connection got %q", got)
	}
	if handled.Load() != 2 {
		t.Errorf("handler ran %d times, want 2 (slow headers never reach it)", handled.Load())
	}
}

// TestServeLongAnswerOutlivesReadTimeout: ReadTimeout bounds receiving the request, not producing the
// answer; a generation that takes longer than it, with or without a body, is neither cancelled nor cut.
func TestServeLongAnswerOutlivesReadTimeout(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", 500)
		case <-time.After(4 * readTimeout):
			_, _ = w.Write([]byte("done"))
		}
	})
	addr, _ := startServe(t, h, ServerOptions{ReadTimeout: readTimeout})
	for _, body := range []string{`{"x":1}`, ""} {
		method := "POST"
		if body == "" {
			method = "GET"
		}
		req, _ := http.NewRequest(method, "http://"+addr+"/", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "done" {
			t.Errorf("%s: %d %q: the request was cancelled by the read deadline", method, resp.StatusCode, b)
		}
	}
}

// TestServeDropsClientThatStopsReading: a stream to a client that stopped reading fails its writes after
// WriteTimeout, which cancels the work, while a client that keeps reading is served however long it takes.
func TestServeDropsClientThatStopsReading(t *testing.T) {
	failed := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("data: x\n\n"), 8<<10)
		rc := http.NewResponseController(w)
		for range 10_000 { // at most ~700 MB: far more than any socket buffer
			if _, err := w.Write(chunk); err != nil {
				failed <- err
				return
			}
			if err := rc.Flush(); err != nil {
				failed <- err
				return
			}
		}
		failed <- nil
	})
	addr, _ := startServe(t, h, ServerOptions{WriteTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	if _, err := br.ReadString('\n'); err != nil { // the status line: the stream started
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("the handler wrote everything to a client that stopped reading")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("writes to a client that stopped reading never failed")
	}
}

func TestServeGracefulShutdown(t *testing.T) {
	started := make(chan struct{})
	var finished atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-time.After(300 * time.Millisecond):
			finished.Store(true)
			_, _ = w.Write([]byte("done"))
		case <-r.Context().Done():
		}
	})
	addr, stop := startServe(t, h, ServerOptions{ShutdownTimeout: 30 * time.Second})
	res := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			res <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- string(b)
	}()
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := <-res; got != "done" || !finished.Load() {
		t.Fatalf("request in flight during shutdown got %q", got)
	}

	// Past the grace period a request in flight is cancelled and Serve returns.
	block := make(chan struct{})
	cancelled := make(chan struct{})
	h2 := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(block)
		<-r.Context().Done()
		close(cancelled)
	})
	addr, stop = startServe(t, h2, ServerOptions{ShutdownTimeout: 50 * time.Millisecond})
	go func() {
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-block
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("request still running after the shutdown grace period")
	}
}
