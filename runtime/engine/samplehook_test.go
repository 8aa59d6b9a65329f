package engine

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// setMatcher allows a fixed set of tokens at every step and counts calls.
type setMatcher struct {
	allowed  map[int32]bool
	accepted []int32
	allows   int
	masks    int
	err      error
}

func (m *setMatcher) Allows(t int32) bool { m.allows++; return m.allowed[t] }
func (m *setMatcher) Allowed(mask *TokenMask) (int, error) {
	m.masks++
	if m.err != nil {
		return 0, m.err
	}
	mask.Clear()
	for t := range m.allowed {
		mask.Set(t)
	}
	return len(m.allowed), nil
}
func (m *setMatcher) Accept(t int32) error {
	if !m.allowed[t] {
		return errors.New("not allowed")
	}
	m.accepted = append(m.accepted, t)
	return nil
}
func (m *setMatcher) Done() bool     { return false }
func (m *setMatcher) Clone() Matcher { c := *m; return &c }

func set(ts ...int32) map[int32]bool {
	s := map[int32]bool{}
	for _, t := range ts {
		s[t] = true
	}
	return s
}

func TestConstrainedGreedyFastAndMaskedPaths(t *testing.T) {
	logits := []float32{1, 5, 3, 4, 2}
	m := &setMatcher{allowed: set(1, 2)}
	s := NewSampler(Greedy())
	s.Constrain(m, len(logits))
	if got, _ := s.Sample(append([]float32(nil), logits...), nil); got != 1 || s.Err() != nil {
		t.Fatalf("got %d (%v), want 1", got, s.Err())
	}
	if m.masks != 0 {
		t.Fatal("the allowed argmax computed the mask (fast path missed)")
	}
	m.allowed = set(0, 2, 4)
	if got, _ := s.Sample(append([]float32(nil), logits...), nil); got != 2 {
		t.Fatalf("got %d, want 2 (the best allowed)", got)
	}
	if m.masks != 1 || len(m.accepted) != 2 {
		t.Fatalf("masks %d, accepted %v", m.masks, m.accepted)
	}
	// Ties among allowed tokens go to the lowest id, as unconstrained.
	m.allowed = set(3, 4)
	if got, _ := s.Sample([]float32{9, 1, 1, 2, 2}, nil); got != 3 {
		t.Fatalf("tie: got %d, want 3", got)
	}
	// Non-finite logits from the model are an error before any constraint
	// is consulted (the request ends; nothing sampled from them means
	// anything), and the matcher is left as it was.
	inf := float32(math.Inf(-1))
	m.allowed = set(2, 4)
	if _, err := s.Sample([]float32{1, 2, inf, 3, float32(math.NaN())}, nil); !errors.Is(err, ErrNonFiniteLogits) {
		t.Fatalf("non-finite logits with a constraint: err %v, want ErrNonFiniteLogits", err)
	}
}

func TestConstrainedSamplingDistribution(t *testing.T) {
	// Pure temperature sampling draws p(t)/P(allowed) on both paths.
	seed := uint64(7)
	logits := []float32{2, 1, 0, 1.5, -1, 0.5}
	allowed := set(1, 2, 4)
	s := NewSampler(SamplingParams{Temperature: 1, Seed: &seed})
	m := &setMatcher{allowed: allowed}
	s.Constrain(m, len(logits))
	const n = 60000
	counts := map[int32]int{}
	for range n {
		tok, _ := s.Sample(append([]float32(nil), logits...), nil)
		if !allowed[tok] {
			t.Fatalf("drew %d", tok)
		}
		counts[tok]++
	}
	var z float64
	for tok := range allowed {
		z += math.Exp(float64(logits[tok]))
	}
	for tok := range allowed {
		want := math.Exp(float64(logits[tok])) / z
		got := float64(counts[tok]) / n
		if math.Abs(got-want) > 0.01 {
			t.Fatalf("token %d drawn %.4f of the time, want %.4f", tok, got, want)
		}
	}
	if m.masks == 0 || m.masks == n {
		t.Fatalf("masks computed %d times of %d: both paths should run", m.masks, n)
	}
}

