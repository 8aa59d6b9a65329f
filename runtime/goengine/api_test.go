package goengine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/api"
)

// TestServedOverHTTP runs the OpenAI API over the real engine: parallel
// clients all succeed with the same greedy answers as alone, and a client
// that disconnects mid-stream frees its slot (long before its answer, which
// runs to the 4096-token context, would have ended; no wall-clock threshold,
// so a loaded machine does not fail it).
func TestServedOverHTTP(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 61}, Options{Parallel: 2, ContextLength: 4096})
	s := api.New(api.Options{QueueSize: 8})
	s.SetEngine(e)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	chat := func(ctx context.Context, content string, extra string) (*http.Response, error) {
		body := `{"model":"tiny-qwen3-61","temperature":0,"messages":[{"role":"user","content":"` + content + `"}]` + extra + `}`
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
		return http.DefaultClient.Do(req)
	}
	answer := func(content string) string {
		resp, err := chat(context.Background(), content, `,"max_tokens":12`)
		if err != nil {
			t.Error(err)
			return ""
		}
		defer resp.Body.Close()
		var r api.ChatResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 {
			t.Errorf("status %d: %v", resp.StatusCode, err)
			return ""
		}
		return r.Choices[0].Message.Content
	}
	qs := []string{"one", "two", "three", "four", "five", "six"}
	alone := make([]string, len(qs))
	for i, q := range qs {
		alone[i] = answer(q)
	}
	together := make([]string, len(qs))
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Go(func() { together[i] = answer(q) })
	}
	wg.Wait()
	for i := range qs {
		if alone[i] != together[i] {
			t.Fatalf("%q: alone %q, concurrently %q", qs[i], alone[i], together[i])
		}
	}

	generated := func() int {
		r, err := http.Get(ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "phonellm_generated_tokens_total "); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatal("no phonellm_generated_tokens_total")
		return 0
	}
	before := generated()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := chat(ctx, "stream forever", `,"stream":true`)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for n := 0; n < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	cancel()
	resp.Body.Close()
	start := time.Now()
	for {
		var h struct {
			Busy int `json:"slots_processing"`
		}
		r, err := http.Get(ts.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(r.Body).Decode(&h)
		r.Body.Close()
		if h.Busy == 0 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("slot still busy 5 s after the client left")
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("the abandoned stream generated %d tokens", generated()-before)
	// The slot came back because the disconnect stopped the stream, not because it ended.
	if n := generated() - before; n >= 2048 {
		t.Fatalf("the abandoned stream ran %d tokens: the disconnect did not stop it", n)
	}
}
