package reference

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randVec(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

func TestRMSNorm(t *testing.T) {
	x := []float32{1, 2, 3, 4}
	w := []float32{1, 0.5, 2, -1}
	// mean(x²) = 30/4 = 7.5
	inv := 1 / math.Sqrt(7.5+1e-6)
	want := []float32{float32(1 * inv), float32(2 * inv * 0.5), float32(3 * inv * 2), float32(-4 * inv)}
	if d := maxAbsDiff(rmsNorm(x, w, 1e-6), want); d > 1e-6 {
		t.Fatalf("rmsNorm off by %g", d)
	}
	// Zero-centred: (1 + w). A zero weight is the identity scale, i.e. plain RMSNorm with w = 1.
	zero := make([]float32, 4)
	ones := []float32{1, 1, 1, 1}
	if d := maxAbsDiff(rmsNormZC(x, zero, 1e-6), rmsNorm(x, ones, 1e-6)); d != 0 {
		t.Fatalf("rmsNormZC(w=0) != rmsNorm(w=1): %g", d)
	}
	wp1 := make([]float32, 4)
	for i := range w {
		wp1[i] = w[i] + 1
	}
	if d := maxAbsDiff(rmsNormZC(x, w, 1e-6), rmsNorm(x, wp1, 1e-6)); d > 1e-6 {
		t.Fatalf("rmsNormZC(w) != rmsNorm(1+w): %g", d)
	}
}

func TestL2NormAndActivations(t *testing.T) {
	y := l2Norm([]float32{3, 4}, 1e-6)
	if math.Abs(float64(y[0])-0.6) > 1e-6 || math.Abs(float64(y[1])-0.8) > 1e-6 {
		t.Fatalf("l2Norm = %v", y)
	}
	if math.Abs(softplus(0)-math.Ln2) > 1e-15 || softplus(30) != 30 || math.Abs(softplus(-5)-math.Log1p(math.Exp(-5))) > 1e-15 {
		t.Fatal("softplus")
	}
	if math.Abs(silu(1)-1/(1+math.Exp(-1))) > 1e-15 || sigmoid(0) != 0.5 {
		t.Fatal("silu/sigmoid")
	}
	p := softmax([]float64{1000, 1000, math.Inf(-1)})
	if p[0] != 0.5 || p[1] != 0.5 || p[2] != 0 {
		t.Fatalf("softmax = %v", p)
	}
}

func TestLinearWithLoRA(t *testing.T) {
	l := linear{W: []float32{1, 2, 3, 4, 5, 6}, Out: 2, In: 3, B: []float32{0.5, -1}}
	x := []float32{1, 0, -1}
	y := l.apply(x)
	if y[0] != -1.5 || y[1] != -3 {
		t.Fatalf("linear = %v", y)
	}
	// A [1×3] = [1 1 1], B [2×1] = [2; -1], scale 0.5 → Δ = 0.5·B·(A x) = 0.5·[2;-1]·0 = 0 for this x.
	l.loras = []loraDelta{{A: []float32{1, 2, 1}, B: []float32{2, -1}, R: 1, Scale: 0.5}}
	// A x = 1 - 1 = 0 → unchanged
	if y := l.apply(x); y[0] != -1.5 || y[1] != -3 {
		t.Fatalf("lora zero = %v", y)
	}
	x2 := []float32{1, 1, 0} // A x = 3; Δ = 0.5·[6; -3] = [3; -1.5]; W x + b = [3.5; 8]
	if y := l.apply(x2); y[0] != 6.5 || y[1] != 6.5 {
		t.Fatalf("lora = %v", y)
	}
}

// TestRopeTextPositionsReduceToStandard checks the claim that Qwen3.5's M-RoPE with the three position rows equal
// (text-only input) is ordinary rotate_half RoPE on the rotary dims, and that partial rotary leaves the rest alone.
func TestRopeTextPositionsReduceToStandard(t *testing.T) {
	const headDim, rotDim, theta = 16, 8, 1e7
	mr := newRope(rotDim, theta, []int{2, 1, 1})
	rng := rand.New(rand.NewPCG(1, 2))
	for pos := range 40 {
		x := randVec(rng, headDim, 1)
		got := append([]float32(nil), x...)
		mr.apply(got, mr.angles([3]int{pos, pos, pos}))
		want := append([]float32(nil), x...)
		half := rotDim / 2
		for j := 0; j < half; j++ {
			th := float64(pos) / math.Pow(theta, float64(2*j)/rotDim)
			a, b := float64(x[j]), float64(x[j+half])
			want[j] = float32(a*math.Cos(th) - b*math.Sin(th))
			want[j+half] = float32(b*math.Cos(th) + a*math.Sin(th))
		}
		if d := maxAbsDiff(got, want); d > 1e-6 {
			t.Fatalf("pos %d: M-RoPE with equal rows differs from RoPE by %g", pos, d)
		}
		for i := rotDim; i < headDim; i++ {
			if got[i] != x[i] {
				t.Fatalf("pos %d: pass-through dim %d changed", pos, i)
			}
		}
	}
	// With distinct rows the sections matter: frequency 1 (j%3==1, j < 3·section[1]) follows row 1.
	a := mr.angles([3]int{5, 7, 9})
	if a[0] != 5*mr.invFreq[0] || a[1] != 7*mr.invFreq[1] || a[2] != 9*mr.invFreq[2] || a[3] != 5*mr.invFreq[3] {
		t.Fatalf("interleaved M-RoPE sections: %v", a)
	}
}

// TestRopeRelative checks the defining property: <R(m)q, R(n)k> depends only on m - n.
func TestRopeRelative(t *testing.T) {
	r := newRope(8, 10000, nil)
	rng := rand.New(rand.NewPCG(3, 4))
	q, k := randVec(rng, 8, 1), randVec(rng, 8, 1)
	dot := func(m, n int) float64 {
		qq, kk := append([]float32(nil), q...), append([]float32(nil), k...)
		r.apply(qq, r.angles([3]int{m, m, m}))
		r.apply(kk, r.angles([3]int{n, n, n}))
		var s float64
		for i := range qq {
			s += float64(qq[i]) * float64(kk[i])
		}
		return s
	}
	if d := math.Abs(dot(7, 3) - dot(14, 10)); d > 1e-5 {
		t.Fatalf("rope not relative: %g", d)
	}
}

func newTestAttention(rng *rand.Rand, hidden, heads, kv, hd int, gated, norms bool) *attention {
	qOut := heads * hd
	if gated {
		qOut *= 2
	}
	mk := func(out, in int) linear { return linear{W: randVec(rng, out*in, 0.3), Out: out, In: in} }
	a := &attention{q: mk(qOut, hidden), k: mk(kv*hd, hidden), v: mk(kv*hd, hidden), o: mk(hidden, heads*hd),
		heads: heads, kv: kv, headDim: hd, eps: 1e-6, gated: gated, zeroCentred: gated}
	if norms {
		a.qNorm, a.kNorm = randVec(rng, hd, 0.2), randVec(rng, hd, 0.2)
	}
	return a
}

func TestAttentionCausalAndSingleToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, gated := range []bool{false, true} {
		a := newTestAttention(rng, 12, 4, 2, 6, gated, true)
		rp := newRope(4, 10000, nil)
		xs := make([][]float32, 5)
		for i := range xs {
			xs[i] = randVec(rng, 12, 1)
		}
		full := a.forward(xs, &rp)
		// Causal mask: outputs at t depend only on xs[0..t].
		for T := 1; T <= len(xs); T++ {
			part := a.forward(xs[:T], &rp)
			for t2 := 0; t2 < T; t2++ {
				if d := maxAbsDiff(part[t2], full[t2]); d != 0 {
					t.Fatalf("gated=%v: position %d changes when the sequence is cut at %d (%g)", gated, t2, T, d)
				}
			}
		}
		// One token: softmax over a single score is 1, so the output is o(v) (times the gate), whatever q and k.
		v := a.v.apply(xs[0])
		o := make([]float32, a.heads*a.headDim)
		qp := a.q.apply(xs[0])
		for h := 0; h < a.heads; h++ {
			kvh := h / (a.heads / a.kv)
			for i := 0; i < a.headDim; i++ {
				val := float64(v[kvh*a.headDim+i])
				if gated {
					val *= sigmoid(float64(qp[h*2*a.headDim+a.headDim+i]))
				}
				o[h*a.headDim+i] = float32(val)
			}
		}
		if d := maxAbsDiff(full[0], a.o.apply(o)); d > 1e-6 {
			t.Fatalf("gated=%v: single-token attention off by %g", gated, d)
		}
	}
}

