package reference

import (
	"math"
	"math/rand/v2"
	"testing"
)

// chunkedGatedDeltaRule is an independent transcription of transformers' torch_chunk_gated_delta_rule (the path
// HF takes for prefill) in float64, on already L2-normed and scaled q/k: UT transform inside each chunk solved by
// forward substitution, then a sequential scan over chunks.
func chunkedGatedDeltaRule(in deltaInputs, C int) [][][]float64 {
	T := len(in.q)
	H, dk, dv := len(in.q[0]), len(in.q[0][0]), len(in.v[0][0])
	out := make([][][]float64, T)
	for t := range out {
		out[t] = make([][]float64, H)
	}
	nChunks := (T + C - 1) / C
	for h := 0; h < H; h++ {
		at := func(x [][][]float32, t, i int) float64 {
			if t >= T {
				return 0 // padding
			}
			return float64(x[t][h][i])
		}
		S := make([][]float64, dk)
		for i := range S {
			S[i] = make([]float64, dv)
		}
		for c := 0; c < nChunks; c++ {
			t0 := c * C
			g := make([]float64, C)
			beta := make([]float64, C)
			for i := 0; i < C; i++ {
				if t0+i < T {
					g[i], beta[i] = in.g[t0+i][h], in.beta[t0+i][h]
				}
			}
			cum := make([]float64, C)
			acc := 0.0
			for i := range cum {
				acc += g[i]
				cum[i] = acc
			}
			dot := func(a [][][]float32, ta int, b [][][]float32, tb int, n int) float64 {
				var s float64
				for i := 0; i < n; i++ {
					s += at(a, ta, i) * at(b, tb, i)
				}
				return s
			}
			// L = I + strictly-lower((β k) kᵀ ∘ decay); solve L·U = β v and L·W = β k ∘ exp(cum).
			L := make([][]float64, C)
			intra := make([][]float64, C)
			for i := 0; i < C; i++ {
				L[i] = make([]float64, C)
				intra[i] = make([]float64, C)
				for j := 0; j <= i; j++ {
					dec := math.Exp(cum[i] - cum[j])
					if j < i {
						L[i][j] = beta[i] * dot(in.k, t0+i, in.k, t0+j, dk) * dec
					}
					intra[i][j] = dot(in.q, t0+i, in.k, t0+j, dk) * dec
				}
			}
			U := make([][]float64, C) // new_values
			W := make([][]float64, C) // k_cumdecay
			for i := 0; i < C; i++ {
				U[i] = make([]float64, dv)
				W[i] = make([]float64, dk)
				for j := 0; j < dv; j++ {
					U[i][j] = beta[i] * at(in.v, t0+i, j)
				}
				for j := 0; j < dk; j++ {
					W[i][j] = beta[i] * at(in.k, t0+i, j) * math.Exp(cum[i])
				}
				for p := 0; p < i; p++ {
					for j := 0; j < dv; j++ {
						U[i][j] -= L[i][p] * U[p][j]
					}
					for j := 0; j < dk; j++ {
						W[i][j] -= L[i][p] * W[p][j]
					}
				}
			}
			// v_new = U - W S; out = (q ∘ exp(cum)) S + intra v_new; S = S·exp(cum_last) + (k ∘ exp(cum_last-cum))ᵀ v_new
			vnew := make([][]float64, C)
			for i := 0; i < C; i++ {
				vnew[i] = make([]float64, dv)
				for j := 0; j < dv; j++ {
					s := U[i][j]
					for p := 0; p < dk; p++ {
						s -= W[i][p] * S[p][j]
					}
					vnew[i][j] = s
				}
			}
			for i := 0; i < C && t0+i < T; i++ {
				o := make([]float64, dv)
				for j := 0; j < dv; j++ {
					var s float64
					for p := 0; p < dk; p++ {
						s += at(in.q, t0+i, p) * math.Exp(cum[i]) * S[p][j]
					}
					for p := 0; p <= i; p++ {
						s += intra[i][p] * vnew[p][j]
					}
					o[j] = s
				}
				out[t0+i][h] = o
			}
			last := cum[C-1]
			for p := 0; p < dk; p++ {
				for j := 0; j < dv; j++ {
					s := S[p][j] * math.Exp(last)
					for i := 0; i < C; i++ {
						s += at(in.k, t0+i, p) * math.Exp(last-cum[i]) * vnew[i][j]
					}
					S[p][j] = s
				}
			}
		}
	}
	return out
}

func randDeltaInputs(rng *rand.Rand, T, H, dk, dv int) deltaInputs {
	in := deltaInputs{q: make([][][]float32, T), k: make([][][]float32, T), v: make([][][]float32, T),
		g: make([][]float64, T), beta: make([][]float64, T)}
	for t := 0; t < T; t++ {
		in.q[t] = make([][]float32, H)
		in.k[t] = make([][]float32, H)
		in.v[t] = make([][]float32, H)
		in.g[t] = make([]float64, H)
		in.beta[t] = make([]float64, H)
		for h := 0; h < H; h++ {
			in.q[t][h] = l2Norm(randVec(rng, dk, 1), 1e-6)
			in.k[t][h] = l2Norm(randVec(rng, dk, 1), 1e-6)
			in.v[t][h] = randVec(rng, dv, 1)
			in.g[t][h] = -rng.Float64() * 2
			in.beta[t][h] = rng.Float64()
		}
	}
	return in
}

