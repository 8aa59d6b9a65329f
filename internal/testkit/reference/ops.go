package reference

import "math"

// Numeric policy: activations and weights are float32 (as a float32 HF model), every sum is accumulated in float64
// and rounded once, transcendental functions are evaluated in float64. This is at least as accurate as torch's
// float32 CPU kernels, which is all the 1e-3 comparison against llama.cpp needs.

// loraDelta is one adapter on a linear layer: y += Scale · B (A x), A [R×In], B [Out×R].
type loraDelta struct {
	A, B  []float32
	R     int
	Scale float64
}

// linear is nn.Linear: y = W x + b with W [Out×In] row-major (PyTorch layout), plus run-time LoRA deltas.
// With a DoRA magnitude the layer computes b + (m / ‖W + s·BA‖_row) ⊙ (W x + s·B(A x)) (PEFT's DoRA forward,
// equal to the merged weight (m/‖·‖)(W + s·BA) with the bias untouched).
type linear struct {
	W       []float32
	Out, In int
	B       []float32 // nil when the layer has no bias
	loras   []loraDelta
	doraMag []float64 // m_o / ‖W_o + s·(BA)_o‖ per output row; nil without DoRA

	name string     // the HF weight name, for observers
	obs  *linearObs // the model's observer (shared by all its layers), or nil
}

// linearObs holds the function Model.ObserveLinears installs.
type linearObs struct {
	fn func(weight string, x []float32)
}

func (l *linear) apply(x []float32) []float32 {
	if l.obs != nil && l.obs.fn != nil {
		l.obs.fn(l.name, x)
	}
	y := make([]float64, l.Out)
	for o := 0; o < l.Out; o++ {
		row := l.W[o*l.In : (o+1)*l.In]
		var s float64
		for i, w := range row {
			s += float64(w) * float64(x[i])
		}
		y[o] = float64(float32(s))
	}
	for _, d := range l.loras {
		ax := make([]float64, d.R)
		for r := 0; r < d.R; r++ {
			var s float64
			for i, a := range d.A[r*l.In : (r+1)*l.In] {
				s += float64(a) * float64(x[i])
			}
			ax[r] = float64(float32(s))
		}
		for o := 0; o < l.Out; o++ {
			var s float64
			for r, b := range d.B[o*d.R : (o+1)*d.R] {
				s += float64(b) * ax[r]
			}
			y[o] += d.Scale * float64(float32(s))
		}
	}
	out := make([]float32, l.Out)
	for o, v := range y {
		if l.doraMag != nil {
			v *= l.doraMag[o]
		}
		if l.B != nil {
			v += float64(l.B[o])
		}
		out[o] = float32(v)
	}
	return out
}

// rmsNorm is Qwen2RMSNorm / Qwen3RMSNorm: w · x / sqrt(mean(x²) + eps).
func rmsNorm(x, w []float32, eps float64) []float32 {
	return rmsNormOffset(x, w, eps, 0)
}

// rmsNormZC is the zero-centred Qwen3_5RMSNorm: (1 + w) · x / sqrt(mean(x²) + eps).
func rmsNormZC(x, w []float32, eps float64) []float32 {
	return rmsNormOffset(x, w, eps, 1)
}

func rmsNormOffset(x, w []float32, eps, offset float64) []float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float32, len(x))
	for i, v := range x {
		n := float32(float64(v) * inv)
		y[i] = float32(float64(n) * (offset + float64(w[i])))
	}
	return y
}

// l2Norm is transformers' l2norm (aligned with FLA): x · rsqrt(Σx² + eps).
func l2Norm(x []float32, eps float64) []float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss+eps)
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(float64(v) * inv)
	}
	return y
}

func silu(x float64) float64    { return x / (1 + math.Exp(-x)) }
func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// softplus is torch.nn.functional.softplus with beta 1 and threshold 20.
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// softmax returns a float64 softmax (torch softmax(dtype=float32) is at most this accurate).
func softmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	y := make([]float64, len(x))
	var s float64
	for i, v := range x {
		y[i] = math.Exp(v - m)
		s += y[i]
	}
	for i := range y {
		y[i] /= s
	}
	return y
}

// swiglu is the Qwen MLP: down(silu(gate x) · up x).
type mlp struct{ gate, up, down linear }

func (m *mlp) apply(x []float32) []float32 {
	g := m.gate.apply(x)
	u := m.up.apply(x)
	h := make([]float32, len(g))
	for i := range g {
		h[i] = float32(silu(float64(g[i])) * float64(u[i]))
	}
	return m.down.apply(h)
}

func addInto(dst, src []float32) {
	for i := range dst {
		dst[i] = float32(float64(dst[i]) + float64(src[i]))
	}
}
