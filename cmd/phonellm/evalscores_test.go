package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// TestEvalScores: eval with --labels on a generated labelled task, against
// phonellm's API, reports the calibration figures; a --gate that fails
// exits 4, a malformed one 2; saved answers stand in for --vs.
func TestEvalScores(t *testing.T) {
	re := regexp.MustCompile(`case-(\d+)`)
	f := enginetest.NewFake(enginetest.Options{ContextLength: 1024, Reply: func(p string) string {
		m := re.FindAllStringSubmatch(p, -1)
		var i int
		fmt.Sscan(m[len(m)-1][1], &i)
		level := 1 + i%5
		if i%3 == 0 {
			level = 1 + (level+1)%5 // every third answer is wrong
		}
		return fmt.Sprintf("RISK_LEVEL: %d", level)
	}})
	s := api.New(api.Options{})
	s.SetEngine(f)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	dir := t.TempDir()
	dataset := filepath.Join(dir, "task.jsonl")
	var sb strings.Builder
	for i := range 30 {
		fmt.Fprintf(&sb, `{"messages": [{"role": "user", "content": "case-%d"}], "label": "%d"}`+"\n", i, 1+i%5)
	}
	if err := os.WriteFile(dataset, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir) // no workspace here
	saved := filepath.Join(dir, "answers.jsonl")
	code, out, errOut := runCLI(t, context.Background(), "eval", "--dataset", dataset, "--endpoint", ts.URL, "--labels", "1,2,3,4,5",
		"--save", saved, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res eval.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	sc := res.Task.Scores
	if sc == nil || sc.Scored != 30 || sc.AUC == nil || res.Task.Correct != 20 || len(sc.Reliability) != 10 {
		t.Fatalf("scores %+v, task %+v", sc, res.Task)
	}
	code, out, _ = runCLI(t, context.Background(), "eval", "--dataset", dataset, "--endpoint", ts.URL, "--labels", "1,2,3,4,5", "--vs", saved)
	if code != 0 || !strings.Contains(out, "scores: scored 30/30") || !strings.Contains(out, "vs scores: same most probable label 1.000") ||
		!strings.Contains(out, "confidence") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out, errOut = runCLI(t, context.Background(), "eval", "--dataset", dataset, "--endpoint", saved, "--labels", "1,2,3,4,5",
		"--gate", "auc>=0.5", "--gate", "brier<=0.0001", "--gate", "vs.mean_tv<=0.1")
	if code != exitVerdict || !strings.Contains(out+errOut, "brier<=0.0001") || !strings.Contains(out+errOut, "no vs.mean_tv") || strings.Contains(out+errOut, "auc>=0.5:") {
		t.Fatalf("exit %d, want %d:\n%s\n%s", code, exitVerdict, out, errOut)
	}
	for _, args := range [][]string{{"--gate", "wisdom>=1"}, {"--gate", "auc=1"}, {"--labels", "1"}, {"--labels", "1,2", "--score-method", "vote"}} {
		code, _, errOut = runCLI(t, context.Background(), append([]string{"eval", "--dataset", dataset, "--endpoint", saved}, args...)...)
		if code != exitUsage {
			t.Fatalf("%v: exit %d, want %d: %s", args, code, exitUsage, errOut)
		}
	}
}