func TestDeltaRuleRecurrentMatchesChunked(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ T, C int }{{1, 4}, {5, 2}, {7, 3}, {9, 64}, {16, 4}} {
		in := randDeltaInputs(rng, tc.T, 2, 4, 3)
		rec := recurrentGatedDeltaRule(in)
		chk := chunkedGatedDeltaRule(in, tc.C)
		for ti := range rec {
			for h := range rec[ti] {
				for j := range rec[ti][h] {
					if d := math.Abs(float64(rec[ti][h][j]) - chk[ti][h][j]); d > 1e-5 {
						t.Fatalf("T=%d C=%d: out[%d][%d][%d] recurrent %g vs chunked %g", tc.T, tc.C, ti, h, j,
							rec[ti][h][j], chk[ti][h][j])
					}
				}
			}
		}
	}
}

// TestDeltaRuleFirstStep checks the recurrence by hand: from a zero state, S₁ = β k vᵀ, so o₁ = β (k·q) v.
// With β = 1 and a second key equal to the first, the delta rule overwrites: o₂ = (k·q) v₂ (decay 0 = exp(0)=1).
func TestDeltaRuleFirstStep(t *testing.T) {
	k := []float32{0.6, 0.8}
	q := []float32{1, 0}
	in := deltaInputs{
		q: [][][]float32{{q}, {q}}, k: [][][]float32{{k}, {k}},
		v:    [][][]float32{{{1, 2, 3}}, {{-1, 5, 0}}},
		g:    [][]float64{{0}, {0}},
		beta: [][]float64{{0.5}, {1}},
	}
	out := recurrentGatedDeltaRule(in)
	kq := 0.6
	want1 := []float32{float32(0.5 * kq * 1), float32(0.5 * kq * 2), float32(0.5 * kq * 3)}
	want2 := []float32{float32(kq * -1), float32(kq * 5), 0}
	if d := maxAbsDiff(out[0][0], want1); d > 1e-6 {
		t.Fatalf("step 1 = %v, want %v", out[0][0], want1)
	}
	if d := maxAbsDiff(out[1][0], want2); d > 1e-6 {
		t.Fatalf("step 2 = %v, want %v", out[1][0], want2)
	}
	// A decay of g = log(0.5) halves the old state before the update.
	in.g = [][]float64{{0}, {math.Log(0.5)}}
	in.beta = [][]float64{{1}, {0}}
	out = recurrentGatedDeltaRule(in)
	want := []float32{float32(0.5 * kq * 1), float32(0.5 * kq * 2), float32(0.5 * kq * 3)}
	if d := maxAbsDiff(out[1][0], want); d > 1e-6 {
		t.Fatalf("decayed step = %v, want %v", out[1][0], want)
	}
}

// TestDeltaNetGroupedHeads checks repeat_interleave: with Kh = 1 and Vh = 2 both value heads read the single
// query/key head, and with Kh = 2, Vh = 4 value heads 0,1 read key head 0 and 2,3 read key head 1.
func TestDeltaNetGroupedHeads(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const hidden, dk, dv, K = 8, 4, 3, 3
	kh, vh := 2, 4
	conv := 2*kh*dk + vh*dv
	mk := func(out, in int) linear { return linear{W: randVec(rng, out*in, 0.4), Out: out, In: in} }
	d := &deltaNet{qkv: mk(conv, hidden), z: mk(vh*dv, hidden), b: mk(vh, hidden), a: mk(vh, hidden),
		out: mk(hidden, vh*dv), conv: randVec(rng, conv*K, 0.5), convK: K, dtBias: randVec(rng, vh, 0.5),
		aLog: randVec(rng, vh, 0.5), norm: randVec(rng, dv, 0.5), kHeads: kh, vHeads: vh, kDim: dk, vDim: dv, eps: 1e-6}
	xs := [][]float32{randVec(rng, hidden, 1), randVec(rng, hidden, 1), randVec(rng, hidden, 1)}
	in, _ := d.prepare(xs)
	for ti := range xs {
		for h := 0; h < vh; h++ {
			if &in.q[ti][h][0] != &in.q[ti][(h/2)*2][0] || &in.k[ti][h][0] != &in.k[ti][(h/2)*2][0] {
				t.Fatalf("value head %d does not share q/k with head %d", h, (h/2)*2)
			}
		}
		if &in.q[ti][0][0] == &in.q[ti][2][0] {
			t.Fatal("value heads 0 and 2 share a key head")
		}
		// q is L2-normed then scaled by 1/sqrt(dk).
		var n float64
		for _, v := range in.q[ti][0] {
			n += float64(v) * float64(v)
		}
		if math.Abs(math.Sqrt(n)-1/math.Sqrt(dk)) > 1e-4 {
			t.Fatalf("|q| = %g, want %g", math.Sqrt(n), 1/math.Sqrt(dk))
		}
		for h := 0; h < vh; h++ {
			if g := in.g[ti][h]; g > 0 || in.beta[ti][h] <= 0 || in.beta[ti][h] >= 1 {
				t.Fatalf("g=%g beta=%g out of range", g, in.beta[ti][h])
			}
		}
	}
	// Causality of the whole mixer.
	full := d.forward(xs)
	part := d.forward(xs[:2])
	for ti := range part {
		if dd := maxAbsDiff(part[ti], full[ti]); dd != 0 {
			t.Fatalf("delta net not causal at %d: %g", ti, dd)
		}
	}
}
