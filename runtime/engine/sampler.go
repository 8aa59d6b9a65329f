package engine

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// SamplingParams configure the sampler chain. The order of the chain is
// llama.cpp's default (common/sampling.cpp): penalties, top-k, top-p, min-p,
// temperature, then a seeded draw. Temperature <= 0 is greedy decoding (the
// highest logit after penalties; ties go to the lowest id).
type SamplingParams struct {
	Temperature float32 `json:"temperature"`
	// TopK keeps the K highest logits; 0 disables it.
	TopK int `json:"top_k"`
	// TopP keeps the smallest set whose probability reaches P; 0 or >= 1
	// disables it.
	TopP float32 `json:"top_p"`
	// MinP drops tokens whose probability is below MinP times the top one;
	// 0 disables it.
	MinP float32 `json:"min_p"`
	// RepeatPenalty divides positive (multiplies negative) logits of tokens
	// seen in the last RepeatLastN tokens; 0 or 1 disables it.
	RepeatPenalty float32 `json:"repeat_penalty"`
	// RepeatLastN is the penalty window; 0 means 64, -1 the whole context.
	RepeatLastN int `json:"repeat_last_n"`
	// FrequencyPenalty and PresencePenalty are OpenAI's additive penalties.
	FrequencyPenalty float32 `json:"frequency_penalty"`
	PresencePenalty  float32 `json:"presence_penalty"`
	// Seed makes the draw reproducible; nil draws a random seed.
	Seed *uint64 `json:"seed,omitempty"`
}

// DefaultSampling returns llama.cpp's default sampling parameters
// (common/common.h: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalty).
func DefaultSampling() SamplingParams {
	return SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1}
}

// Greedy returns parameters for greedy decoding.
func Greedy() SamplingParams { return SamplingParams{} }

