package goengine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/engine"
)

// chunkEnds is where the scheduler's plan (sched.go) ends the prompt's batches from slot length at up to
// position until: batches of at most batch tokens, each cut short at the first cut inside it.
func chunkEnds(at, until, batch int, cuts []int) []int {
	var ends []int
	for at <= until {
		n := batch
		for _, c := range cuts {
			if c > at && c < at+n {
				n = c - at
				break
			}
		}
		at += n
		ends = append(ends, at-1)
	}
	return ends
}

// reachable is every position at which some chunking (batches of 1..batch tokens) from (at, last) records a
// checkpoint, up to limit: a brute force over the batch ends, independent of plan's interval arithmetic.
func reachable(rule ckRule, at, last, batch, limit int) map[int]bool {
	out := map[int]bool{}
	type state struct{ end, last int }
	seen := map[state]bool{}
	var walk func(end, last int)
	walk = func(end, last int) {
		if seen[state{end, last}] {
			return
		}
		seen[state{end, last}] = true
		for e := end + 1; e <= min(end+batch, limit); e++ {
			l := last
			if e >= rule.minPos && (last < 0 || e-last >= rule.interval) {
				out[e] = true
				l = e
			}
			walk(e, l)
		}
	}
	walk(at-1, last)
	return out
}

// TestCheckpointPlan: with a small rule (checkpoints from position 3 on, at least 7 apart), for every start
// (fresh slot, or resumed just after a checkpoint), batch size and boundary, the planned chunking records a
// checkpoint at the latest position before the boundary that any chunking could reach — at boundary-1 itself
// whenever that is reachable — and the mirror agrees with the simulation.
func TestCheckpointPlan(t *testing.T) {
	rule := ckRule{minPos: 3, interval: 7, count: 24}
	const limit = 48
	for batch := 1; batch <= 6; batch++ {
		starts := [][2]int{{0, -1}}
		for l := 3; l < 20; l++ {
			starts = append(starts, [2]int{l + 1, l})
		}
		for _, st := range starts {
			at, last := st[0], st[1]
			can := reachable(rule, at, last, batch, limit)
			for boundary := at + 1; boundary <= limit; boundary++ {
				want := -1
				for p := boundary - 1; p >= at; p-- {
					if can[p] {
						want = p
						break
					}
				}
				s := newCkStore(rule)
				s.last = last
				cuts, landed := s.plan(at, boundary, batch)
				name := fmt.Sprintf("batch %d, at %d, last %d, boundary %d", batch, at, last, boundary)
				if want < 0 {
					if landed != 0 || len(cuts) != 0 {
						t.Fatalf("%s: nothing reachable, got landed %d cuts %v", name, landed, cuts)
					}
					continue
				}
				if landed != want+1 {
					t.Fatalf("%s: landed %d, want %d (reachable %v)", name, landed, want+1, can)
				}
				if !slices.IsSorted(cuts) || len(cuts) == 0 || cuts[0] <= at {
					t.Fatalf("%s: cuts %v", name, cuts)
				}
				for _, e := range chunkEnds(at, want, batch, cuts) {
					s.batchEnded(e)
				}
				if s.last != want || s.best(want+1) != want {
					t.Fatalf("%s: cuts %v give ends %v, last checkpoint %d, want %d", name, cuts, chunkEnds(at, want, batch, cuts), s.last, want)
				}
			}
		}
	}
}

// TestCheckpointStoreMirror: the ring behaves as Ollama's slotCheckpointStore: oldest entry overwritten when
// full, a restore drops the later entries and makes the restored one the last, a reset forgets everything.
func TestCheckpointStoreMirror(t *testing.T) {
	s := newCkStore(ckRule{minPos: 2, interval: 3, count: 3})
	for p := range 20 {
		s.batchEnded(p)
	}
	// Fired at 2, 5, 8, 11, 14, 17; the ring of 3 keeps 11, 14, 17.
	if got := slices.Sorted(slices.Values(s.pos)); !slices.Equal(got, []int{11, 14, 17}) || s.last != 17 {
		t.Fatalf("ring %v last %d", s.pos, s.last)
	}
	if s.best(17) != 14 || s.best(11) != -1 || s.best(100) != 17 {
		t.Fatalf("best: %d %d %d", s.best(17), s.best(11), s.best(100))
	}
	s.restored(14)
	if got := slices.Sorted(slices.Values(s.pos)); !slices.Equal(got, []int{-1, 11, 14}) || s.last != 14 || s.pos[s.next] != -1 {
		t.Fatalf("after restoring 14: ring %v next %d last %d", s.pos, s.next, s.last)
	}
	s.batchEnded(16) // too close to 14
	s.batchEnded(17)
	if got := slices.Sorted(slices.Values(s.pos)); !slices.Equal(got, []int{11, 14, 17}) {
		t.Fatalf("ring %v", s.pos)
	}
	s.reset()
	if s.best(100) != -1 || s.last != -1 || !s.fires(2) || s.fires(1) {
		t.Fatal("reset kept state")
	}
}

