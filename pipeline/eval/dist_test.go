package eval

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {0.99, 4.96}, {1, 5}, {0.25, 2}} {
		if got := quantile(s, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if quantile(nil, 0.5) != 0 || quantile([]float64{7}, 0.99) != 7 {
		t.Error("quantile of empty or single")
	}
}

func TestCompareRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var scratch []float64
	for trial := range 50 {
		n := 1 + rng.IntN(3000)
		ref, cand := make([]float32, n), make([]float32, n)
		for i := range ref {
			ref[i] = float32(rng.NormFloat64() * 4)
			cand[i] = ref[i] + float32(rng.NormFloat64()*0.3*float64(trial%5))
		}
		s, err := compareRow(ref, cand, int32(n-1), &scratch)
		if err != nil {
			t.Fatal(err)
		}
		want := bruteKLD(ref, cand)
		if math.Abs(s.kld-want) > 1e-9*max(1, want) {
			t.Errorf("n=%d: KLD %v, brute force %v", n, s.kld, want)
		}
		p, q := softmax(ref), softmax(cand)
		if math.Abs(s.nllRef+math.Log(p[n-1])) > 1e-9 || math.Abs(s.nllCand+math.Log(q[n-1])) > 1e-9 {
			t.Errorf("NLL %v %v, want %v %v", s.nllRef, s.nllCand, -math.Log(p[n-1]), -math.Log(q[n-1]))
		}
		if s.sameTop1 != (argmax(ref) == argmax(cand)) {
			t.Error("top-1")
		}
		self, _ := compareRow(ref, ref, -1, &scratch)
		if self.kld != 0 || !self.sameTop1 || self.hasNext {
			t.Errorf("self comparison %+v", self)
		}
	}
	if _, err := compareRow([]float32{1, 2}, []float32{1}, -1, &scratch); err == nil {
		t.Error("length mismatch accepted")
	}
	if _, err := compareRow([]float32{1, float32(math.NaN())}, []float32{1, 2}, -1, &scratch); err == nil {
		t.Error("NaN accepted")
	}
	if _, err := compareRow([]float32{1, 2}, []float32{1, 2}, 2, &scratch); err == nil {
		t.Error("next token outside the vocabulary accepted")
	}
}

// bruteDist computes a DistResult from every row of every window, kept in memory.
func bruteDist(t *testing.T, ref, cand LogitModel, seqs [][]int32, window int) DistResult {
	var klds []float64
	var same, nll int
	var nr, nc float64
	for _, toks := range seqs {
		for start := 0; start < len(toks); start += window {
			w := toks[start:min(start+window, len(toks))]
			a, b := allRows(t, ref, w), allRows(t, cand, w)
			for p := range a {
				klds = append(klds, bruteKLD(a[p], b[p]))
				if argmax(a[p]) == argmax(b[p]) {
					same++
				}
				if p+1 < len(w) {
					nll++
					nr -= math.Log(softmax(a[p])[w[p+1]])
					nc -= math.Log(softmax(b[p])[w[p+1]])
				}
			}
		}
	}
	var r DistResult
	r.Positions, r.PredictedTokens = len(klds), nll
	var sum float64
	for _, k := range klds {
		sum += k
		r.MaxKLD = max(r.MaxKLD, k)
	}
	r.MeanKLD = sum / float64(len(klds))
	sorted := slices.Sorted(slices.Values(klds))
	// p99 by hand: rank 0.99·(n-1), interpolated.
	h := 0.99 * float64(len(sorted)-1)
	lo := int(h)
	r.P99KLD = sorted[lo] + (h-float64(lo))*(sorted[min(lo+1, len(sorted)-1)]-sorted[lo])
	r.Top1 = float64(same) / float64(len(klds))
	r.PPLReference, r.PPLCandidate = math.Exp(nr/float64(nll)), math.Exp(nc/float64(nll))
	return r
}

func checkAgainst(t *testing.T, got, want DistResult, tol float64) {
	t.Helper()
	if got.Positions != want.Positions || got.PredictedTokens != want.PredictedTokens {
		t.Errorf("positions %d/%d, brute force %d/%d", got.Positions, got.PredictedTokens, want.Positions, want.PredictedTokens)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"mean KLD", got.MeanKLD, want.MeanKLD}, {"p99 KLD", got.P99KLD, want.P99KLD}, {"max KLD", got.MaxKLD, want.MaxKLD},
		{"top-1", got.Top1, want.Top1}, {"PPL ref", got.PPLReference, want.PPLReference}, {"PPL cand", got.PPLCandidate, want.PPLCandidate},
	} {
		if math.Abs(c.got-c.want) > tol*max(1, math.Abs(c.want)) {
			t.Errorf("%s: streaming %.12g, brute force %.12g", c.name, c.got, c.want)
		}
	}
}