// Validate reports parameters outside their ranges.
func (p SamplingParams) Validate() error {
	switch {
	case math.IsNaN(float64(p.Temperature)) || p.Temperature < 0 || p.Temperature > 100:
		return fmt.Errorf("temperature %v outside [0, 100]", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d is negative", p.TopK)
	case math.IsNaN(float64(p.TopP)) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p %v outside [0, 1]", p.TopP)
	case math.IsNaN(float64(p.MinP)) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("min_p %v outside [0, 1]", p.MinP)
	case math.IsNaN(float64(p.RepeatPenalty)) || p.RepeatPenalty < 0:
		return fmt.Errorf("repeat_penalty %v is negative", p.RepeatPenalty)
	case p.RepeatLastN < -1:
		return fmt.Errorf("repeat_last_n %d below -1", p.RepeatLastN)
	case math.IsNaN(float64(p.FrequencyPenalty)) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return fmt.Errorf("frequency_penalty %v outside [-2, 2]", p.FrequencyPenalty)
	case math.IsNaN(float64(p.PresencePenalty)) || p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return fmt.Errorf("presence_penalty %v outside [-2, 2]", p.PresencePenalty)
	}
	return nil
}

// Sampler picks the next token from logits. It is not safe for concurrent
// use; each sequence owns one.
type Sampler struct {
	p    SamplingParams
	rng  *rand.Rand
	cand []candidate
	hook hook // constraint and log-probability recording (samplehook.go)
}

type candidate struct {
	id    int32
	logit float32
	prob  float32
}

// NewSampler returns a sampler for p.
func NewSampler(p SamplingParams) *Sampler {
	seed := rand.Uint64()
	if p.Seed != nil {
		seed = *p.Seed
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// ErrNonFiniteLogits is returned (wrapped in a *NonFiniteError) by Sample
// when the model's logits hold a NaN or an infinity: a broken model file
// (NaN weights, a hyper-parameter such as rope.freq_base that is NaN or not
// positive) or an overflow. Nothing sampled from such logits means anything,
// not even the argmax, so the request must end with an error rather than
// text.
var ErrNonFiniteLogits = errors.New("engine: model produced non-finite logits")

// NonFiniteError says which logits were not finite.
type NonFiniteError struct {
	Count int     // logits that are NaN or ±Inf
	First int     // index of the first one
	Value float32 // its value
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("%v: %d of them, first %v at token %d", ErrNonFiniteLogits, e.Count, e.Value, e.First)
}

func (e *NonFiniteError) Unwrap() error { return ErrNonFiniteLogits }

// CheckFinite returns a *NonFiniteError when logits hold a NaN or an
// infinity.
func CheckFinite(logits []float32) error {
	bad, first := 0, -1
	for i, v := range logits {
		// v-v is 0 for every finite v, NaN for NaN and ±Inf.
		if v-v != 0 {
			if bad == 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		return &NonFiniteError{Count: bad, First: first, Value: logits[first]}
	}
	return nil
}

// Sample returns the next token id. history holds the tokens so far (prompt
// and generated) for the penalties. Sample modifies logits in place. It
// fails (ErrNonFiniteLogits) when the logits are not all finite, at any
// temperature, and never indexes outside them. With a constraint (Constrain)
// the token is one the constraint allows and the matcher has accepted it; a
// constraint that cannot go on is returned as the error too (and by Err).
func (s *Sampler) Sample(logits []float32, history []int32) (int32, error) {
	if len(logits) == 0 {
		return 0, errors.New("engine: sample: no logits")
	}
	if err := CheckFinite(logits); err != nil {
		return 0, err
	}
	if s.hook.active() {
		t := s.sampleHooked(logits, history)
		return t, s.hook.err
	}
	s.penalize(logits, history)
	return s.pick(logits), nil
}

// pick runs the chain after the penalties: greedy, or top-k, top-p, min-p,
// temperature and a seeded draw. It does not modify logits.
func (s *Sampler) pick(logits []float32) int32 {
	if s.p.Temperature <= 0 {
		return argmax(logits)
	}
	c := s.topK(logits)
	c = s.topP(c)
	c = s.minP(c)
	if len(c) == 0 {
		// Only when every logit is -Inf (a constraint's mask): the argmax
		// is as good as any, and the caller's mask check decides.
		return argmax(logits)
	}
	// Temperature, then softmax and a draw. The scaled differences are
	// computed in float64 from finite inputs: a temperature near zero makes
	// them -Inf (probability 0), never NaN.
	maxl := c[0].logit
	for _, x := range c[1:] {
		maxl = max(maxl, x.logit)
	}
	t := float64(s.p.Temperature)
	var sum float64
	for i := range c {
		e := math.Exp((float64(c[i].logit) - float64(maxl)) / t)
		c[i].prob = float32(e)
		sum += e
	}
	r := s.rng.Float64() * sum
	var acc float64
	for _, x := range c {
		acc += float64(x.prob)
		if r < acc {
			return x.id
		}
	}
	return c[len(c)-1].id
}

func argmax(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}

func (s *Sampler) penalize(logits []float32, history []int32) {
	rp := s.p.RepeatPenalty
	if (rp == 0 || rp == 1) && s.p.FrequencyPenalty == 0 && s.p.PresencePenalty == 0 {
		return
	}
	n := s.p.RepeatLastN
	if n == 0 {
		n = 64
	}
	if n > 0 && len(history) > n {
		history = history[len(history)-n:]
	}
	counts := make(map[int32]int, len(history))
	for _, t := range history {
		if t >= 0 && int(t) < len(logits) {
			counts[t]++
		}
	}
	for t, c := range counts {
		l := logits[t]
		if math.IsInf(float64(l), 0) {
			continue // set by a constraint, not by the model: it stays as it is
		}
		if rp != 0 && rp != 1 {
			if l <= 0 {
				l *= rp
			} else {
				l /= rp
			}
		}
		l -= float32(c)*s.p.FrequencyPenalty + s.p.PresencePenalty
		// A penalty near zero divides a logit past float32's range: keep it
		// finite so the rest of the chain compares real numbers.
		logits[t] = max(min(l, math.MaxFloat32), -math.MaxFloat32)
	}
}

// topK builds the candidate list: the K best sorted by logit descending, or
// every token (sorted only when top-p needs it).
func (s *Sampler) topK(logits []float32) []candidate {
	k := s.p.TopK
	if k > 0 && k < len(logits) {
		h := candHeap(s.cand[:0])
		for i, l := range logits {
			if len(h) < k {
				heap.Push(&h, candidate{id: int32(i), logit: l})
			} else if l > h[0].logit {
				h[0] = candidate{id: int32(i), logit: l}
				heap.Fix(&h, 0)
			}
		}
		s.cand = h
		sortCandidates(s.cand)
		return s.cand
	}
	s.cand = s.cand[:0]
	for i, l := range logits {
		s.cand = append(s.cand, candidate{id: int32(i), logit: l})
	}
	if s.p.TopP > 0 && s.p.TopP < 1 {
		sortCandidates(s.cand)
	}
	return s.cand
}

func sortCandidates(c []candidate) {
	slices.SortFunc(c, func(a, b candidate) int {
		switch {
		case a.logit > b.logit:
			return -1
		case a.logit < b.logit:
			return 1
		}
		return int(a.id - b.id)
	})
}

// topP keeps the smallest prefix (of the sorted list) whose probability
// reaches TopP, at least one token.
func (s *Sampler) topP(c []candidate) []candidate {
	p := s.p.TopP
	if p <= 0 || p >= 1 || len(c) <= 1 {
		return c
	}
	maxl := c[0].logit
	var sum float64
	for _, x := range c {
		sum += math.Exp(float64(x.logit - maxl))
	}
	var acc float64
	for i, x := range c {
		acc += math.Exp(float64(x.logit-maxl)) / sum
		if acc >= float64(p) {
			return c[:i+1]
		}
	}
	return c
}

// minP keeps tokens whose probability is at least MinP times the largest,
// i.e. logit >= max + ln(MinP).
func (s *Sampler) minP(c []candidate) []candidate {
	p := s.p.MinP
	if p <= 0 || len(c) <= 1 {
		return c
	}
	maxl := float32(math.Inf(-1))
	for _, x := range c {
		maxl = max(maxl, x.logit)
	}
	limit := maxl + float32(math.Log(float64(p)))
	out := c[:0]
	for _, x := range c {
		if x.logit >= limit {
			out = append(out, x)
		}
	}
	return out
}

// candHeap is a min-heap on logit (ties: the higher id is smaller, so the
// lower id survives).
type candHeap []candidate

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].logit != h[j].logit {
		return h[i].logit < h[j].logit
	}
	return h[i].id > h[j].id
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
