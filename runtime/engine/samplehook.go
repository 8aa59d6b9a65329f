package engine

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// The sampler's hook: a constraint applied before the chain, and per-step
// log-probability recording. Kept apart from the chain itself (sampler.go).
//
// Constrained sampling follows llama.cpp (common/sampling.cpp,
// common_sampler_sample): the chain first runs on the penalized logits as if
// unconstrained; when the token it picks is one the constraint allows (the
// usual case with a model that follows its instructions) that token is taken
// and the full mask is never computed. Otherwise every forbidden token's
// logit is set to -Inf and the chain runs again (its random draw is a new
// one). For greedy decoding both give the constrained argmax; for pure
// temperature sampling both draw from the same distribution (p(t) over the
// allowed tokens' total); with top-k/top-p/min-p the fast path truncates
// before the mask, as llama.cpp does.

// LogprobSource says which distribution recorded log-probabilities describe.
type LogprobSource int

const (
	// LogprobsModel: the log-softmax of the model's logits as the forward
	// pass returned them — before repetition/frequency/presence penalties,
	// the constraint, temperature and top-k/top-p/min-p. This is the model's
	// own distribution, what llama-server reports by default
	// (post_sampling_probs false: server-context.cpp populate_token_probs
	// reads llama_get_logits_ith) and what OpenAI documents ("the log
	// probability of this token"). The fast and the masked path record the
	// same values. A constrained token's alternatives may include tokens the
	// constraint forbids.
	LogprobsModel LogprobSource = iota
	// LogprobsConstrained: the log-softmax of the logits after the penalties
	// and the constraint's mask, before temperature and truncation: forbidden
	// tokens have probability 0 and never appear among the alternatives, so
	// with a choices constraint the allowed answers' first tokens sum to 1.
	// It needs the full mask at every step (the fast path is skipped).
	// Without a constraint it is the penalized distribution.
	LogprobsConstrained
)

// MaxTopLogprobs bounds LogprobOptions.Top (OpenAI's top_logprobs maximum).
const MaxTopLogprobs = 20

// LogprobOptions ask the sampler to record log-probabilities.
type LogprobOptions struct {
	// Top is the number of most likely alternatives recorded per step,
	// 0..MaxTopLogprobs.
	Top int
	// Source selects the distribution (default LogprobsModel).
	Source LogprobSource
}

// Validate reports options outside their ranges.
func (o LogprobOptions) Validate() error {
	if o.Top < 0 || o.Top > MaxTopLogprobs {
		return fmt.Errorf("top logprobs %d outside [0, %d]", o.Top, MaxTopLogprobs)
	}
	if o.Source != LogprobsModel && o.Source != LogprobsConstrained {
		return fmt.Errorf("unknown logprob source %d", o.Source)
	}
	return nil
}

// TokenLogprob is a token and its natural-log probability.
type TokenLogprob struct {
	ID      int32   `json:"id"`
	Logprob float64 `json:"logprob"`
	// Piece is the bytes the token adds to the text (VocabToken.Piece:
	// empty for a control token, possibly part of a UTF-8 character), as
	// llama-server shows it by default; set when the engine knows its
	// vocabulary (RequestSampler does it).
	Piece string `json:"piece"`
}

// StepLogprobs is what the sampler recorded for one generated token.
type StepLogprobs struct {
	// Token is the sampled token.
	Token TokenLogprob `json:"token"`
	// Top holds the most likely tokens of the distribution, most likely
	// first (ties: lower id first); Token may or may not be among them.
	Top []TokenLogprob `json:"top,omitempty"`
}

// ErrNoAllowedToken is wrapped by the error of a constrained step at which
// the constraint allows no token of the vocabulary.
var ErrNoAllowedToken = errors.New("the constraint allows no token of the vocabulary here")

type hook struct {
	m      Matcher
	mask   *TokenMask
	rec    *LogprobOptions
	raw    []float32 // copy of the model's logits (LogprobsModel)
	step   StepLogprobs
	have   bool
	err    error
	topBuf candHeap
	ids    []int32     // allowed tokens (few-allowed path)
	sub    []float32   // their logits
	vocab  *Vocabulary // names the recorded tokens' pieces; may be nil
}

func (h *hook) active() bool { return h.m != nil || h.rec != nil }

