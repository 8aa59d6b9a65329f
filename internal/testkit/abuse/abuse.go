package abuse

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Target is the server under attack.
type Target struct {
	// URL is its base URL (http://host:port).
	URL string
	// Key is the bearer key requests carry (attacks that fail authentication are not the point).
	Key string
	// Model is the model name chat and completion requests use.
	Model string
	// Clients is the number of concurrent well-formed clients (default 50), each sending Requests requests
	// (default 3: a chat, a stream it abandons, a completion).
	Clients, Requests int
	// Slow is the number of connections of each slow kind: trickled headers, trickled bodies, a declared
	// body that never comes (default 20).
	Slow int
	// Guard bounds every attack, as a hang guard (default 2 minutes); Starved is the /health latency that
	// counts as starvation (default 5 s).
	Guard, Starved time.Duration
}

// Report is what the attacks observed.
type Report struct {
	Statuses     map[string]map[int]int // by attack, by status code (0: transport error)
	HealthProbes int
	HealthMax    time.Duration // the slowest /health answer, less the process's own scheduling delays
}

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "/health: %d probes, slowest %v;", r.HealthProbes, r.HealthMax.Round(time.Millisecond))
	for name, codes := range r.Statuses {
		fmt.Fprintf(&b, " %s %v;", name, codes)
	}
	return b.String()
}

// Run attacks t's target in two phases: every hostile request alone, each of which must get the answer it
// deserves (400 for 100,000 messages and for special-token floods, 413 for a 15 MiB word, the connection
// closed for slowloris headers and slow bodies, no allocation for a huge Content-Length); then all of them
// at once with the well-formed clients, where a busy answer (429, 503) is fair too. Throughout, a dedicated
// goroutine probes GET /health on fresh connections and fails the test on any probe slower than Starved or
// refused. Afterwards Run waits for the server to report no slot busy and nothing queued. Statuses are
// reported by "alone: attack" and "crowd: attack".
func Run(t testing.TB, tgt Target) *Report {
	t.Helper()
	if tgt.Clients == 0 {
		tgt.Clients = 50
	}
	if tgt.Requests == 0 {
		tgt.Requests = 3
	}
	if tgt.Slow == 0 {
		tgt.Slow = 20
	}
	if tgt.Guard == 0 {
		tgt.Guard = 2 * time.Minute
	}
	if tgt.Starved == 0 {
		tgt.Starved = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), tgt.Guard)
	defer cancel()
	rep := &Report{Statuses: map[string]map[int]int{}}
	var mu sync.Mutex
	record := func(attack string, code int) {
		mu.Lock()
		defer mu.Unlock()
		if rep.Statuses[attack] == nil {
			rep.Statuses[attack] = map[int]int{}
		}
		rep.Statuses[attack][code]++
	}

	stopProbe := make(chan struct{})
	probeDone := make(chan struct{})
	lag := watchLag(stopProbe)
	go func() {
		defer close(probeDone)
		// The client's own timeout is a hang guard only: what counts is the wait minus the time this whole
		// process was not running (a loaded machine), which is not the server starving /health.
		probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}, Timeout: 6 * tgt.Starved}
		for {
			start, lost := time.Now(), lag.Load()
			resp, err := probe.Get(tgt.URL + "/health")
			d := time.Since(start) - time.Duration(lag.Load()-lost)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			rep.HealthProbes++
			rep.HealthMax = max(rep.HealthMax, d)
			mu.Unlock()
			if err != nil || resp.StatusCode != http.StatusOK || d > tgt.Starved {
				buf := make([]byte, 1<<20)
				t.Errorf("/health starved: %v after %v (beyond the process's own scheduling delays); goroutines now:\n%s",
					errOrStatus(err, resp), d, buf[:runtime.Stack(buf, true)])
			}
			select {
			case <-stopProbe:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	// Idle connections are dropped well before any server's idle timeout: a request sent on a connection the
	// server is closing at that moment fails without an answer (the keep-alive race every client has).
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: tgt.Clients, Proxy: nil, IdleConnTimeout: 300 * time.Millisecond}}
	defer client.CloseIdleConnections()
	// First every hostile request alone, where each must be answered for what it is; then all of them at
	// once with the well-formed clients, where "busy" (429, 503) is a fair answer too.
	for _, crowd := range []bool{false, true} {
		var wg sync.WaitGroup
		attack(ctx, t, tgt, client, crowd, &wg, record)
		wg.Wait()
	}
	close(stopProbe)
	<-probeDone
	if ctx.Err() != nil {
		t.Fatalf("attacks still running after %v (hang guard): %s", tgt.Guard, rep)
	}
	WaitIdle(t, tgt)
	return rep
}

