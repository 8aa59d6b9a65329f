package eval

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/runtime/engine"
)

// fakeOpenAI is an OpenAI-compatible chat endpoint that enforces the request shape (POST, path, JSON,
// bearer key, temperature 0, no streaming, the configured model) and answers from replies by the last
// user message; a reply "500" becomes an HTTP 500. It records the peak number of requests in flight.
type fakeOpenAI struct {
	t       *testing.T
	key     string
	model   string
	replies map[string]string
	delay   time.Duration
	// flaky[prompt] requests of that prompt fail first with flakyStatus (and Retry-After: 1).
	flaky       map[string]int
	flakyStatus int

	inFlight, peak atomic.Int32
	mu             sync.Mutex
	seen           map[string]int
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	fail := func(code int, msg string) {
		f.t.Errorf("fake endpoint: %s", msg)
		http.Error(w, msg, code)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		fail(http.StatusNotFound, r.Method+" "+r.URL.Path)
		return
	}
	want := ""
	if f.key != "" {
		want = "Bearer " + f.key
	}
	if got := r.Header.Get("Authorization"); got != want {
		fail(http.StatusUnauthorized, "authorization "+got)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		fail(http.StatusBadRequest, "content type "+ct)
		return
	}
	var req map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	if string(req["temperature"]) != "0" || string(req["stream"]) != "false" {
		fail(http.StatusBadRequest, "temperature "+string(req["temperature"])+", stream "+string(req["stream"]))
		return
	}
	if m := req["model"]; (f.model == "" && m != nil) || (f.model != "" && string(m) != `"`+f.model+`"`) {
		fail(http.StatusBadRequest, "model "+string(req["model"]))
		return
	}
	var msgs []engine.Message
	if err := json.Unmarshal(req["messages"], &msgs); err != nil || len(msgs) == 0 {
		fail(http.StatusBadRequest, "messages "+string(req["messages"]))
		return
	}
	user := msgs[len(msgs)-1].Content
	f.mu.Lock()
	f.seen[user]++
	flaky := f.flaky[user] > 0
	if flaky {
		f.flaky[user]--
	}
	f.mu.Unlock()
	if flaky {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", f.flakyStatus)
		return
	}
	select { // a slow model; a client that gives up ends the wait
	case <-time.After(f.delay):
	case <-r.Context().Done():
		return
	}
	reply, ok := f.replies[user]
	if !ok {
		fail(http.StatusBadRequest, "unknown prompt "+user)
		return
	}
	if reply == "500" {
		http.Error(w, "model crashed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "model": f.model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": reply}}},
	})
}

func noSleep(context.Context, time.Duration) error { return nil }

