package reference

import "math"

// rope holds the inverse frequencies of the rotary embedding (compute_default_rope_parameters):
// inv_freq[j] = 1 / theta^(2j/dim), dim = rotary dim.
type rope struct {
	invFreq []float64
	section []int // mrope_section (Qwen3.5), nil otherwise
}

func newRope(rotDim int, theta float64, section []int) rope {
	r := rope{invFreq: make([]float64, rotDim/2), section: section}
	for j := range r.invFreq {
		r.invFreq[j] = 1 / math.Pow(theta, float64(2*j)/float64(rotDim))
	}
	return r
}

// angles returns the rotation angle of each frequency for a 3-row (temporal, height, width) M-RoPE position,
// recomposed as Qwen3_5TextRotaryEmbedding.recomposition_frequencies does (interleaved layout: frequency j takes
// row 1 when j ≡ 1 mod 3 and j < 3·section[1], row 2 when j ≡ 2 mod 3 and j < 3·section[2], row 0 otherwise).
// With text-only input all three rows are equal, so this is ordinary RoPE; angles keeps the general form so a
// test can show that reduction instead of assuming it.
func (r *rope) angles(pos [3]int) []float64 {
	a := make([]float64, len(r.invFreq))
	for j, f := range r.invFreq {
		row := 0
		if len(r.section) >= 3 {
			for dim := 1; dim <= 2; dim++ {
				if j%3 == dim && j < 3*r.section[dim] {
					row = dim
				}
			}
		}
		a[j] = float64(pos[row]) * f
	}
	return a
}

// apply rotates the first 2·len(angles) dims of x in place (rotate_half convention: dim j pairs with j+half);
// the remaining dims pass through (partial rotary, apply_rotary_pos_emb's q_pass).
func (r *rope) apply(x []float32, angles []float64) {
	half := len(angles)
	for j, th := range angles {
		c, s := math.Cos(th), math.Sin(th)
		// cos/sin are float32 tensors in transformers.
		c, s = float64(float32(c)), float64(float32(s))
		x1, x2 := float64(x[j]), float64(x[j+half])
		x[j] = float32(x1*c - x2*s)
		x[j+half] = float32(x2*c + x1*s)
	}
}

// attention is the causal self-attention of Qwen2/Qwen3/Qwen3.5 decoder layers.
type attention struct {
	q, k, v, o   linear
	qNorm, kNorm []float32 // per-head RMSNorm weights (Qwen3, Qwen3.5), nil for Qwen2
	zeroCentred  bool      // q/k norms are Qwen3_5RMSNorm (1 + w)
	gated        bool      // Qwen3.5: q_proj yields [query | gate] per head; output · sigmoid(gate)
	heads, kv    int
	headDim      int
	eps          float64
}

func (a *attention) norm(x, w []float32) []float32 {
	if a.zeroCentred {
		return rmsNormZC(x, w, a.eps)
	}
	return rmsNorm(x, w, a.eps)
}

// attnCache holds the rotated keys and the values of the positions seen so far (a KV cache).
type attnCache struct{ ks, vs [][]float32 }

// forward runs attention over the whole sequence xs (already input-normed); positions are 0..T-1.
func (a *attention) forward(xs [][]float32, rp *rope) [][]float32 {
	var c attnCache
	out := make([][]float32, len(xs))
	for t, x := range xs {
		out[t] = a.step(x, &c, rp)
	}
	return out
}

// step attends from the next position (len(c.ks)) over itself and the cached positions: the causal mask.
func (a *attention) step(x []float32, c *attnCache, rp *rope) []float32 {
	hd, t := a.headDim, len(c.ks)
	qp := a.q.apply(x)
	q := make([]float32, a.heads*hd)
	var g []float32
	if a.gated {
		// view(..., heads, 2·hd) then chunk(2, -1): per head the first hd are the query, the next hd the gate.
		g = make([]float32, a.heads*hd)
		for h := 0; h < a.heads; h++ {
			copy(q[h*hd:(h+1)*hd], qp[h*2*hd:h*2*hd+hd])
			copy(g[h*hd:(h+1)*hd], qp[h*2*hd+hd:(h+1)*2*hd])
		}
	} else {
		copy(q, qp)
	}
	k := a.k.apply(x)
	if a.qNorm != nil {
		for h := 0; h < a.heads; h++ {
			copy(q[h*hd:(h+1)*hd], a.norm(q[h*hd:(h+1)*hd], a.qNorm))
		}
		for h := 0; h < a.kv; h++ {
			copy(k[h*hd:(h+1)*hd], a.norm(k[h*hd:(h+1)*hd], a.kNorm))
		}
	}
	ang := rp.angles([3]int{t, t, t})
	for h := 0; h < a.heads; h++ {
		rp.apply(q[h*hd:(h+1)*hd], ang)
	}
	for h := 0; h < a.kv; h++ {
		rp.apply(k[h*hd:(h+1)*hd], ang)
	}
	c.ks = append(c.ks, k)
	c.vs = append(c.vs, a.v.apply(x))

	scale := 1 / math.Sqrt(float64(hd))
	group := a.heads / a.kv
	o := make([]float32, a.heads*hd)
	for h := 0; h < a.heads; h++ {
		kvh := h / group // repeat_kv: query head h reads kv head h // n_rep
		qh := q[h*hd : (h+1)*hd]
		scores := make([]float64, t+1)
		for s := 0; s <= t; s++ {
			kk := c.ks[s][kvh*hd : (kvh+1)*hd]
			var d float64
			for i := range qh {
				d += float64(qh[i]) * float64(kk[i])
			}
			scores[s] = float64(float32(d)) * scale
		}
		p := softmax(scores)
		for i := 0; i < hd; i++ {
			var acc float64
			for s := 0; s <= t; s++ {
				acc += p[s] * float64(c.vs[s][kvh*hd+i])
			}
			o[h*hd+i] = float32(acc)
		}
	}
	if a.gated {
		for i := range o {
			o[i] = float32(float64(o[i]) * sigmoid(float64(g[i])))
		}
	}
	return a.o.apply(o)
}