// Constrain makes every following Sample draw only tokens m allows, and
// accept the drawn token into m. m must be at the position of the text
// generated so far; vocabSize is the length of the logits Sample will get.
func (s *Sampler) Constrain(m Matcher, vocabSize int) {
	s.hook.m = m
	s.hook.mask = NewTokenMask(vocabSize)
}

// RecordLogprobs makes every following Sample record the log-probability
// of the sampled token and the o.Top most likely tokens (see Logprobs).
func (s *Sampler) RecordLogprobs(o LogprobOptions) {
	s.hook.rec = &o
}

// Logprobs returns what the last Sample recorded; ok is false when
// recording is off or the step failed.
func (s *Sampler) Logprobs() (step StepLogprobs, ok bool) {
	return s.hook.step, s.hook.have
}

// Err reports why the last Sample failed; the token it returned is then
// meaningless and generation must stop. The cause is ErrNoAllowedToken or
// the matcher's error (a bound exceeded); engines wrap it in a
// *ConstraintError.
func (s *Sampler) Err() error { return s.hook.err }

func (s *Sampler) sampleHooked(logits []float32, history []int32) int32 {
	h := &s.hook
	h.have, h.err = false, nil
	if h.rec != nil && h.rec.Source == LogprobsModel {
		h.raw = append(h.raw[:0], logits...)
	}
	s.penalize(logits, history)
	if h.m == nil {
		t := s.pick(logits)
		s.record(logits, t, nil)
		return t
	}
	full := h.rec != nil && h.rec.Source == LogprobsConstrained
	if !full {
		if t := s.pick(logits); h.m.Allows(t) {
			if err := h.m.Accept(t); err != nil {
				h.err = err
				return 0
			}
			s.record(logits, t, nil)
			return t
		}
	}
	if len(logits) != h.mask.Len() {
		h.err = fmt.Errorf("logits for %d tokens, constraint set up for %d", len(logits), h.mask.Len())
		return 0
	}
	n, err := h.m.Allowed(h.mask)
	if err != nil {
		h.err = err
		return 0
	}
	if n == 0 {
		h.err = ErrNoAllowedToken
		return 0
	}
	var t int32
	if n <= len(logits)/8 {
		// Few tokens allowed: run the chain on them alone (the same draw
		// as on the masked logits, where the rest have probability 0).
		h.ids, h.sub = h.ids[:0], h.sub[:0]
		for wi, w := range h.mask.Words() {
			for w != 0 {
				id := int32(wi*64 + bits.TrailingZeros64(w))
				w &= w - 1
				h.ids = append(h.ids, id)
				h.sub = append(h.sub, logits[id])
			}
		}
		if k := s.p.TopK; k > 0 && k < len(logits) || s.p.TopP > 0 && s.p.TopP < 1 {
			// The chain on the full row would walk the candidates sorted
			// (logit descending, id ascending); present them so.
			h.sortAllowed()
		}
		t = h.ids[s.pick(h.sub)]
	} else {
		applyMask(logits, h.mask)
		t = s.pick(logits)
		if !h.mask.Has(t) {
			// Only when every allowed logit is -Inf or NaN, or the draw's
			// rounding fell off the end of the candidates.
			t = maskedArgmax(logits, h.mask)
		}
	}
	if err := h.m.Accept(t); err != nil {
		h.err = err
		return 0
	}
	s.record(logits, t, h.mask)
	return t
}

// sortAllowed orders the allowed tokens by logit descending, then id.
func (h *hook) sortAllowed() {
	idx := make([]int, len(h.ids))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch la, lb := h.sub[a], h.sub[b]; {
		case la > lb:
			return -1
		case la < lb:
			return 1
		}
		return int(h.ids[a] - h.ids[b])
	})
	ids, sub := make([]int32, len(idx)), make([]float32, len(idx))
	for i, j := range idx {
		ids[i], sub[i] = h.ids[j], h.sub[j]
	}
	h.ids, h.sub = ids, sub
}

// applyMask sets the logits of tokens outside mask to -Inf.
func applyMask(logits []float32, mask *TokenMask) {
	inf := float32(math.Inf(-1))
	for wi, w := range mask.Words() {
		if w == ^uint64(0) {
			continue
		}
		base := wi * 64
		end := min(base+64, len(logits))
		if w == 0 {
			for i := base; i < end; i++ {
				logits[i] = inf
			}
			continue
		}
		for i := base; i < end; i++ {
			if w&(1<<uint(i-base)) == 0 {
				logits[i] = inf
			}
		}
	}
}

