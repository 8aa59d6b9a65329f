package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFitCapacity is issue 17's capacity-planning command: Qwen3.5-9B (its config.json, sized at Q4_K_M) on
// the 16 GB profile, 500 reviews an hour of 7,000 tokens with 6,300 shared: phones needed and their hourly
// cost, each with its basis, in text and JSON; bad planning input is a one-line error.
func TestFitCapacity(t *testing.T) {
	b, err := os.ReadFile("../../pipeline/fit/known/qwen3.5-9b.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(cfg, b, 0o644)
	t.Setenv("PHONELLM_HOME", t.TempDir())
	t.Chdir(t.TempDir()) // no workspace
	ctx := context.Background()
	args := []string{"fit", "--config", cfg, "--ctx", "8192", "--reviews-per-hour", "500", "--prompt-tokens", "7000", "--shared-tokens", "6300"}
	code, out, errs := runCLI(t, ctx, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"500 reviews per hour need", "phones", "ACU per hour", "basis:", "7000 prompt tokens in 195 s", "Acurast reward"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCLI(t, ctx, append(args, "--json")...)
	var res struct {
		Capacity struct {
			Replicas struct{ Lo, Hi int }
			Cost     struct{ Lo, Hi float64 } `json:"cost_per_hour"`
			Basis    []string
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("--json: exit %d: %s %s", code, out, errs)
	}
	c := res.Capacity
	if c.Replicas.Lo < 1 || c.Replicas.Hi < c.Replicas.Lo || c.Cost.Lo <= 0 || c.Cost.Hi < c.Cost.Lo || len(c.Basis) < 4 {
		t.Fatalf("capacity %+v", c)
	}
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--shared-tokens", "8000"}, exitBadInput, "shared tokens 8000"},
		{[]string{"--hit-rate", "2"}, exitBadInput, "hit rate 2"},
		{[]string{"--phone", "nophone"}, exitUsage, `unknown phone profile "nophone"`},
		{[]string{"--latency", "1s"}, exitVerdict, "longer than the latency bound"},
	} {
		code, _, errs := runCLI(t, ctx, append(args, bad.args...)...)
		if code != bad.code || !strings.Contains(errs, bad.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with %q", bad.args, code, errs, bad.code, bad.want)
		}
	}
}
