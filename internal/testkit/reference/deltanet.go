package reference

import "math"

// deltaNet is Qwen3_5GatedDeltaNet (the linear-attention token mixer of Qwen3.5 hybrid layers).
type deltaNet struct {
	qkv, z, b, a, out linear
	conv              []float32 // conv1d.weight [C, 1, K] squeezed to [C×K]
	convK             int
	dtBias, aLog      []float32 // [Vh]
	norm              []float32 // Qwen3_5RMSNormGated weight [Dv], used as is (not zero-centred)
	kHeads, vHeads    int
	kDim, vDim        int
	eps               float64
}

// convStep is one output of causal_conv1d_fn (a depthwise F.conv1d with padding K-1 keeping the first T
// outputs) followed by SiLU: y[c] = silu(Σ_k w[c][k] · x[t-(K-1)+k][c]). hist holds x[t-(K-1)..t-1] (nil
// entries before the sequence start count as zeros), x is x[t].
func convStep(hist [][]float32, x []float32, w []float32, K int) []float32 {
	y := make([]float32, len(x))
	for c := range y {
		var s float64
		for k := 0; k < K-1; k++ {
			if hist[k] != nil {
				s += float64(w[c*K+k]) * float64(hist[k][c])
			}
		}
		s += float64(w[c*K+K-1]) * float64(x[c])
		y[c] = float32(silu(float64(float32(s))))
	}
	return y
}

// causalConv1dSiLU runs convStep over a whole sequence.
func causalConv1dSiLU(xs [][]float32, w []float32, K int) [][]float32 {
	hist := make([][]float32, K-1)
	ys := make([][]float32, len(xs))
	for t, x := range xs {
		ys[t] = convStep(hist, x, w, K)
		if K > 1 {
			hist = append(hist[1:], x)
		}
	}
	return ys
}

// deltaToken holds one token's operands of the gated delta rule after the projections, the conv, the q/k L2
// norms and the query scaling: q, k [Vh][Dk] (query/key heads already repeat_interleave'd to the value heads),
// v [Vh][Dv], g (log decay, <= 0) and beta [Vh].
type deltaToken struct {
	q, k, v [][]float32
	g, beta []float64
}

// deltaInputs is a sequence of deltaToken operands, indexed [t][head].
type deltaInputs struct {
	q, k, v [][][]float32
	g, beta [][]float64
}

// deltaRuleStep is one step of torch_recurrent_gated_delta_rule for every head: S ← S·exp(g);
// S ← S + k ⊗ (β (v − Sᵀk)); o = Sᵀ q, with S [Dk×Dv] per head (float64, updated in place).
func deltaRuleStep(S [][]float64, tok deltaToken) [][]float32 {
	out := make([][]float32, len(S))
	for h := range S {
		k, q, v := tok.k[h], tok.q[h], tok.v[h]
		dk, dv := len(k), len(v)
		Sh := S[h]
		decay := math.Exp(tok.g[h])
		for i := range Sh {
			Sh[i] *= decay
		}
		mem := make([]float64, dv)
		for j := 0; j < dv; j++ {
			var s float64
			for i := 0; i < dk; i++ {
				s += Sh[i*dv+j] * float64(k[i])
			}
			mem[j] = (float64(v[j]) - s) * tok.beta[h]
		}
		for i := 0; i < dk; i++ {
			ki := float64(k[i])
			for j := 0; j < dv; j++ {
				Sh[i*dv+j] += ki * mem[j]
			}
		}
		o := make([]float32, dv)
		for j := 0; j < dv; j++ {
			var s float64
			for i := 0; i < dk; i++ {
				s += Sh[i*dv+j] * float64(q[i])
			}
			o[j] = float32(s)
		}
		out[h] = o
	}
	return out
}

// recurrentGatedDeltaRule is torch_recurrent_gated_delta_rule over a sequence from a zero state.
func recurrentGatedDeltaRule(in deltaInputs) [][][]float32 {
	T := len(in.q)
	if T == 0 {
		return nil
	}
	S := make([][]float64, len(in.q[0]))
	for h := range S {
		S[h] = make([]float64, len(in.q[0][h])*len(in.v[0][h]))
	}
	out := make([][][]float32, T)
	for t := range out {
		out[t] = deltaRuleStep(S, deltaToken{q: in.q[t], k: in.k[t], v: in.v[t], g: in.g[t], beta: in.beta[t]})
	}
	return out
}

// deltaState is the recurrent state of one layer: the last K-1 in_proj_qkv outputs for the conv and the
// delta-rule matrices of every value head.
type deltaState struct {
	hist [][]float32
	S    [][]float64
}

