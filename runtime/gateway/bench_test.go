package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// BenchmarkOverhead measures the latency the gateway adds: every iteration sends one chat completion
// straight to a replica and one through the gateway (same client, same replica, keep-alive, interleaved so
// both see the same machine load), and reports the medians and their difference (target: added p50 < 1 ms).
// The request is the fraud-review shape: a 6,300-token rubric as the system message and a 700-token case.
// "affinity" routes it with prefix affinity (keying the rubric, reading the replica's cache report), "load"
// with affinity off.
//
//	go test ./runtime/gateway -run '^$' -bench Overhead -benchtime 2000x
func BenchmarkOverhead(b *testing.B) {
	for _, mode := range []AffinityMode{AffinityAuto, AffinityOff} {
		name := "affinity"
		if mode == AffinityOff {
			name = "load"
		}
		b.Run(name, func(b *testing.B) { benchOverhead(b, mode) })
	}
}

func benchOverhead(b *testing.B, mode AffinityMode) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"tiny","choices":[{"index":0,"message":{"role":"assistant","content":"RISK_LEVEL: 5"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7000,"completion_tokens":5,"total_tokens":7005,"prompt_tokens_details":{"cached_tokens":6300}},"timings":{"prompt_n":700,"prompt_ms":812.5,"cache_n":6300}}`)
	rep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			_, _ = w.Write([]byte(`{"status":"ok","slots":4}`))
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer rep.Close()
	g, err := New(Options{APIKeys: []string{"bench-key-123"}, RateLimit: -1, Affinity: AffinityOptions{Mode: mode}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	if err := g.SetReplicas([]Replica{{URL: rep.URL}}); err != nil {
		b.Fatal(err)
	}
	gw := httptest.NewServer(g)
	defer gw.Close()
	for deadline := time.Now().Add(5 * time.Second); !g.Replicas()[0].Live; {
		if time.Now().After(deadline) {
			b.Fatal("replica never live")
		}
		time.Sleep(time.Millisecond)
	}
	// A prompt the size of the motivating case (about 7k tokens, ~28 KB of JSON): the rubric, then the case.
	body := []byte(`{"model":"tiny","messages":[{"role":"system","content":"` + string(bytes.Repeat([]byte("rule "), 5040)) +
		`"},{"role":"user","content":"` + string(bytes.Repeat([]byte("case "), 560)) + `"}]}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	call := func(url string) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer bench-key-123")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != 200 || n != int64(len(answer)) {
			b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
		}
		return d
	}
	for range 50 { // warm up connections on both paths
		call(rep.URL)
		call(gw.URL)
	}
	direct := make([]time.Duration, 0, b.N)
	via := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			direct = append(direct, call(rep.URL))
			via = append(via, call(gw.URL))
		} else {
			via = append(via, call(gw.URL))
			direct = append(direct, call(rep.URL))
		}
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds())
	}
	pd, pg := p50(direct), p50(via)
	b.ReportMetric(pd, "direct-p50-µs")
	b.ReportMetric(pg, "gateway-p50-µs")
	b.ReportMetric(pg-pd, "added-p50-µs")
	b.ReportMetric(0, "ns/op")
}