// TestQwen35BoundaryCheckpoint: a request that names its shared prefix (CacheBoundary) leaves a checkpoint
// there, so the next request sharing it resumes at exactly the boundary — where without the hint it resumes at
// the last checkpoint Ollama's spacing happened to leave. A boundary the checkpoint rule cannot land on gets the
// latest position before it that it can. Outputs always equal uncached ones.
func TestQwen35BoundaryCheckpoint(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen35", layers: 4, seed: 22}, Options{ContextLength: 4096})
	ref, err := Load(context.Background(), Options{Path: e.Info().Path, Threads: 1, ContextLength: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if !e.Info().ResumesAtCheckpoints {
		t.Fatal("a qwen35 engine does not say it resumes at checkpoints")
	}
	rubric := func(seed int32, n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = 97 + (seed+int32(i)*7)%26
		}
		return out
	}
	run := func(prefix []int32, tail int32, boundary int) int {
		t.Helper()
		req := engine.Request{Tokens: slices.Concat(prefix, []int32{32, tail, tail + 1, 10}), MaxTokens: 4, CacheBoundary: boundary}
		got, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.NoCache = true
		fresh, err := ref.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Tokens, fresh.Tokens) {
			t.Fatalf("cached %v, fresh %v", got.Tokens, fresh.Tokens)
		}
		return got.Timings.CachedTokens
	}
	// 2,540 shared tokens: reachable from a fresh slot (checkpoints at 527 and 2,539 with 512-token batches).
	a := rubric(1, 2540)
	if c := run(a, 65, len(a)); c != 0 {
		t.Fatalf("first request cached %d", c)
	}
	if c := run(a, 70, len(a)); c != len(a) {
		t.Fatalf("second request with the boundary hint resumed at %d, want %d", c, len(a))
	}
	if c := run(a, 75, len(a)); c != len(a) {
		t.Fatalf("third request resumed at %d, want %d", c, len(a))
	}
	// The same without the hint, on another prefix: Ollama's spacing leaves checkpoints at 511 (the first batch)
	// and 2,542 (before the last prompt token), past the 2,541 tokens the requests share: the second request
	// resumes at 512.
	b := rubric(2, 2540)
	run(b, 65, 0)
	if c := run(b, 70, 0); c != 512 {
		t.Fatalf("without the hint the second request resumed at %d, want 512", c)
	}
	// A boundary at 1,000 cannot be reached (checkpoints fire at the first batch end from 16 on, then at least
	// 1,664 later): the latest reachable position before it is 527 (a first batch of 512 ending at 527).
	c1 := rubric(3, 1000)
	run(c1, 65, len(c1))
	if c := run(c1, 70, len(c1)); c != 528 {
		t.Fatalf("unreachable boundary: resumed at %d, want 528", c)
	}
}

// TestWarmKeepsRubricsInSlots: two rubrics warmed on a two-slot engine (api.Warm, as `phonellm serve --warm`
// does) stay in their own slots, and the first real request of each resumes at exactly its rendered system
// message — for a hybrid model through the checkpoint the warm-up left there.
func TestWarmKeepsRubricsInSlots(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen35"} {
		t.Run(arch, func(t *testing.T) {
			e := load(t, tinySpec{arch: arch, layers: 4, seed: 23}, Options{Parallel: 2, ContextLength: 4096})
			rubric := func(name string) string {
				return name + ": " + strings.Repeat("weigh the evidence, then answer with a risk level. ", 40)
			}
			rubrics := []string{rubric("first rubric"), rubric("second rubric")}
			res, err := api.Warm(context.Background(), e, rubrics, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := api.New(api.Options{})
			s.SetEngine(e)
			ts := httptest.NewServer(s.Handler())
			defer ts.Close()
			for _, i := range []int{1, 0} {
				body, _ := json.Marshal(map[string]any{"max_tokens": 2, "messages": []map[string]string{
					{"role": "system", "content": rubrics[i]}, {"role": "user", "content": "Case 4: two refunds in a day."}}})
				resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
				if err != nil {
					t.Fatal(err)
				}
				var r api.ChatResponse
				err = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || r.Usage == nil || r.Usage.PromptTokensDetails == nil {
					t.Fatalf("status %d: %v", resp.StatusCode, err)
				}
				if got, want := r.Usage.PromptTokensDetails.CachedTokens, res[i].Boundary; got < want || (arch == "qwen35" && got != want) {
					t.Errorf("rubric %d: %d cached tokens, want %d (its system message)", i, got, want)
				}
			}
		})
	}
}

// TestQuantizedKVCache: q8_0 and q4_0 caches run with flash attention on both families (q8_0 giving the same
// greedy start as f16 on these models); without flash attention, or with heads that are not whole 32-value
// blocks, they are refused with a clear error instead of ggml aborting the process.
func TestQuantizedKVCache(t *testing.T) {
	prompt := []int32{104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100}
	for _, arch := range []string{"qwen3", "qwen35"} {
		spec := tinySpec{arch: arch, layers: 4, seed: 5, embd: 128, heads: 4, kvHeads: 2, headDim: 64}
		var want []int32
		for _, kv := range []string{"f16", "q8_0", "q4_0"} {
			e := load(t, spec, Options{ContextLength: 512, KVCacheType: kv, FlashAttention: true})
			r, err := e.Generate(context.Background(), engine.Request{Tokens: prompt, MaxTokens: 4}, nil)
			if err != nil || len(r.Tokens) != 4 {
				t.Fatalf("%s %s: %v %v", arch, kv, r.Tokens, err)
			}
			switch kv {
			case "f16":
				want = r.Tokens
			case "q8_0":
				if !slices.Equal(r.Tokens[:3], want[:3]) {
					t.Errorf("%s q8_0: %v, f16 %v", arch, r.Tokens, want)
				}
			}
		}
	}
	path := writeTinyGGUF(t, t.TempDir(), tinySpec{arch: "qwen3", seed: 5}) // 16-value heads
	if _, err := Load(context.Background(), Options{Path: path, KVCacheType: "q8_0"}); err == nil || !strings.Contains(err.Error(), "needs flash attention") {
		t.Errorf("q8_0 without flash attention: %v", err)
	}
	if _, err := Load(context.Background(), Options{Path: path, KVCacheType: "q4_0", FlashAttention: true}); err == nil || !strings.Contains(err.Error(), "multiple of 32") {
		t.Errorf("q4_0 with 16-value heads: %v", err)
	}
}
