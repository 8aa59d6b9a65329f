package engine

import (
	"errors"
	"math"
	"testing"
)

func mustSample(t *testing.T, s *Sampler, logits []float32, history []int32) int32 {
	t.Helper()
	tok, err := s.Sample(logits, history)
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	return tok
}

// TestSampleNonFinite is issue 14's NaN regression: logits that are all NaN used to make min-p drop every
// candidate and the draw index c[-1] (a panic that killed the server); at temperature 0 the argmax over NaN
// returned token 0 as if it were an answer. Every sampler configuration must refuse them instead.
func TestSampleNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	seed := uint64(1)
	params := map[string]SamplingParams{
		"greedy":       Greedy(),
		"default":      DefaultSampling(),
		"min_p only":   {Temperature: 1, MinP: 0.05, Seed: &seed},
		"top_p only":   {Temperature: 0.7, TopP: 0.9, Seed: &seed},
		"top_k only":   {Temperature: 1, TopK: 3, Seed: &seed},
		"plain":        {Temperature: 1, Seed: &seed},
		"penalties":    {Temperature: 0.8, RepeatPenalty: 1.3, FrequencyPenalty: 0.5, PresencePenalty: 0.5, Seed: &seed},
		"greedy+rep":   {RepeatPenalty: 1.1},
		"tiny temp":    {Temperature: 1e-30, Seed: &seed},
		"huge penalty": {Temperature: 1, RepeatPenalty: 1e-38, Seed: &seed},
	}
	inputs := map[string][]float32{
		"all NaN":        {nan, nan, nan, nan},
		"one NaN":        {1, 2, nan, 0},
		"NaN first":      {nan, 5, 1, 1},
		"+Inf":           {1, inf, 2, 3},
		"-Inf":           {-inf, 1, 2, 3},
		"all -Inf":       {-inf, -inf, -inf, -inf},
		"NaN and +Inf":   {nan, inf, nan, -inf},
		"single NaN row": {nan},
	}
	for pn, p := range params {
		for in, logits := range inputs {
			tok, err := NewSampler(p).Sample(append([]float32(nil), logits...), []int32{1, 2})
			var nf *NonFiniteError
			if !errors.Is(err, ErrNonFiniteLogits) || !errors.As(err, &nf) || nf.Count == 0 {
				t.Errorf("%s, %s: token %d, err %v; want ErrNonFiniteLogits", pn, in, tok, err)
			}
		}
		// Finite logits still sample, including after penalties that overflow float32 and at a
		// temperature so small that 1/T is infinite.
		logits := []float32{1e38, 3e38, -3e38, 0, 2}
		tok, err := NewSampler(p).Sample(logits, []int32{1, 2, 4})
		if err != nil || tok < 0 || int(tok) >= len(logits) {
			t.Errorf("%s, finite extremes: token %d, err %v", pn, tok, err)
		}
	}
	if _, err := NewSampler(Greedy()).Sample(nil, nil); err == nil {
		t.Error("empty logits sampled")
	}
}

func TestNonFiniteErrorNamesTheFirst(t *testing.T) {
	err := CheckFinite([]float32{0, 1, float32(math.Inf(-1)), float32(math.NaN())})
	var nf *NonFiniteError
	if !errors.As(err, &nf) || nf.Count != 2 || nf.First != 2 || !math.IsInf(float64(nf.Value), -1) {
		t.Fatalf("%v", err)
	}
	if CheckFinite([]float32{0, -math.MaxFloat32, math.MaxFloat32, math.SmallestNonzeroFloat32}) != nil {
		t.Fatal("finite logits refused")
	}
}

func BenchmarkCheckFinite(b *testing.B) {
	logits := make([]float32, 151936) // Qwen's vocabulary
	for i := range logits {
		logits[i] = float32(i%97) - 40
	}
	b.SetBytes(int64(4 * len(logits)))
	for b.Loop() {
		if CheckFinite(logits) != nil {
			b.Fatal("finite")
		}
	}
}
