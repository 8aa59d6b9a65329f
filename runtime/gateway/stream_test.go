package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

const streamBody = `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"hello"}]}`

func postStream(t *testing.T, ctx context.Context, url string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestStreamPassthrough: each event reaches the client before the replica writes the next one (no
// buffering), byte for byte, with the event-stream content type.
func TestStreamPassthrough(t *testing.T) {
	proceed := make(chan struct{})
	f := startFake(t, chatOnly(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		_ = rc.Flush()
		select {
		case <-proceed:
		case <-time.After(10 * time.Second):
			return
		}
		_, _ = io.WriteString(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	g, ts := newGateway(t, Options{}, Replica{URL: f.URL()})
	waitLive(t, g, 1)
	resp := postStream(t, context.Background(), ts.URL)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	first := make(chan string, 1)
	go func() {
		l, _ := br.ReadString('\n')
		first <- l
	}()
	select {
	case l := <-first:
		if l != "data: {\"n\":1}\n" {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not reach the client before the replica sent the second: the gateway buffers")
	}
	close(proceed)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: {\"n\":2}\n\ndata: [DONE]\n\n" {
		t.Fatalf("rest %q %v", rest, err)
	}
}

// TestStreamRealServer streams a completion from phonellm's API server through the gateway.
func TestStreamRealServer(t *testing.T) {
	f := engineReplica(t, enginetest.Options{ID: "tiny", Reply: func(string) string { return "streamed words" }}, api.Options{})
	g, ts := newGateway(t, Options{}, Replica{URL: f.URL()})
	waitLive(t, g, 1)
	resp := postStream(t, context.Background(), ts.URL)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasSuffix(s, "data: [DONE]\n\n") || strings.Count(s, "chat.completion.chunk") < 3 {
		t.Fatalf("stream %q", s)
	}
	var text strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if i := strings.Index(l, `"content":"`); i >= 0 {
			c := l[i+len(`"content":"`):]
			text.WriteString(c[:strings.IndexByte(c, '"')])
		}
	}
	if text.String() != "streamed words" {
		t.Fatalf("streamed text %q", text.String())
	}
}

// TestNoRetryAfterFirstByte: once bytes reached the client, a failing replica is not retried: the stream
// (or the large body) breaks and the client sees it.
func TestNoRetryAfterFirstByte(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		f := startFake(t, flaky(99, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"n\":1}\n\ndata: {\"n\":2}\n\n")
			_ = http.NewResponseController(w).Flush()
			time.Sleep(20 * time.Millisecond)
			panic(http.ErrAbortHandler)
		}))
		g, ts := newGateway(t, Options{}, Replica{URL: f.URL()})
		waitLive(t, g, 1)
		resp := postStream(t, context.Background(), ts.URL)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(b), "data: {\"n\":1}\n\ndata: {\"n\":2}\n\n") || !strings.Contains(string(b), "upstream_failed") {
			t.Fatalf("client got %q, want both events then an error event", b)
		}
		if h := f.hits.Load(); h != 1 {
			t.Fatalf("replica called %d times, want 1 (no retry after bytes were sent)", h)
		}
	})
	t.Run("large body", func(t *testing.T) {
		f := startFake(t, flaky(99, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, strings.Repeat("x", 64))
			_ = http.NewResponseController(w).Flush()
			time.Sleep(20 * time.Millisecond)
			panic(http.ErrAbortHandler)
		}))
		g, ts := newGateway(t, Options{MaxBufferedResponse: 16}, Replica{URL: f.URL()})
		waitLive(t, g, 1)
		code, b, err := post(context.Background(), http.DefaultClient, ts.URL, "", chatBody)
		if err == nil {
			t.Fatalf("client got %d %q and no error, want a broken answer", code, b)
		}
		if h := f.hits.Load(); h != 1 {
			t.Fatalf("replica called %d times, want 1", h)
		}
	})
}

// TestClientDisconnectCancelsUpstream: a client that goes away cancels the replica's request, streaming or
// not, and the slot is released.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "stream"}[streaming]
		t.Run(name, func(t *testing.T) {
			canceled := make(chan struct{})
			started := make(chan struct{})
			f := startFake(t, chatOnly(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body) // a server notices a closed connection once the body is read
				if streaming {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: {}\n\n")
					_ = http.NewResponseController(w).Flush()
				}
				close(started)
				select {
				case <-r.Context().Done():
					close(canceled)
				case <-time.After(10 * time.Second):
				}
			}))
			g, ts := newGateway(t, Options{}, Replica{URL: f.URL()})
			waitLive(t, g, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if streaming {
				resp := postStream(t, ctx, ts.URL)
				if l, err := bufio.NewReader(resp.Body).ReadString('\n'); l != "data: {}\n" {
					t.Fatalf("first line %q %v", l, err)
				}
				<-started
				cancel()
				resp.Body.Close()
			} else {
				go func() { _, _, _ = post(ctx, http.DefaultClient, ts.URL, "", chatBody) }()
				<-started
				cancel()
			}
			select {
			case <-canceled:
			case <-time.After(5 * time.Second):
				t.Fatal("the replica's request was not cancelled when the client left")
			}
			waitFor(t, "slot released", func() bool { return g.Replicas()[0].InFlight == 0 })
		})
	}
}