// TestStreamingMatchesBruteForce: on fake models (vocabulary 257, 16-token windows, 3-row queue, chunks of
// 5), the streaming figures equal those computed from all logits held in memory.
func TestStreamingMatchesBruteForce(t *testing.T) {
	ref := &fakeModel{vocab: 257, ctx: 64, chunk: 5, failAt: -1}
	cand := &fakeModel{vocab: 257, ctx: 64, chunk: 3, noise: 0.7, seed: 99, failAt: -1}
	prompts, err := ReadPrompts("testdata/prompts.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	o := DistOptions{Window: 16, Queue: 2}
	got, err := CompareDistributions(context.Background(), ref, cand, prompts, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seqs [][]int32
	for _, p := range prompts {
		toks, _ := promptTokens(context.Background(), ref, p)
		seqs = append(seqs, toks)
	}
	want := bruteDist(t, ref, cand, seqs, 16)
	checkAgainst(t, got, want, 1e-9)
	if got.Windows < 10 || got.MeanKLD <= 0 || got.Top1 >= 1 || got.Top1 <= 0 {
		t.Errorf("implausible result %+v", got)
	}
	t.Logf("%d positions in %d windows: mean KLD %.5f p99 %.5f max %.5f top-1 %.3f PPL %.3f → %.3f",
		got.Positions, got.Windows, got.MeanKLD, got.P99KLD, got.MaxKLD, got.Top1, got.PPLReference, got.PPLCandidate)

	self, err := CompareDistributions(context.Background(), ref, ref, prompts, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if self.MeanKLD != 0 || self.MaxKLD != 0 || self.Top1 != 1 || self.PPLReference != self.PPLCandidate {
		t.Errorf("reference against itself: %+v", self)
	}

	// The same model on both sides runs once (the Go engine could not run twice at once).
	counter := &countingModel{LogitModel: ref}
	once, err := CompareDistributions(context.Background(), counter, counter, prompts, o, nil)
	if err != nil || once.MeanKLD != 0 || once.Top1 != 1 || once.Positions != got.Positions || counter.calls != once.Windows {
		t.Errorf("same model: %v, %+v, %d Logits calls for %d windows", err, once, counter.calls, once.Windows)
	}

	o.MaxTokens = 50
	capped, err := CompareDistributions(context.Background(), ref, cand, prompts, o, nil)
	if err != nil || capped.Positions != 50 {
		t.Errorf("max tokens 50: %d positions, %v", capped.Positions, err)
	}
}

func TestDistributionErrors(t *testing.T) {
	prompts := []Prompt{{Text: strings.Repeat("abcdefgh", 10)}}
	ctx := context.Background()
	ok := func() *fakeModel { return &fakeModel{vocab: 100, ctx: 32, chunk: 4, failAt: -1} }
	for name, c := range map[string]struct {
		ref, cand *fakeModel
		want      string
	}{
		"vocab":     {ok(), &fakeModel{vocab: 101, ctx: 32, chunk: 4, failAt: -1}, "vocabulary"},
		"tokenizer": {ok(), &fakeModel{vocab: 100, ctx: 32, chunk: 4, failAt: -1, tokenShift: 1}, "tokenizers disagree"},
		"candfail":  {ok(), &fakeModel{vocab: 100, ctx: 32, chunk: 4, failAt: 13}, "candidate: fake forward"},
		"reffail":   {&fakeModel{vocab: 100, ctx: 32, chunk: 4, failAt: 7}, ok(), "reference: fake forward"},
		"context":   {ok(), &fakeModel{vocab: 100, ctx: 16, chunk: 4, failAt: -1}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			o := DistOptions{Queue: 1}
			if name == "context" {
				o.Window = 32 // longer than the candidate's context
			}
			_, err := CompareDistributions(ctx, c.ref, c.cand, prompts, o, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := CompareDistributions(cctx, ok(), ok(), prompts, DistOptions{}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestRunDistributionGate goes through the stage API with a loader: the default window is the smaller
// context, thresholds pass and fail.
func TestRunDistributionGate(t *testing.T) {
	ref := &fakeModel{vocab: 300, ctx: 40, chunk: 8, failAt: -1}
	cand := &fakeModel{vocab: 300, ctx: 48, chunk: 8, noise: 0.3, seed: 5, failAt: -1}
	o := Options{Dist: DistOptions{Reference: "ref.gguf", Candidate: "cand.gguf", Prompts: "testdata/prompts.txt",
		Load: fakeLoader(map[string]LogitModel{"ref.gguf": ref, "cand.gguf": cand})}}
	r, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := r.Distribution
	// prompts.txt is one paragraph: 834 bytes, the last newline dropped with the white space around it.
	if !r.Pass || d == nil || d.Window != 40 || d.Windows != (833+39)/40 || d.Positions != 833 || d.Reference != "ref.gguf" {
		t.Fatalf("%+v %+v", r, d)
	}
	o.Thresholds = Thresholds{MaxKLD: d.MeanKLD * 1.01, MinTop1: d.Top1 * 0.99}
	if r, _ := Run(context.Background(), o, nil); !r.Pass {
		t.Errorf("thresholds just above the figures fail: %q", r.Reasons)
	}
	o.Thresholds = Thresholds{MaxKLD: d.MeanKLD * 0.99, MinTop1: math.Min(1, d.Top1*1.01+1e-9)}
	r, _ = Run(context.Background(), o, nil)
	if r.Pass || len(r.Reasons) != 2 || r.Err() == nil {
		t.Errorf("thresholds just below the figures: pass %v, reasons %q", r.Pass, r.Reasons)
	}
}

type countingModel struct {
	LogitModel
	calls int
}

func (m *countingModel) Logits(ctx context.Context, toks []int32, fn func(int, []float32) error) error {
	m.calls++
	return m.LogitModel.Logits(ctx, toks, fn)
}