func TestConstraintFailures(t *testing.T) {
	s := NewSampler(Greedy())
	m := &setMatcher{allowed: set()}
	s.Constrain(m, 3)
	s.Sample([]float32{1, 2, 3}, nil)
	if !errors.Is(s.Err(), ErrNoAllowedToken) {
		t.Fatalf("err %v, want ErrNoAllowedToken", s.Err())
	}
	boom := errors.New("state limit")
	m.err = boom
	s.Sample([]float32{1, 2, 3}, nil)
	if !errors.Is(s.Err(), boom) {
		t.Fatalf("err %v, want the matcher's", s.Err())
	}
	m.err, m.allowed = nil, set(0)
	if got, _ := s.Sample([]float32{1, 2, 3}, nil); got != 0 || s.Err() != nil {
		t.Fatalf("recovered step: %d %v", got, s.Err())
	}
}

func logSoftmax(l []float32, keep func(int) bool) []float64 {
	maxl := math.Inf(-1)
	for i, v := range l {
		if keep(i) {
			maxl = math.Max(maxl, float64(v))
		}
	}
	var sum float64
	for i, v := range l {
		if keep(i) {
			sum += math.Exp(float64(v) - maxl)
		}
	}
	out := make([]float64, len(l))
	for i, v := range l {
		out[i] = math.Inf(-1)
		if keep(i) {
			out[i] = float64(v) - maxl - math.Log(sum)
		}
	}
	return out
}

func TestLogprobSources(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]float32, 50)
	for i := range raw {
		raw[i] = float32(rng.NormFloat64() * 3)
	}
	history := []int32{7, 7, 3}
	p := SamplingParams{Temperature: 0.7, TopK: 5, RepeatPenalty: 1.5, PresencePenalty: 0.5}
	seed := uint64(3)
	p.Seed = &seed
	allowed := set(3, 7, 11, 20, 21, 40)

	// Model: the raw logits' log-softmax, whatever the penalties and mask.
	s := NewSampler(p)
	s.Constrain(&setMatcher{allowed: allowed}, len(raw))
	s.RecordLogprobs(LogprobOptions{Top: 4})
	tok, _ := s.Sample(append([]float32(nil), raw...), history)
	lp, ok := s.Logprobs()
	want := logSoftmax(raw, func(int) bool { return true })
	if !ok || lp.Token.ID != tok || math.Abs(lp.Token.Logprob-want[tok]) > 1e-9 || len(lp.Top) != 4 {
		t.Fatalf("model logprobs %+v for %d, want %v", lp, tok, want[tok])
	}
	assertTop(t, lp.Top, want)

	// Constrained: after penalties and the mask, before temperature.
	s = NewSampler(p)
	s.Constrain(&setMatcher{allowed: allowed}, len(raw))
	s.RecordLogprobs(LogprobOptions{Top: 10, Source: LogprobsConstrained})
	tok, _ = s.Sample(append([]float32(nil), raw...), history)
	lp, _ = s.Logprobs()
	pen := append([]float32(nil), raw...)
	NewSampler(p).penalize(pen, history)
	want = logSoftmax(pen, func(i int) bool { return allowed[int32(i)] })
	if math.Abs(lp.Token.Logprob-want[tok]) > 1e-9 || len(lp.Top) != len(allowed) {
		t.Fatalf("constrained logprobs %+v, want %v and %d alternatives", lp, want[tok], len(allowed))
	}
	assertTop(t, lp.Top, want)
	var total float64
	for _, x := range lp.Top {
		total += math.Exp(x.Logprob)
	}
	if math.Abs(total-1) > 1e-9 {
		t.Fatalf("allowed probabilities sum to %v", total)
	}

	// Without a constraint, recording does not change the draw.
	a, b := NewSampler(p), NewSampler(p)
	b.RecordLogprobs(LogprobOptions{Top: 2})
	for range 20 {
		x, _ := a.Sample(append([]float32(nil), raw...), history)
		if y, _ := b.Sample(append([]float32(nil), raw...), history); x != y {
			t.Fatal("recording changed the sample")
		}
	}
	if err := (LogprobOptions{Top: 21}).Validate(); err == nil {
		t.Fatal("top 21 accepted")
	}
}