func newFake(t *testing.T, key, model string, replies map[string]string) (*fakeOpenAI, *httptest.Server) {
	f := &fakeOpenAI{t: t, key: key, model: model, replies: replies, seen: map[string]int{}, delay: 5 * time.Millisecond}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// quantReplies are the answers of the model under test on testdata/task.jsonl; with the labels they make
// this hand-computed confusion matrix (rows: label, columns: prediction):
//
//	      1  2  3  4  unparsable failed | support
//	  1   2  1  .  .      1        .    |   4
//	  2   .  2  1  .      .        1    |   4
//	  3   1  .  2  1      .        .    |   4
//	predicted 3  3  3  1
//
// TP = 2, 2, 2, 0; precision = 2/3, 2/3, 2/3, 0; recall = 1/2, 1/2, 1/2, 0 (class 4 has no support);
// F1 = 4/7, 4/7, 4/7, 0; macro-F1 = 3/7; accuracy = 6/12.
var quantReplies = map[string]string{
	"case-01": "RISK_LEVEL: 1",
	"case-02": "Looks fine.\nRISK_LEVEL:1",
	"case-03": "RISK_LEVEL: 2",
	"case-04": "I think this one is risky.",
	"case-05": "RISK_LEVEL:   2",
	"case-06": "RISK_LEVEL: 2\n",
	"case-07": "RISK_LEVEL: 3",
	"case-08": "RISK_LEVEL: 3",
	"case-09": "RISK_LEVEL: 1",
	"case-10": "<think>maybe RISK_LEVEL: 1?</think>\nRISK_LEVEL: 3",
	"case-11": "500",
	"case-12": "RISK_LEVEL: 4",
}

var labels = map[string]string{"case-01": "1", "case-02": "1", "case-03": "1", "case-04": "1", "case-05": "2",
	"case-06": "2", "case-07": "2", "case-08": "3", "case-09": "3", "case-10": "3", "case-11": "2", "case-12": "3"}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestScoreTaskConfusion(t *testing.T) {
	f, srv := newFake(t, "sk-test", "tiny-q4", quantReplies)
	o := TaskOptions{Dataset: "testdata/task.jsonl", Endpoint: Endpoint{BaseURL: srv.URL + "/v1/", APIKey: "sk-test", Model: "tiny-q4"},
		Concurrency: 3, sleep: noSleep}
	r, err := ScoreTask(context.Background(), o, o.Endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Items != 12 || r.Correct != 6 || !near(r.Accuracy, 0.5) || r.Unparsable != 1 || r.Failed != 1 {
		t.Errorf("items %d correct %d accuracy %v unparsable %d failed %d; want 12 6 0.5 1 1", r.Items, r.Correct, r.Accuracy, r.Unparsable, r.Failed)
	}
	want := []ClassMetrics{
		{Label: "1", Support: 4, Predicted: 3, TP: 2, Precision: 2.0 / 3, Recall: 0.5, F1: 4.0 / 7},
		{Label: "2", Support: 4, Predicted: 3, TP: 2, Precision: 2.0 / 3, Recall: 0.5, F1: 4.0 / 7},
		{Label: "3", Support: 4, Predicted: 3, TP: 2, Precision: 2.0 / 3, Recall: 0.5, F1: 4.0 / 7},
		{Label: "4", Support: 0, Predicted: 1, TP: 0},
	}
	if len(r.Classes) != len(want) {
		t.Fatalf("classes %+v", r.Classes)
	}
	for i, w := range want {
		g := r.Classes[i]
		if g.Label != w.Label || g.Support != w.Support || g.Predicted != w.Predicted || g.TP != w.TP ||
			!near(g.Precision, w.Precision) || !near(g.Recall, w.Recall) || !near(g.F1, w.F1) {
			t.Errorf("class %s: got %+v, want %+v", w.Label, g, w)
		}
	}
	if !near(r.MacroF1, 3.0/7) {
		t.Errorf("macro-F1 %v, want 3/7", r.MacroF1)
	}
	wantConf := map[string]map[string]int{
		"1": {"1": 2, "2": 1, Unparsable: 1},
		"2": {"2": 2, "3": 1, Failed: 1},
		"3": {"3": 2, "1": 1, "4": 1},
	}
	for l, row := range wantConf {
		for p, n := range row {
			if r.Confusion[l][p] != n {
				t.Errorf("confusion[%s][%s] = %d, want %d", l, p, r.Confusion[l][p], n)
			}
		}
		if len(r.Confusion[l]) != len(row) {
			t.Errorf("confusion row %s: %v, want %v", l, r.Confusion[l], row)
		}
	}
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "500") {
		t.Errorf("errors %q", r.Errors)
	}
	if r.LatencyP50Ms < 5 || r.LatencyP95Ms < r.LatencyP50Ms {
		t.Errorf("latency p50 %v p95 %v ms; each request takes at least 5 ms", r.LatencyP50Ms, r.LatencyP95Ms)
	}
	if p := f.peak.Load(); p > 3 || p < 2 {
		t.Errorf("peak requests in flight %d, want 2-3 (concurrency 3)", p)
	}
	for c := range labels {
		want := 1
		if c == "case-11" { // HTTP 500: retried, 3 attempts in all
			want = 3
		}
		if f.seen[c] != want {
			t.Errorf("%s requested %d times, want %d", c, f.seen[c], want)
		}
	}
	if r.Retries != 2 {
		t.Errorf("retries %d, want 2", r.Retries)
	}
	b, _ := json.Marshal(r)
	var back TaskResult
	if err := json.Unmarshal(b, &back); err != nil || !near(back.MacroF1, r.MacroF1) || back.Confusion["1"][Unparsable] != 1 {
		t.Errorf("JSON round trip: %v %s", err, b)
	}
}

func TestScoreLatencyQuantiles(t *testing.T) {
	items := make([]Item, 21)
	answers := make([]Answer, 21)
	for i := range items {
		items[i] = Item{Label: "1"}
		answers[i] = Answer{Prediction: "1", Latency: time.Duration(i+1) * time.Millisecond}
	}
	answers[20].Err = errors.New("timeout") // failed requests have no latency
	r := Score(items, answers)
	// 20 latencies 1..20 ms: p50 at rank 9.5 → 10.5; p95 at rank 18.05 → 19.05.
	if !near(r.LatencyP50Ms, 10.5) || math.Abs(r.LatencyP95Ms-19.05) > 1e-9 {
		t.Errorf("p50 %v p95 %v, want 10.5 19.05", r.LatencyP50Ms, r.LatencyP95Ms)
	}
	if r.Correct != 20 || r.Failed != 1 || !near(r.Classes[0].Recall, 20.0/21) || !near(r.Classes[0].Precision, 1) {
		t.Errorf("%+v", r)
	}
}

// TestVsAndGate runs the model under test against a baseline endpoint that answers every item right, side by
// side, and applies the F1-drop gate through Run.
func TestVsAndGate(t *testing.T) {
	base := map[string]string{}
	for c, l := range labels {
		base[c] = "RISK_LEVEL: " + l
	}
	fq, quant := newFake(t, "k1", "tiny-q4", quantReplies)
	fb, ref := newFake(t, "k2", "tiny-f16", base)
	o := Options{
		Task: TaskOptions{Dataset: "testdata/task.jsonl", Concurrency: 2, sleep: noSleep,
			Endpoint: Endpoint{BaseURL: quant.URL, APIKey: "k1", Model: "tiny-q4"},
			Vs:       Endpoint{BaseURL: ref.URL, APIKey: "k2", Model: "tiny-f16"}},
		Thresholds: Thresholds{MaxF1Drop: 0.1},
	}
	r, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Task == nil || r.Vs == nil || r.Comparison == nil {
		t.Fatalf("missing results: %+v", r)
	}
	if !near(r.Vs.Accuracy, 1) || !near(r.Vs.MacroF1, 1) || !near(r.Task.MacroF1, 3.0/7) {
		t.Errorf("baseline accuracy %v F1 %v, quantized F1 %v", r.Vs.Accuracy, r.Vs.MacroF1, r.Task.MacroF1)
	}
	c := r.Comparison
	if !near(c.MacroF1Drop, 4.0/7) || !near(c.AccuracyDelta, -0.5) || !near(c.Agreement, 0.5) {
		t.Errorf("comparison %+v; want F1 drop 4/7, accuracy delta -0.5, agreement 0.5", c)
	}
	if fq.peak.Load() > 2 || fb.peak.Load() > 2 {
		t.Errorf("peak in flight %d and %d, concurrency 2", fq.peak.Load(), fb.peak.Load())
	}
	if r.Pass || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], "macro-F1") {
		t.Errorf("pass %v reasons %q", r.Pass, r.Reasons)
	}
	var ge *GateError
	if err := r.Err(); !errors.Is(err, ErrGateFailed) || !errors.As(err, &ge) {
		t.Errorf("Err() = %v", err)
	}
	o.Thresholds.MaxF1Drop = 0.6
	if r, err = Run(context.Background(), o, nil); err != nil || !r.Pass || r.Err() != nil {
		t.Errorf("with a 0.6 allowance: pass %v reasons %q err %v", r.Pass, r.Reasons, err)
	}
}

