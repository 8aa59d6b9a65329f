package reference

import (
	"cmp"
	"slices"
)

// moe is the sparse MoE block: Qwen3MoeSparseMoeBlock (no shared expert) or Qwen3_5MoeSparseMoeBlock
// (plus a shared expert scaled by sigmoid(shared_expert_gate x)).
type moe struct {
	router     linear // mlp.gate.weight [E×d]
	experts    []mlp
	shared     *mlp
	sharedGate *linear // [1×d]
	topK       int
	normTopK   bool
}

// route returns the selected experts and their weights: softmax over all router logits in float32 precision or
// better, torch.topk (largest first; equal probabilities keep the lower expert index first), renormalised over the
// top k when norm_topk_prob, then cast to the activation dtype (float32).
func (m *moe) route(x []float32) ([]int, []float32) {
	logits := m.router.apply(x)
	l64 := make([]float64, len(logits))
	for i, v := range logits {
		l64[i] = float64(v)
	}
	p := softmax(l64)
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(p[b], p[a]) })
	idx = idx[:m.topK]
	var sum float64
	for _, e := range idx {
		sum += float64(float32(p[e]))
	}
	w := make([]float32, m.topK)
	for i, e := range idx {
		v := float64(float32(p[e]))
		if m.normTopK {
			v /= sum
		}
		w[i] = float32(v)
	}
	return idx, w
}

func (m *moe) apply(x []float32) []float32 {
	idx, w := m.route(x)
	out := make([]float64, len(x))
	for i, e := range idx {
		y := m.experts[e].apply(x)
		for j, v := range y {
			out[j] += float64(float32(float64(v) * float64(w[i])))
		}
	}
	if m.shared != nil {
		s := m.shared.apply(x)
		g := sigmoid(float64(m.sharedGate.apply(x)[0]))
		for j, v := range s {
			out[j] += float64(float32(g * float64(v)))
		}
	}
	y := make([]float32, len(out))
	for j, v := range out {
		y[j] = float32(v)
	}
	return y
}