// maskedArgmax is the allowed token with the highest logit (NaN counts as
// -Inf; ties and an all -Inf row go to the lowest id).
func maskedArgmax(logits []float32, mask *TokenMask) int32 {
	best := int32(-1)
	for i, v := range logits {
		if !mask.Has(int32(i)) {
			continue
		}
		if best < 0 || v > logits[best] || (math.IsNaN(float64(logits[best])) && !math.IsNaN(float64(v))) {
			best = int32(i)
		}
	}
	return best
}

// record computes the step's log-probabilities for token t: from the raw
// copy (LogprobsModel) or from logits, which then hold the penalized and
// masked values (LogprobsConstrained; mask nil when nothing was masked).
func (s *Sampler) record(logits []float32, t int32, mask *TokenMask) {
	h := &s.hook
	if h.rec == nil {
		return
	}
	src := logits
	if h.rec.Source == LogprobsModel {
		src, mask = h.raw, nil
	}
	allowed := func(i int) bool { return mask == nil || mask.Has(int32(i)) }
	maxl := math.Inf(-1)
	for i, v := range src {
		if allowed(i) && float64(v) > maxl { // NaN never compares greater
			maxl = float64(v)
		}
	}
	var sum float64
	if !math.IsInf(maxl, -1) {
		for i, v := range src {
			if allowed(i) && !math.IsNaN(float64(v)) {
				sum += math.Exp(float64(v) - maxl)
			}
		}
	}
	lse := maxl + math.Log(sum)
	lp := func(i int32) float64 {
		v := float64(src[i])
		if math.IsNaN(v) || !allowed(int(i)) || math.IsInf(maxl, -1) {
			return math.Inf(-1)
		}
		return v - lse
	}
	h.step = StepLogprobs{Token: TokenLogprob{ID: t, Logprob: lp(t), Piece: h.piece(t)}}
	if k := h.rec.Top; k > 0 {
		top := h.topBuf[:0]
		for i, v := range src {
			if !allowed(i) || math.IsNaN(float64(v)) {
				continue
			}
			c := candidate{id: int32(i), logit: v}
			if len(top) < k {
				heap.Push(&top, c)
			} else if v > top[0].logit {
				top[0] = c
				heap.Fix(&top, 0)
			}
		}
		h.topBuf = top
		out := make([]TokenLogprob, len(top))
		for i := len(top) - 1; i >= 0; i-- {
			c := heap.Pop(&top).(candidate)
			out[i] = TokenLogprob{ID: c.id, Logprob: lp(c.id), Piece: h.piece(c.id)}
		}
		h.step.Top = out
	}
	h.have = true
}

func (h *hook) piece(id int32) string {
	if h.vocab == nil {
		return ""
	}
	return h.vocab.Piece(id)
}

// RequestSampler returns the sampler for req, set up the way every engine
// needs: its sampling parameters, its constraint's matcher over the model's
// vocabulary (nil without a constraint) and log-probability recording
// (each recorded token with its Piece); vocab is called only when a
// constraint or log-probabilities need it. It fails on invalid parameters,
// and on a constraint the vocabulary cannot follow (an InputError).
func RequestSampler(req Request, vocab func() *Vocabulary) (*Sampler, Matcher, error) {
	if err := req.Sampling.Validate(); err != nil {
		return nil, nil, fmt.Errorf("sampling: %w", err)
	}
	s := NewSampler(req.Sampling)
	if req.Logprobs != nil {
		if err := req.Logprobs.Validate(); err != nil {
			return nil, nil, fmt.Errorf("logprobs: %w", err)
		}
		s.RecordLogprobs(*req.Logprobs)
		s.hook.vocab = vocab()
	}
	if req.Constraint == nil {
		return s, nil, nil
	}
	v := vocab()
	m, err := req.Constraint.NewMatcher(v)
	if err != nil {
		return nil, nil, fmt.Errorf("constraint: %w", err)
	}
	s.Constrain(m, v.Size())
	return s, m, nil
}