// TestTaskRetries: 503 and 429 replies are retried after the server's Retry-After; a 400 is not.
func TestTaskRetries(t *testing.T) {
	base := map[string]string{}
	for c, l := range labels {
		base[c] = "RISK_LEVEL: " + l
	}
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusBadRequest} {
		f, srv := newFake(t, "", "", base)
		f.flaky, f.flakyStatus = map[string]int{"case-01": 1, "case-05": 2}, status
		var mu sync.Mutex
		var waits []time.Duration
		o := TaskOptions{Dataset: "testdata/task.jsonl", Endpoint: Endpoint{BaseURL: srv.URL}, Attempts: 3,
			sleep: func(_ context.Context, d time.Duration) error {
				mu.Lock()
				waits = append(waits, d)
				mu.Unlock()
				return nil
			}}
		r, err := ScoreTask(context.Background(), o, o.Endpoint, nil)
		if err != nil {
			t.Fatal(err)
		}
		if status == http.StatusBadRequest {
			if r.Failed != 2 || r.Retries != 0 || r.Correct != 10 || len(waits) != 0 {
				t.Errorf("400: failed %d retries %d correct %d waits %v", r.Failed, r.Retries, r.Correct, waits)
			}
			continue
		}
		if r.Failed != 0 || r.Retries != 3 || r.Correct != 12 || len(waits) != 3 {
			t.Errorf("%d: failed %d retries %d correct %d waits %v", status, r.Failed, r.Retries, r.Correct, waits)
		}
		for _, d := range waits {
			if d < time.Second {
				t.Errorf("%d: waited %v, the server asked for 1 s", status, d)
			}
		}
	}
}