func (d *deltaNet) newState() *deltaState {
	st := &deltaState{hist: make([][]float32, d.convK-1), S: make([][]float64, d.vHeads)}
	for h := range st.S {
		st.S[h] = make([]float64, d.kDim*d.vDim)
	}
	return st
}

// project runs the projections, the causal conv and the per-head preprocessing of Qwen3_5GatedDeltaNet.forward
// for one token, returning the delta-rule operands and the output gate z [Vh·Dv].
func (d *deltaNet) project(x []float32, st *deltaState) (deltaToken, []float32) {
	mixed := d.qkv.apply(x)
	z := d.z.apply(x)
	b := d.b.apply(x)
	a := d.a.apply(x)
	tok := deltaToken{beta: make([]float64, d.vHeads), g: make([]float64, d.vHeads)}
	for h := 0; h < d.vHeads; h++ {
		tok.beta[h] = float64(float32(sigmoid(float64(b[h]))))
		// g = -exp(A_log) * softplus(a + dt_bias), in float32 in transformers.
		sp := float32(softplus(float64(float32(float64(a[h]) + float64(d.dtBias[h])))))
		tok.g[h] = float64(float32(-float64(float32(math.Exp(float64(d.aLog[h])))) * float64(sp)))
	}
	c := convStep(st.hist, mixed, d.conv, d.convK)
	if d.convK > 1 {
		st.hist = append(st.hist[1:], mixed)
	}
	keyDim := d.kHeads * d.kDim
	rep := d.vHeads / d.kHeads
	scale := 1 / math.Sqrt(float64(d.kDim))
	qh := make([][]float32, d.kHeads)
	kh := make([][]float32, d.kHeads)
	for h := 0; h < d.kHeads; h++ {
		qh[h] = l2Norm(c[h*d.kDim:(h+1)*d.kDim], 1e-6)
		for i := range qh[h] {
			qh[h][i] = float32(float64(qh[h][i]) * scale)
		}
		kh[h] = l2Norm(c[keyDim+h*d.kDim:keyDim+(h+1)*d.kDim], 1e-6)
	}
	tok.q = make([][]float32, d.vHeads)
	tok.k = make([][]float32, d.vHeads)
	tok.v = make([][]float32, d.vHeads)
	for h := 0; h < d.vHeads; h++ {
		// repeat_interleave: value head h reads query/key head h / (Vh/Kh).
		tok.q[h] = qh[h/rep]
		tok.k[h] = kh[h/rep]
		tok.v[h] = c[2*keyDim+h*d.vDim : 2*keyDim+(h+1)*d.vDim]
	}
	return tok, z
}

// prepare runs project over a sequence from a fresh state.
func (d *deltaNet) prepare(xs [][]float32) (deltaInputs, [][]float32) {
	st := d.newState()
	var in deltaInputs
	zs := make([][]float32, len(xs))
	for t, x := range xs {
		tok, z := d.project(x, st)
		in.q, in.k, in.v = append(in.q, tok.q), append(in.k, tok.k), append(in.v, tok.v)
		in.g, in.beta = append(in.g, tok.g), append(in.beta, tok.beta)
		zs[t] = z
	}
	return in, zs
}

// step is Qwen3_5GatedDeltaNet.forward for the next token (x already input-normed).
func (d *deltaNet) step(x []float32, st *deltaState) []float32 {
	tok, z := d.project(x, st)
	core := deltaRuleStep(st.S, tok)
	y := make([]float32, d.vHeads*d.vDim)
	for h := 0; h < d.vHeads; h++ {
		copy(y[h*d.vDim:(h+1)*d.vDim], gatedRMSNorm(core[h], z[h*d.vDim:(h+1)*d.vDim], d.norm, d.eps))
	}
	return d.out.apply(y)
}

// forward runs step over a whole sequence from a fresh state.
func (d *deltaNet) forward(xs [][]float32) [][]float32 {
	st := d.newState()
	out := make([][]float32, len(xs))
	for t, x := range xs {
		out[t] = d.step(x, st)
	}
	return out
}

// gatedRMSNorm is Qwen3_5RMSNormGated: w · x / sqrt(mean(x²) + eps) · silu(gate), w used as stored.
func gatedRMSNorm(x, gate, w []float32, eps float64) []float32 {
	y := rmsNorm(x, w, eps)
	for i := range y {
		y[i] = float32(float64(y[i]) * silu(float64(gate[i])))
	}
	return y
}
