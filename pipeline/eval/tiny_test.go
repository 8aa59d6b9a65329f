package eval

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
)

// kldOrder compares dir's reference with itself (CompareDistributions: the stage refuses it), then runs the
// stage against every quantized file with load, checks that the reference against itself is exact and that the
// mean KLD grows Q8_0 < Q6_K < Q4_K_M < Q2_K, and returns the results by type.
func kldOrder(t *testing.T, dir string, load Loader, prompts string, window int) map[string]DistResult {
	t.Helper()
	ref := filepath.Join(dir, "f32.gguf")
	run := func(cand string, th Thresholds) Result {
		o := Options{Dist: DistOptions{Reference: ref, Candidate: cand, Prompts: prompts, Load: load, Window: window}, Thresholds: th}
		r, err := Run(context.Background(), o, nil)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(cand), err)
		}
		return r
	}
	ps, err := ReadPrompts(prompts)
	if err != nil {
		t.Fatal(err)
	}
	m, err := load(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	d, err := CompareDistributions(context.Background(), m, m, ps, DistOptions{Window: window}, nil)
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	if d.MeanKLD != 0 || d.MaxKLD != 0 || d.Top1 != 1 || d.PPLReference != d.PPLCandidate {
		t.Errorf("reference against itself: %+v", d)
	}
	t.Logf("F32 vs F32: %d positions, KLD %g, top-1 %.2f %%, PPL %.3f", d.Positions, d.MeanKLD, 100*d.Top1, d.PPLReference)
	out := map[string]DistResult{}
	prev := 0.0
	for _, ft := range quantTypes {
		r := run(filepath.Join(dir, ft.String()+".gguf"), Thresholds{})
		d := *r.Distribution
		out[ft.String()] = d
		t.Logf("F32 vs %-6s: KLD mean %.6f median %.6f p99 %.6f max %.6f, top-1 %.2f %%, RMS Δp %.4f, PPL %.4f → %.4f",
			ft, d.MeanKLD, d.MedianKLD, d.P99KLD, d.MaxKLD, 100*d.Top1, d.RMSDeltaTop, d.PPLReference, d.PPLCandidate)
		if d.MeanKLD <= prev {
			t.Errorf("%s: mean KLD %.6g not above the previous type's %.6g", ft, d.MeanKLD, prev)
		}
		prev = d.MeanKLD
	}
	return out
}

// TestKLDOrderGoEngine is the acceptance on the Go engine (runtime/goengine's Logits): KLD(reference,
// reference) = 0 with 100 % top-1, and KLD grows Q8_0 < Q6_K < Q4_K_M < Q2_K, on tiny Qwen3 and Qwen3.5.
func TestKLDOrderGoEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("converts, quantizes and runs tiny models")
	}
	for _, preset := range []string{"qwen3", "qwen35"} {
		t.Run(preset, func(t *testing.T) {
			kldOrder(t, tinyModels(t, preset), goLoader, "testdata/prompts.txt", 0)
		})
	}
}

// TestKLDOrderLlamaCpp repeats the ordering with upstream llama.cpp computing the logits (an independent
// engine), and checks the Go engine's figures agree with it.
func TestKLDOrderLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp")
	}
	o := oracle.Shared(t)
	dir := tinyModels(t, "qwen3")
	llama := kldOrder(t, dir, oracleLoader(t, o), "testdata/prompts.txt", 512)
	goe := kldOrder(t, dir, goLoader, "testdata/prompts.txt", 512)
	for ft, l := range llama {
		g := goe[ft]
		// Both engines keep K/V in F16; their KLDs agree closely but not bit for bit.
		if rel := math.Abs(g.MeanKLD-l.MeanKLD) / l.MeanKLD; rel > 0.1 {
			t.Errorf("%s: Go engine mean KLD %.6g, llama.cpp %.6g (%.1f %% apart)", ft, g.MeanKLD, l.MeanKLD, 100*rel)
		}
	}
}

// TestStreamingMatchesBruteForceLlamaCpp: on real logits (llama.cpp, tiny Qwen3, F32 against Q4_K_M, three
// prompts in 16-token windows) the streaming figures equal a brute-force computation from full logits within
// 1e-6.
func TestStreamingMatchesBruteForceLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp")
	}
	o := oracle.Shared(t)
	dir := tinyModels(t, "qwen3")
	load := oracleLoader(t, o)
	ref, err := load(context.Background(), filepath.Join(dir, "f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	cand, err := load(context.Background(), filepath.Join(dir, "Q4_K_M.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	prompts := []Prompt{{Text: "The bank flagged the payment."}, {Text: "Risk review: the account is new and the amount is large."},
		{Text: "Numbers like 12, 345 and 6789 appear in invoices."}}
	got, err := CompareDistributions(context.Background(), ref, cand, prompts, DistOptions{Window: 16, Queue: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seqs [][]int32
	for _, p := range prompts {
		toks, err := ref.Tokenize(context.Background(), p.Text, true)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, toks)
	}
	want := bruteDist(t, ref, cand, seqs, 16)
	checkAgainst(t, got, want, 1e-6)
	if got.MeanKLD <= 0 || got.Windows < 4 {
		t.Errorf("implausible: %+v", got)
	}
	t.Logf("%d positions in %d windows: streaming mean KLD %.9f, brute force %.9f; p99 %.9f / %.9f",
		got.Positions, got.Windows, got.MeanKLD, want.MeanKLD, got.P99KLD, want.P99KLD)
}
