package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
	"github.com/phonellm/phonellm/runtime/gateway"
)

type inputErr interface{ InputError() bool }

func isInput(err error) bool {
	var ie inputErr
	return errors.As(err, &ie) && ie.InputError()
}

func TestWorkloadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("rubric-a.txt", "Rubric A: weigh the evidence.")
	good := write("good.yaml", "rubrics: [{file: rubric-a.txt}, \"Rubric B inline\"]\ncases: [\"Case 1\", \"Case 2\", \"Case 3\"]\nmax_tokens: 4\n")
	s, err := ReadWorkloadSpec(good)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Rubrics) != 2 || w.Rubrics[0] != "Rubric A: weigh the evidence." || len(w.Cases) != 3 || w.MaxTokens != 4 {
		t.Fatalf("%+v", w)
	}
	for _, c := range []struct{ name, body, want string }{
		{"empty.yaml", "", "empty"},
		{"nothing.yaml", "max_tokens: 3\n", "no rubrics and no cases"},
		{"norubric.yaml", "cases: [a]\n", "no rubrics"},
		{"nocase.yaml", "rubrics: [a]\n", "no cases"},
		{"missing.yaml", "rubrics: [{file: nope.txt}]\ncases: [a]\n", "nope.txt"},
		{"emptytext.yaml", "rubrics: [\"\"]\ncases: [a]\n", "rubric 0 is empty"},
		{"unknown.yaml", "rubrics: [a]\ncases: [b]\nrubric: [c]\n", "field rubric not found"},
		{"badref.yaml", "rubrics: [{path: x}]\ncases: [b]\n", "want a text or {file: path}"},
	} {
		p := write(c.name, c.body)
		s, err := ReadWorkloadSpec(p)
		if err == nil {
			_, err = s.Load(p)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name) ||
			strings.Contains(err.Error(), "\n") || !isInput(err) {
			t.Errorf("%s: %v, want a one-line input error naming the file with %q", c.name, err, c.want)
		}
	}
	if _, err := ReadWorkloadSpec(filepath.Join(dir, "absent.yaml")); err == nil || !isInput(err) {
		t.Errorf("absent file: %v", err)
	}
}

func TestGenerateWorkload(t *testing.T) {
	// One token per word, the head included.
	count := func(s string) (int, error) { return len(strings.Fields(s)), nil }
	w, err := Generate(GenerateSpec{Rubrics: 3, Cases: 5, PromptTokens: 1000, Share: 0.9, Seed: 7}, 8, count)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Rubrics) != 3 || len(w.Cases) != 5 || w.MaxTokens != 8 {
		t.Fatalf("%d rubrics, %d cases", len(w.Rubrics), len(w.Cases))
	}
	for i, r := range w.Rubrics {
		n, _ := count(r)
		if n < 890 || n > 910 || !strings.HasPrefix(r, fmt.Sprintf("Rubric %d.", i+1)) {
			t.Errorf("rubric %d: %d tokens, starts %.20q", i, n, r)
		}
	}
	for i, c := range w.Cases {
		if n, _ := count(c); n < 95 || n > 105 {
			t.Errorf("case %d: %d tokens", i, n)
		}
	}
	w2, _ := Generate(GenerateSpec{Rubrics: 3, Cases: 5, PromptTokens: 1000, Share: 0.9, Seed: 7}, 8, count)
	if w2.Rubrics[2] != w.Rubrics[2] || w2.Cases[4] != w.Cases[4] {
		t.Error("the same seed made different texts")
	}
	for _, g := range []GenerateSpec{
		{Rubrics: 3, Cases: 5, PromptTokens: 1000, Share: 1.5},
		{Rubrics: 3, Cases: 5, PromptTokens: 1000, Share: 1},
		{Rubrics: 3, Cases: 5, PromptTokens: 1000, Share: -0.1},
		{Rubrics: 0, Cases: 5, PromptTokens: 1000, Share: 0.5},
		{Rubrics: 3, Cases: 0, PromptTokens: 1000, Share: 0.5},
		{Rubrics: 3, Cases: 5, PromptTokens: 3, Share: 0.5},
	} {
		if _, err := Generate(g, 8, count); err == nil || !isInput(err) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v, want a one-line input error", g, err)
		}
	}
	if _, err := Generate(GenerateSpec{Rubrics: 3, Cases: 5, PromptTokens: 1000, Share: 1.5}, 8, count); !strings.Contains(err.Error(), "share = 1.5") {
		t.Errorf("share error: %v", err)
	}
}

func TestQuantile(t *testing.T) {
	sorted := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if quantile(sorted, 0.5) != 5 || quantile(sorted, 0.95) != 10 || quantile(nil, 0.5) != 0 || quantile([]float64{3}, 0.95) != 3 {
		t.Error("quantile")
	}
}