func assertTop(t *testing.T, top []TokenLogprob, want []float64) {
	t.Helper()
	for i, x := range top {
		if math.Abs(x.Logprob-want[x.ID]) > 1e-9 {
			t.Fatalf("top[%d] = %+v, want logprob %v", i, x, want[x.ID])
		}
		if i > 0 && (x.Logprob > top[i-1].Logprob || x.Logprob == top[i-1].Logprob && x.ID < top[i-1].ID) {
			t.Fatalf("top not in order: %+v", top)
		}
	}
	// Nothing outside the list is more likely than its last entry.
	in := map[int32]bool{}
	for _, x := range top {
		in[x.ID] = true
	}
	for id, w := range want {
		if !in[int32(id)] && w > top[len(top)-1].Logprob {
			t.Fatalf("token %d (%v) missing from top %+v", id, w, top)
		}
	}
}

func TestTokenMask(t *testing.T) {
	m := NewTokenMask(130)
	for _, id := range []int32{0, 63, 64, 129, 130, -1} {
		m.Set(id)
	}
	if m.Count() != 4 || !m.Has(129) || m.Has(130) || m.Has(-1) || m.Has(1) {
		t.Fatalf("mask %v count %d", m.Words(), m.Count())
	}
	o := NewTokenMask(130)
	o.CopyFrom(m)
	m.Clear()
	if m.Count() != 0 || o.Count() != 4 {
		t.Fatal("clear/copy")
	}
	v := NewVocabulary([]VocabToken{{Piece: "a"}, {Text: "<e>", EOG: true}, {Piece: "b"}})
	if v.Size() != 3 || !v.IsEOG(1) || v.IsEOG(2) || len(v.EOG()) != 1 || v.Piece(2) != "b" || v.Piece(9) != "" {
		t.Fatal("vocabulary")
	}
	calls := 0
	for range 3 {
		if v.Derived("k", func(*Vocabulary) any { calls++; return 42 }).(int) != 42 {
			t.Fatal("derived value")
		}
	}
	if calls != 1 {
		t.Fatalf("built %d times", calls)
	}
}

// TestConstrainedEqualsMaskThenSample: the constrained sampler draws what
// an unconstrained one draws on logits with the forbidden tokens at -Inf
// (after its fast-path draw was rejected), whether few tokens are allowed
// (the chain runs on them alone) or many (the logits are masked).
func TestConstrainedEqualsMaskThenSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, nAllowed := range []int{3, 200} {
		for _, p := range []SamplingParams{Greedy(), DefaultSampling(), {Temperature: 1.3}, {Temperature: 0.9, TopP: 0.8}, {Temperature: 1, MinP: 0.2, TopK: 7}} {
			seed := uint64(nAllowed)
			p.Seed = &seed
			a, b := NewSampler(p), NewSampler(p)
			allowed := map[int32]bool{}
			for len(allowed) < nAllowed {
				allowed[rng.Int32N(256)] = true
			}
			a.Constrain(&setMatcher{allowed: allowed}, 256)
			for step := range 300 {
				l := make([]float32, 256)
				for i := range l {
					l[i] = float32(rng.NormFloat64() * 2)
				}
				got, _ := a.Sample(append([]float32(nil), l...), nil)
				want, _ := b.Sample(append([]float32(nil), l...), nil)
				if !allowed[want] {
					masked := append([]float32(nil), l...)
					for i := range masked {
						if !allowed[int32(i)] {
							masked[i] = float32(math.Inf(-1))
						}
					}
					// The chain itself (Sample refuses -Inf from a model).
					b.penalize(masked, nil)
					want = b.pick(masked)
				}
				if got != want {
					t.Fatalf("%d allowed, %+v, step %d: constrained drew %d, mask-then-sample %d", nAllowed, p, step, got, want)
				}
			}
		}
	}
}