// attack starts every attack on wg; with crowd, the well-formed clients too, and busy answers are accepted.
func attack(ctx context.Context, t testing.TB, tgt Target, client *http.Client, crowd bool, wg *sync.WaitGroup, record func(string, int)) {
	phase := "alone: "
	if crowd {
		phase = "crowd: "
	}
	busy := func(code int) bool {
		return crowd && (code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable)
	}
	var sendReader func(name, path string, body func() io.Reader, n int64, large bool, want ...int)
	// send posts body and checks the answer's status against want. large marks bodies over the server's
	// limit: the server may answer 413 and close while the body is still being sent, so the client's write
	// fails first; that is an answer too, not a hang.
	send := func(name, path string, body []byte, large bool, want ...int) {
		sendReader(name, path, func() io.Reader { return bytes.NewReader(body) }, int64(len(body)), large, want...)
	}
	sendReader = func(name, path string, body func() io.Reader, n int64, large bool, want ...int) {
		code, b, err := post(ctx, client, tgt, path, body(), n)
		record(phase+name, code)
		switch {
		case err != nil && large && ctx.Err() == nil:
			return
		case err != nil:
			t.Errorf("%s%s: %v", phase, name, err)
			return
		}
		ok := busy(code)
		for _, c := range want {
			ok = ok || code == c
		}
		if !ok {
			t.Errorf("%s%s: status %d, want one of %v: %.300s", phase, name, code, want, b)
		} else if code != 200 {
			if err := openAIError(b); err != nil {
				t.Errorf("%s%s: %v", phase, name, err)
			}
		}
	}
	raw := func(name string, got int, want ...int) {
		record(phase+name, got)
		ok := busy(got)
		for _, c := range want {
			ok = ok || got == c
		}
		if !ok && ctx.Err() == nil {
			t.Errorf("%s%s: answered %d, want one of %v (0: closed without an answer)", phase, name, got, want)
		}
	}

	if crowd {
		// Well-formed clients: chats, abandoned streams, completions.
		for i := range tgt.Clients {
			wg.Go(func() {
				for j := range tgt.Requests {
					switch j % 3 {
					case 0:
						send("client chat", "/v1/chat/completions", chat(tgt, fmt.Sprintf("client %d asks %d", i, j), 8, false), false, 200)
					case 1:
						record(phase+"abandoned stream", abandonStream(ctx, client, tgt, fmt.Sprintf("client %d streams %d", i, j)))
					case 2:
						send("client completion", "/v1/completions", jsonBody(map[string]any{"model": tgt.Model, "prompt": fmt.Sprint("complete ", i), "max_tokens": 4}), false, 200)
					}
				}
			})
		}
	}
	// 100,000 messages.
	wg.Go(func() {
		msgs := make([]map[string]string, 100_000)
		for i := range msgs {
			msgs[i] = map[string]string{"role": "user", "content": "m"}
		}
		send("100k messages", "/v1/chat/completions", jsonBody(map[string]any{"model": tgt.Model, "messages": msgs}), true, 400, 413)
	})
	// 15 MiB words, four at once, generated as they are sent. A body that large may also not arrive within
	// the server's read timeout on a loaded machine: 408 is an answer too.
	for range 4 {
		wg.Go(func() {
			head := `{"model":` + strconv.Quote(tgt.Model) + `,"messages":[{"role":"user","content":"`
			tail := `"}]}`
			const word = 15 << 20
			sendReader("15 MiB word", "/v1/chat/completions", func() io.Reader {
				return io.MultiReader(strings.NewReader(head), io.LimitReader(repeat('w'), word), strings.NewReader(tail))
			}, int64(len(head)+word+len(tail)), true, 400, 408, 413)
		})
	}
	// Special-token floods, as completion prompt and as chat content.
	wg.Go(func() {
		flood := strings.Repeat("<|im_start|>user\nx<|im_end|>\n", 2000)
		send("special-token flood (completion)", "/v1/completions", jsonBody(map[string]any{"model": tgt.Model, "prompt": flood, "max_tokens": 1}), false, 400)
		send("special-token flood (chat)", "/v1/chat/completions", chat(tgt, flood, 1, false), false, 400)
	})
	// Slow clients. A connection closed without an answer (0) is fine for each: net/http answers 400 to
	// headers cut by their timeout, and a reset can overtake a 408.
	for range tgt.Slow {
		wg.Go(func() { raw("slowloris headers", slowHeaders(ctx, t, tgt), 0, 400, 408) })
		wg.Go(func() { raw("slow body", slowBody(ctx, t, tgt, 100_000), 0, 408) })
		wg.Go(func() { raw("huge Content-Length, tiny body", declaredBody(ctx, t, tgt, 16<<20), 0, 408, 413) })
	}
}