// TestRunFleetCompare: three one-slot replicas of the fake engine behind a gateway; the same workload in
// alternating phases. Affinity keeps each rubric on one replica, so its hit rate (from the replicas' own
// reports) is higher than load-only routing's; every answer is counted per replica by the gateway's metrics.
func TestRunFleetCompare(t *testing.T) {
	var reps []gateway.Replica
	for i := range 3 {
		s := api.New(api.Options{})
		// 50 µs a prompt token: a miss (~2,700 tokens) costs ~135 ms, far more than a busy machine or the race
		// detector adds to a request, so the gateway's choice to wait for a rubric's replica is not a coin toss.
		s.SetEngine(enginetest.NewFake(enginetest.Options{ID: "tiny", ContextLength: 8192, PromptDelay: 50 * time.Microsecond,
			Reply: func(string) string { return "RISK_LEVEL: 1" }}))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: s.Handler()}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		reps = append(reps, gateway.Replica{URL: "http://" + ln.Addr().String(), Name: fmt.Sprintf("replica-%d", i)})
	}
	g, err := gateway.New(gateway.Options{RateLimit: -1, HealthInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetReplicas(reps); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Serve(ctx, ln)
	for deadline := time.Now().Add(20 * time.Second); ; {
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
			t.Fatal("replicas not live")
		}
		time.Sleep(10 * time.Millisecond)
	}
	count := func(s string) (int, error) { return len(s), nil } // the fake tokenizes bytes
	wl, err := Generate(GenerateSpec{Rubrics: 3, Cases: 8, PromptTokens: 3000, Share: 0.9, Seed: 3}, 4, count)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	res, err := RunFleet(context.Background(), FleetOptions{URL: "http://" + ln.Addr().String(), Workload: wl, Concurrency: 3,
		Duration: time.Minute, Requests: 45, Compare: true, Rounds: 1, Seed: 1}, func(s string) { lines = append(lines, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 2 || len(res.Modes) != 2 || len(lines) != 2 || res.Ratio <= 0 {
		t.Fatalf("%+v", res)
	}
	a, l := res.Modes[0], res.Modes[1]
	for _, m := range res.Modes {
		if m.Errors != 0 || m.Requests < 45 || m.P50 <= 0 || m.P95 < m.P50 || m.PromptTokens == 0 {
			t.Errorf("%s: %+v", m.Mode, m)
		}
		var n int64
		for _, r := range m.Replicas {
			n += r.Requests
		}
		if n != int64(m.Requests) || len(m.Replicas) != 3 {
			t.Errorf("%s: replicas count %d answers, the clients %d", m.Mode, n, m.Requests)
		}
	}
	t.Logf("hit rate: affinity %.2f, load %.2f; ratio %.2f", a.HitRate, l.HitRate, res.Ratio)
	if a.Mode != ModeAffinity || l.Mode != ModeLoad || a.HitRate <= l.HitRate {
		t.Errorf("affinity hit rate %.2f not above load's %.2f", a.HitRate, l.HitRate)
	}
	var b strings.Builder
	res.WriteTable(&b)
	for _, want := range []string{"affinity / load:", "replica-2", "load average"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := RunFleet(context.Background(), FleetOptions{URL: "http://x"}, nil); err == nil || !isInput(err) {
		t.Errorf("empty workload: %v", err)
	}
}

// FuzzWorkloadSpec: any workload file is parsed (or refused with a one-line input error) without crashing, and
// loading it never reads outside what it names or accepts an empty workload.
func FuzzWorkloadSpec(f *testing.F) {
	f.Add([]byte("rubrics: [a, {file: r.txt}]\ncases: [b]\nmax_tokens: 4\n"))
	f.Add([]byte(`{"generate": {"rubrics": 3, "cases": 2, "prompt_tokens": 100, "share": 0.9}}`))
	f.Add([]byte("rubrics: [{file: /dev/zero}]\ncases: [x]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseWorkloadSpec("w.yaml", b)
		if err != nil {
			if !isInput(err) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%v", err)
			}
			return
		}
		if s.Generate != nil {
			_ = s.Generate.Validate()
			return
		}
		w, err := s.Load(filepath.Join(t.TempDir(), "w.yaml"))
		if err == nil && (len(w.Rubrics) == 0 || len(w.Cases) == 0) {
			t.Fatalf("an empty workload was accepted: %+v", w)
		}
		if err != nil && (!isInput(err) || strings.Contains(err.Error(), "\n")) {
			t.Fatalf("%v", err)
		}
	})
}
