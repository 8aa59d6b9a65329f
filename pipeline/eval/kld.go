package eval

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// errCandidateNotFinite marks a candidate row holding NaN or an infinity: a gate failure, not an error.
var errCandidateNotFinite = errors.New("non-finite logits")

// maxLogit returns the largest value of v, rejecting NaN and infinities.
func maxLogit(v []float32) (float64, error) {
	m := math.Inf(-1)
	for i, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("logit %d is %v", i, x)
		}
		m = max(m, f)
	}
	return m, nil
}

// argmax returns the first index of the largest value.
func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// tokenStats is the comparison of one position.
type tokenStats struct {
	kld         float64 // KL(P_ref || P_cand), nats
	sameTop1    bool
	nllRef      float64 // -log P_ref(next); valid when hasNext
	nllCand     float64
	hasNext     bool
	topProbRef  float64 // P_ref of the reference's top-1 token
	topProbCand float64 // P_cand of the same token
}

// compareRow compares the reference and candidate logits of one position; next is the token that follows
// in the prompt, or -1. scratch (grown when short) holds the reference's exp(logit − max), so each logit
// costs two exponentials.
func compareRow(ref, cand []float32, next int32, scratch *[]float64) (tokenStats, error) {
	if len(ref) != len(cand) {
		return tokenStats{}, fmt.Errorf("reference has %d logits, candidate %d", len(ref), len(cand))
	}
	if len(ref) == 0 {
		return tokenStats{}, fmt.Errorf("empty logits")
	}
	if cap(*scratch) < len(ref) {
		*scratch = make([]float64, len(ref))
	}
	er := (*scratch)[:len(ref)]
	mr, err := maxLogit(ref)
	if err != nil {
		return tokenStats{}, fmt.Errorf("reference: %w", err)
	}
	mc, err := maxLogit(cand)
	if err != nil {
		return tokenStats{}, fmt.Errorf("candidate: %w: %w", errCandidateNotFinite, err)
	}
	var sr, sc float64
	for i, x := range ref {
		e := math.Exp(float64(x) - mr)
		er[i] = e
		sr += e
	}
	for _, x := range cand {
		sc += math.Exp(float64(x) - mc)
	}
	lr, lc := mr+math.Log(sr), mc+math.Log(sc)
	// KL = Σ p_i (log p_i − log q_i) with p_i = er_i / sr and log p_i − log q_i = (ref_i − lr) − (cand_i − lc).
	var kld float64
	d := lc - lr
	for i := range ref {
		kld += float64(er[i] * (float64(ref[i]) - float64(cand[i]) + d)) // no FMA: same bits on every arch
	}
	kld /= sr
	tr, tc := argmax(ref), argmax(cand)
	s := tokenStats{kld: kld, sameTop1: tr == tc,
		topProbRef: er[tr] / sr, topProbCand: math.Exp(float64(cand[tr]) - lc)}
	if next >= 0 {
		if int(next) >= len(ref) {
			return tokenStats{}, fmt.Errorf("next token %d outside the %d logits", next, len(ref))
		}
		s.hasNext = true
		s.nllRef = lr - float64(ref[next])
		s.nllCand = lc - float64(cand[next])
	}
	return s, nil
}

// accumulator gathers tokenStats in bounded memory: running sums plus one float64 per position (for exact
// quantiles; 7k tokens are 56 KB).
type accumulator struct {
	scratch            []float64
	nonFiniteN         int
	firstNonFinite     string
	klds               []float64
	sumKLD             float64
	maxKLD             float64
	same               int
	nll                int
	sumNLLRef, sumNLLC float64
	sumDP2             float64 // Σ (ΔP of the reference's top token)²
}

func (a *accumulator) add(s tokenStats) {
	a.klds = append(a.klds, s.kld)
	a.sumKLD += s.kld
	a.maxKLD = max(a.maxKLD, s.kld)
	if s.sameTop1 {
		a.same++
	}
	if s.hasNext {
		a.nll++
		a.sumNLLRef += s.nllRef
		a.sumNLLC += s.nllCand
	}
	d := s.topProbCand - s.topProbRef
	a.sumDP2 += float64(d * d)
}

// nonFinite counts a position whose candidate logits are not finite (position pos of prompt p).
func (a *accumulator) nonFinite(p, pos int, err error) {
	if a.nonFiniteN == 0 {
		a.firstNonFinite = fmt.Sprintf("prompt %d, position %d: %v", p, pos, err)
	}
	a.nonFiniteN++
}

// fill writes the summary into r.
func (a *accumulator) fill(r *DistResult) {
	n := len(a.klds)
	r.Positions = n
	r.PredictedTokens = a.nll
	r.NonFinite, r.FirstNonFinite = a.nonFiniteN, a.firstNonFinite
	if n == 0 {
		return
	}
	sorted := slices.Clone(a.klds)
	slices.Sort(sorted)
	r.MeanKLD = a.sumKLD / float64(n)
	r.MedianKLD = quantile(sorted, 0.5)
	r.P99KLD = quantile(sorted, 0.99)
	r.MaxKLD = a.maxKLD
	r.Top1 = float64(a.same) / float64(n)
	r.RMSDeltaTop = math.Sqrt(a.sumDP2 / float64(n))
	if a.nll > 0 {
		r.PPLReference = math.Exp(a.sumNLLRef / float64(a.nll))
		r.PPLCandidate = math.Exp(a.sumNLLC / float64(a.nll))
	}
}

// quantile is the q-quantile of sorted values by linear interpolation between closest ranks (the "type 7"
// definition, numpy's default): position q·(n-1).
func quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	h := q * float64(n-1)
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + float64((h-float64(lo))*(sorted[lo+1]-sorted[lo]))
}