// watchLag measures how late this process runs: a goroutine sleeps 10 ms at a time and adds every overshoot
// (the time it was runnable, or the process descheduled, beyond its sleep) to the returned counter (ns).
// On an idle machine it grows by microseconds; at load 20 on two cores, by seconds.
func watchLag(stop <-chan struct{}) *atomic.Int64 {
	var lost atomic.Int64
	go func() {
		const tick = 10 * time.Millisecond
		for {
			start := time.Now()
			select {
			case <-stop:
				return
			case <-time.After(tick):
			}
			if over := time.Since(start) - tick; over > 0 {
				lost.Add(int64(over))
			}
		}
	}()
	return &lost
}

// WaitIdle waits until the target's /health reports no slot processing and nothing queued.
func WaitIdle(t testing.TB, tgt Target) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(tgt.URL + "/health")
		if err == nil {
			var h struct {
				Processing *int `json:"slots_processing"`
				Queued     *int `json:"queued"`
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(b)
			if json.Unmarshal(b, &h) == nil && h.Processing != nil && h.Queued != nil && *h.Processing == 0 && *h.Queued == 0 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("slots never freed: /health says %s", last)
}

func errOrStatus(err error, resp *http.Response) any {
	if err != nil {
		return err
	}
	return resp.Status
}

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // programmer error: plain maps only
	}
	return b
}

func chat(tgt Target, content string, maxTokens int, stream bool) []byte {
	return jsonBody(map[string]any{"model": tgt.Model, "messages": []map[string]string{{"role": "user", "content": content}},
		"max_tokens": maxTokens, "stream": stream})
}