// TestTaskCancel: a run whose context ends returns its error instead of waiting for the endpoint, which here
// would answer in an hour (the 10-minute timeout is a hang guard, not a speed requirement).
func TestTaskCancel(t *testing.T) {
	f, srv := newFake(t, "", "", quantReplies)
	f.delay = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	o := TaskOptions{Dataset: "testdata/task.jsonl", Endpoint: Endpoint{BaseURL: srv.URL}}
	done := make(chan error, 1)
	go func() {
		_, err := ScoreTask(ctx, o, o.Endpoint, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("cancelled run: %v", err)
		}
	case <-time.After(10 * time.Minute):
		t.Fatal("the cancelled run is still waiting for the endpoint")
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{},
		{Task: TaskOptions{Dataset: "x.jsonl"}},
		{Task: TaskOptions{Dataset: "x.jsonl", Endpoint: Endpoint{BaseURL: "http://x"}, Pattern: "("}},
		{Task: TaskOptions{Dataset: "x.jsonl", Endpoint: Endpoint{BaseURL: "http://x"}}, Thresholds: Thresholds{MaxF1Drop: 0.1}},
		{Task: TaskOptions{Dataset: "x.jsonl", Endpoint: Endpoint{BaseURL: "http://x"}}, Thresholds: Thresholds{MaxKLD: 0.1}},
		{Dist: DistOptions{Reference: "a", Candidate: "b", Prompts: "p"}},
		{Dist: DistOptions{Reference: "a", Candidate: "b", Prompts: "p", Load: fakeLoader(nil)}, Thresholds: Thresholds{MinTop1: 90}},
		{Sensitivity: SensitivityOptions{Reference: "a", Prompts: "p"}},
		{Sensitivity: SensitivityOptions{Reference: "a", Prompts: "p", Load: fakeLoader(nil), FileType: gguf.FileTypeF16}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("accepted %+v", o)
		}
	}
}

func TestReadItemsErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"nolabel":  `{"messages":[{"role":"user","content":"x"}]}`,
		"badrole":  `{"messages":[{"role":"robot","content":"x"}],"label":"1"}`,
		"nomsgs":   `{"label":"1"}`,
		"notjson":  `RISK_LEVEL: 1`,
		"empty":    "\n\n",
		"emptylbl": `{"messages":[{"role":"user","content":"x"}],"label":" "}`,
	} {
		p := writeFile(t, dir, name+".jsonl", body)
		_, err := ReadItems(p)
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a FormatError", name, err)
		}
	}
}