func TestCausalConv1d(t *testing.T) {
	// Two channels, K = 3: y[t][c] = silu(w[c][0]·x[t-2][c] + w[c][1]·x[t-1][c] + w[c][2]·x[t][c]).
	w := []float32{1, 2, 3, -1, 0.5, 0.25}
	xs := [][]float32{{1, 10}, {2, 20}, {3, 30}, {4, 40}}
	ys := causalConv1dSiLU(xs, w, 3)
	pre := [][2]float64{
		{3 * 1, 0.25 * 10},
		{2*1 + 3*2, 0.5*10 + 0.25*20},
		{1*1 + 2*2 + 3*3, -1*10 + 0.5*20 + 0.25*30},
		{1*2 + 2*3 + 3*4, -1*20 + 0.5*30 + 0.25*40},
	}
	for t2, p := range pre {
		for c := range 2 {
			if want := float32(silu(p[c])); math.Abs(float64(ys[t2][c]-want)) > 1e-6 {
				t.Fatalf("y[%d][%d] = %g, want %g", t2, c, ys[t2][c], want)
			}
		}
	}
}

func TestMoERouting(t *testing.T) {
	// Router rows pick out x components, so the logits are x itself.
	const d = 4
	router := linear{W: []float32{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, Out: 4, In: d}
	x := []float32{0.1, 2, -1, 1}
	p := softmax([]float64{0.1, 2, -1, 1})
	for _, norm := range []bool{false, true} {
		m := &moe{router: router, topK: 2, normTopK: norm}
		idx, w := m.route(x)
		if idx[0] != 1 || idx[1] != 3 {
			t.Fatalf("top-2 = %v, want [1 3]", idx)
		}
		w0, w1 := p[1], p[3]
		if norm {
			w0, w1 = w0/(p[1]+p[3]), w1/(p[1]+p[3])
		}
		if math.Abs(float64(w[0])-w0) > 1e-6 || math.Abs(float64(w[1])-w1) > 1e-6 {
			t.Fatalf("norm=%v: weights %v, want [%g %g]", norm, w, w0, w1)
		}
	}
}

// TestGatedAttentionByHand recomputes Qwen3_5Attention for two tokens straight from the modeling code's
// tensor operations (view(T, H, 2·hd) → chunk → q_norm/k_norm (1+w) → partial rotary → softmax(QKᵀ/√hd)V →
// · sigmoid(gate) → o_proj) and compares with attention.forward.
func TestGatedAttentionByHand(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const hidden, H, KV, hd, rot = 6, 2, 1, 4, 2
	a := newTestAttention(rng, hidden, H, KV, hd, true, true)
	rp := newRope(rot, 10000, []int{1, 0, 0})
	xs := [][]float32{randVec(rng, hidden, 1), randVec(rng, hidden, 1)}
	got := a.forward(xs, &rp)

	type headVecs struct{ q, g [H][hd]float64 }
	var hv [2]headVecs
	var k, v [2][hd]float64
	for ti, x := range xs {
		qp, kp, vp := a.q.apply(x), a.k.apply(x), a.v.apply(x)
		for h := 0; h < H; h++ {
			var ss float64
			for i := 0; i < hd; i++ {
				q := float64(qp[h*2*hd+i])
				hv[ti].q[h][i] = q
				hv[ti].g[h][i] = float64(qp[h*2*hd+hd+i])
				ss += q * q
			}
			for i := 0; i < hd; i++ {
				hv[ti].q[h][i] = hv[ti].q[h][i] / math.Sqrt(ss/hd+1e-6) * (1 + float64(a.qNorm[i]))
			}
		}
		var ss float64
		for i := 0; i < hd; i++ {
			ss += float64(kp[i]) * float64(kp[i])
		}
		for i := 0; i < hd; i++ {
			k[ti][i] = float64(kp[i]) / math.Sqrt(ss/hd+1e-6) * (1 + float64(a.kNorm[i]))
			v[ti][i] = float64(vp[i])
		}
		// Rotary on dims 0 and 1 only (rot = 2: one frequency, inv_freq = 1), angle = position.
		c, s := math.Cos(float64(ti)), math.Sin(float64(ti))
		rotate := func(x *[hd]float64) { x[0], x[1] = x[0]*c-x[1]*s, x[1]*c+x[0]*s }
		for h := 0; h < H; h++ {
			rotate(&hv[ti].q[h])
		}
		rotate(&k[ti])
	}
	for ti := range xs {
		o := make([]float32, H*hd)
		for h := 0; h < H; h++ {
			var sc []float64
			for s := 0; s <= ti; s++ {
				var d float64
				for i := 0; i < hd; i++ {
					d += hv[ti].q[h][i] * k[s][i]
				}
				sc = append(sc, d/math.Sqrt(hd))
			}
			p := softmax(sc)
			for i := 0; i < hd; i++ {
				var acc float64
				for s := range p {
					acc += p[s] * v[s][i]
				}
				o[h*hd+i] = float32(acc * sigmoid(hv[ti].g[h][i]))
			}
		}
		if d := maxAbsDiff(got[ti], a.o.apply(o)); d > 1e-5 {
			t.Fatalf("position %d: gated attention differs from the hand computation by %g", ti, d)
		}
	}
}