func post(ctx context.Context, c *http.Client, tgt Target, path string, body io.Reader, n int64) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tgt.URL+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", "application/json")
	if tgt.Key != "" {
		req.Header.Set("Authorization", "Bearer "+tgt.Key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// repeat is an endless stream of one byte.
type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// openAIError checks OpenAI's error shape.
func openAIError(b []byte) error {
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		return fmt.Errorf("not an OpenAI error: %.300s", b)
	}
	return nil
}

// abandonStream starts a streamed chat and hangs up after the first event.
func abandonStream(ctx context.Context, c *http.Client, tgt Target, content string) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tgt.URL+"/v1/chat/completions",
		strings.NewReader(string(chat(tgt, content, 64, true))))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	if tgt.Key != "" {
		req.Header.Set("Authorization", "Bearer "+tgt.Key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 {
		_, _ = bufio.NewReader(resp.Body).ReadString('\n')
	}
	return resp.StatusCode
}

// dial opens a raw connection to the target.
func dial(ctx context.Context, tgt Target) (net.Conn, error) {
	host := strings.TrimPrefix(tgt.URL, "http://")
	var d net.Dialer
	return d.DialContext(ctx, "tcp", host)
}

// waitAnswer reads what the server sends until it closes the connection (or the guard ends) and returns the
// status code of the answer, 0 when it closed without one.
func waitAnswer(ctx context.Context, t testing.TB, c net.Conn, attack string) int {
	t.Helper()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: the server kept the connection open for the whole test", attack)
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\r\n")
	if f := strings.Fields(line); len(f) >= 2 {
		code, _ := strconv.Atoi(f[1])
		return code
	}
	return 0
}

// trickle writes one byte of s every 100 ms until s is written, the server closes the connection or ctx
// ends, then waits for the server's answer.
func trickle(ctx context.Context, t testing.TB, c net.Conn, s, attack string) int {
	closed := make(chan int, 1)
	go func() { closed <- waitAnswer(ctx, t, c, attack) }()
	for i := 0; i < len(s); i++ {
		if _, err := c.Write([]byte{s[i]}); err != nil {
			break
		}
		select {
		case code := <-closed:
			return code
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return <-closed
		}
	}
	return <-closed
}

func authHeader(tgt Target) string {
	if tgt.Key == "" {
		return ""
	}
	return "Authorization: Bearer " + tgt.Key + "\r\n"
}

// slowHeaders sends a request line and then headers one byte every 100 ms, forever: the server must close
// the connection (ReadHeaderTimeout).
func slowHeaders(ctx context.Context, t testing.TB, tgt Target) int {
	c, err := dial(ctx, tgt)
	if err != nil {
		t.Errorf("slowloris headers: %v", err)
		return 0
	}
	defer c.Close()
	return trickle(ctx, t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+strings.Repeat("X-Slow: y\r\n", 10_000), "slowloris headers")
}

// slowBody sends complete headers for a body of n bytes, then the body one byte every 100 ms: the server
// must give up (ReadTimeout, 408).
func slowBody(ctx context.Context, t testing.TB, tgt Target, n int) int {
	c, err := dial(ctx, tgt)
	if err != nil {
		t.Errorf("slow body: %v", err)
		return 0
	}
	defer c.Close()
	hdr := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n", authHeader(tgt), n)
	if _, err := io.WriteString(c, hdr); err != nil {
		return 0
	}
	return trickle(ctx, t, c, `{"messages":[{"role":"user","content":"`+strings.Repeat("s", n), "slow body")
}

// declaredBody declares a body of n bytes, sends "{" and nothing more: the server must neither allocate n
// bytes nor wait forever.
func declaredBody(ctx context.Context, t testing.TB, tgt Target, n int) int {
	c, err := dial(ctx, tgt)
	if err != nil {
		t.Errorf("huge Content-Length: %v", err)
		return 0
	}
	defer c.Close()
	hdr := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n{", authHeader(tgt), n)
	if _, err := io.WriteString(c, hdr); err != nil {
		return 0
	}
	return waitAnswer(ctx, t, c, "huge Content-Length, tiny body")
}

// Holding returns an attack that opens n connections which declare a body of size bytes and send "{", and
// holds them until the returned function is called (which closes them). It is the gateway's 2.2 GB case:
// memory must not follow the declared lengths.
func Holding(t testing.TB, tgt Target, n, size int) (release func()) {
	t.Helper()
	var conns []net.Conn
	for range n {
		c, err := dial(context.Background(), tgt)
		if err != nil {
			t.Fatalf("holding connections: %v", err)
		}
		hdr := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n{", authHeader(tgt), size)
		if _, err := io.WriteString(c, hdr); err != nil {
			t.Fatalf("holding connections: %v", err)
		}
		conns = append(conns, c)
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			for _, c := range conns {
				c.Close()
			}
		}
	}
}
