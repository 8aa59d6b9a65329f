package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/enginetest"
)

func TestRunOnFake(t *testing.T) {
	const promptDelay, tokenDelay = 20 * time.Microsecond, 2 * time.Millisecond
	f := enginetest.NewFake(enginetest.Options{Parallel: 2, ContextLength: 8192, PromptDelay: promptDelay, TokenDelay: tokenDelay})
	var lines []string
	r, err := Run(context.Background(), f, Options{PromptLengths: []int{512, 7000, 9000}, GenerateTokens: 32}, func(s string) { lines = append(lines, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Prompt) != 3 || r.Prompt[2].Tokens != 8191-1 || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "9000") {
		t.Fatalf("prompt results %+v notes %q", r.Prompt, r.Notes)
	}
	ideal := 1 / promptDelay.Seconds()
	for _, p := range r.Prompt {
		// Sleeps never end early, so the fake's rate is an upper bound.
		if p.PerSecond > ideal*1.01 || p.PerSecond <= 0 {
			t.Fatalf("prompt %d: %.0f tok/s, fake runs at %.0f", p.Tokens, p.PerSecond, ideal)
		}
	}
	gIdeal := 1 / tokenDelay.Seconds()
	if g := r.Generate; g.PerSecond > gIdeal*1.01 || g.PerSecond <= 0 {
		t.Fatalf("generate %.0f tok/s, fake runs at %.0f", g.PerSecond, gIdeal)
	}
	// Two slots cannot beat twice the fake's rate (sleeps never end early). How much faster two are than one is
	// the machine's business (a loaded 2-core machine measured 0.57×): not checked.
	if c := r.Concurrency; len(c) != 2 || c[1].Level != 2 || c[1].Tokens != 2*32 || c[1].PerSecond <= 0 ||
		c[1].PerSecond > 2*gIdeal*1.01 || math.Abs(c[1].PerRequest*2-c[1].PerSecond) > 1e-9*c[1].PerSecond {
		t.Fatalf("concurrency %+v", r.Concurrency)
	}
	wantRPH := 3600 / (7000*promptDelay.Seconds() + 7*tokenDelay.Seconds())
	if fl := r.Fleet; fl.PromptTokens != 7000 || fl.GenerateTokens != 8 || fl.RequestsPerHour > wantRPH*1.01 || fl.RequestsPerHour <= 0 {
		t.Fatalf("fleet %+v, want about %.0f requests/hour", fl, wantRPH)
	}
	p := r.PrefixCache
	if p.SharedTokens != 6300 || p.SecondCachedTokens < 6300 || p.Speedup <= 1 || p.RequestsPerHour <= r.Fleet.RequestsPerHour {
		t.Fatalf("prefix %+v", p)
	}
	if len(lines) < 6 {
		t.Fatalf("progress %q", lines)
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil || !strings.Contains(buf.String(), "requests/hour") {
		t.Fatalf("table %q %v", buf.String(), err)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{{PromptLengths: []int{0}}, {Concurrency: []int{0}}, {SharedPrefix: 1}, {Repeats: -1}} {
		if o.Validate() == nil {
			t.Fatalf("%+v accepted", o)
		}
	}
	f := enginetest.NewFake(enginetest.Options{})
	r, err := Run(context.Background(), f, Options{Skip: []string{"prompt", "generate", "concurrency", "fleet"}, FleetPromptTokens: 100, SharedPrefix: 0.5, Repeats: 3}, nil)
	if err != nil || r.Prompt != nil || r.Generate != nil || r.Fleet != nil || r.PrefixCache.SharedTokens != 50 {
		t.Fatalf("%+v %v", r, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, f, Options{}, nil); err == nil {
		t.Fatal("cancelled run succeeded")
	}
}
