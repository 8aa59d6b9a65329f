package merge

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// cancelTensor is one base tensor of the cancellation case and its adapter factors.
type cancelTensor struct {
	module     string
	dtype      safetensors.DType
	rows, cols int64
	std        float64 // of A and B
}

// cancelCase writes a base and a rank-16 adapter in which, in every row, one element of the base nearly
// cancels the adapter's update: B[i,0] is solved so that s·(B·A)[i,j] lands on a 16-bit value t (up to the
// float32 rounding of B[i,0]) and the base holds −t there, so the exact result is ~2⁻²⁴·Σ|s·B·A| — the shape of
// model.layers.2.mlp.down_proj[72,227] of issue 13 (exact 5.7e-08, written 7 ulps off). The other elements
// are ordinary. It returns the base and adapter folders and the naive (float64) merge.
func cancelCase(t *testing.T, dir string, tensors []cancelTensor) (base, adapter string, want map[string]*ntensor) {
	t.Helper()
	rng := rand.New(rand.NewPCG(13, 7))
	const r, alpha = 16, 32.0
	s := alpha / r
	base, adapter = filepath.Join(dir, "base"), filepath.Join(dir, "adapter")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	var bts, ats []tensor
	var targets []string
	want = map[string]*ntensor{}
	for _, ct := range tensors {
		A := randVals(rng, r*ct.cols, ct.std)
		B := randVals(rng, ct.rows*r, ct.std)
		W := make([]float32, ct.rows*ct.cols)
		to16 := func(x float64) float32 {
			if ct.dtype == safetensors.BF16 {
				return half.BF16ToF32(half.F32ToBF16(float32(x)))
			}
			return half.F16ToF32(half.F32ToF16(float32(x)))
		}
		for i := range ct.rows {
			j := (i * 7) % ct.cols
			var rest float64
			for k := int64(1); k < r; k++ {
				rest += float64(B[i*r+k]) * float64(A[k*ct.cols+j])
			}
			target := float64(to16(s * (rest + float64(B[i*r])*float64(A[j])))) // a 16-bit value near s·(B·A)[i,j]
			B[i*r] = float32((target/s - rest) / float64(A[j]))
			for c := range ct.cols {
				W[i*ct.cols+c] = to16(rng.NormFloat64() * 4 * ct.std * ct.std * s)
			}
			W[i*ct.cols+j] = -float32(target)
		}
		name := "model.layers.0." + ct.module + ".weight"
		bts = append(bts, tensor{name, ct.dtype, []int64{ct.rows, ct.cols}, W})
		ats = append(ats,
			tensor{"base_model.model.model.layers.0." + ct.module + ".lora_A.weight", safetensors.F32, []int64{r, ct.cols}, A},
			tensor{"base_model.model.model.layers.0." + ct.module + ".lora_B.weight", safetensors.F32, []int64{ct.rows, r}, B})
		targets = append(targets, ct.module[len("mlp."):])
		nt := &ntensor{shape: []int64{ct.rows, ct.cols}, dtype: string(ct.dtype), vals: make([]float64, len(W))}
		for i := range ct.rows {
			for c := range ct.cols {
				var acc float64
				for k := int64(0); k < r; k++ {
					acc += float64(B[i*r+k]) * float64(A[k*ct.cols+c])
				}
				nt.vals[i*ct.cols+c] = float64(W[i*ct.cols+c]) + s*acc
			}
		}
		want[name] = nt
	}
	writeST(t, filepath.Join(base, "model.safetensors"), bts)
	writeJSON(t, filepath.Join(base, "config.json"), map[string]any{"model_type": "qwen3", "architectures": []string{"Qwen3ForCausalLM"}})
	cfg := loraConfig(r, alpha, targets)
	writeAdapter(t, adapter, cfg, ats)
	return base, adapter, want
}

// TestMergeCancellation is the regression test of issue 13 item 7: where the base and the update nearly
// cancel, every merged value is within one ulp of the exactly rounded one, on the fused BF16 path (columns a
// multiple of 16), the three-pass BF16 path (odd columns and rows), F16, through Run (mapped base), Wrap
// (values from the checkpoint reader) and the pread path.
func TestMergeCancellation(t *testing.T) {
	dir := t.TempDir()
	tensors := []cancelTensor{
		{"mlp.down_proj", safetensors.BF16, 64, 96, 0.1},
		{"mlp.up_proj", safetensors.BF16, 37, 40, 0.1},
		{"mlp.gate_proj", safetensors.F16, 32, 64, 6},
	}
	base, adapter, want := cancelCase(t, dir, tensors)

	// The case must be one the unguarded float32 path gets wrong by more than an ulp.
	worst := 0
	for name, w := range want {
		got := plainFloat32(t, base, adapter, name, w)
		for i, x := range got {
			worst = max(worst, ulpsApart(w.dtype, roundTo(w.dtype, w.vals[i]), x))
		}
	}
	if worst < 2 {
		t.Fatalf("the unguarded float32 path is at most %d ulp off here: the case does not test the guard", worst)
	}
	t.Logf("unguarded float32 path: up to %d ulps off", worst)

	out := filepath.Join(dir, "out")
	if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: adapter}}, Out: out}, nil); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, out, base, want)
	nads := []naiveAdapter{{dir: adapter}}
	checkWrap(t, base, nads, want)

	// The pread path (no maps): the fused kernel rewrites the rows in place.
	ck, err := checkpoint.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	raw, err := safetensors.OpenDir(base)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ad, err := OpenAdapter(adapter, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	src, _, err := Wrap(context.Background(), ck, ck.Config, []Adapter{ad})
	if err != nil {
		t.Fatal(err)
	}
	src.raw = raw
	for name, w := range want {
		rows := w.shape[0]
		got, err := src.ReadRows(context.Background(), name, 0, rows, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			if d := ulpsApart(w.dtype, roundTo(w.dtype, w.vals[i]), x); d > 1 {
				t.Errorf("pread path: %s[%d] = %v, %d ulps from the exactly rounded %v", name, i, x, d, roundTo(w.dtype, w.vals[i]))
			}
		}
	}
}

// plainFloat32 computes a tensor the way the float32 path does without its guard: the base value, then
// float32(u·v) + x over the rank, rounded once to the dtype.
func plainFloat32(t *testing.T, base, adapter, name string, w *ntensor) []float32 {
	t.Helper()
	bst, err := safetensors.OpenDir(base)
	if err != nil {
		t.Fatal(err)
	}
	defer bst.Close()
	W, err := bst.ReadFloat32(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	ast, err := safetensors.OpenFiles(filepath.Join(adapter, AdapterWeightsName))
	if err != nil {
		t.Fatal(err)
	}
	defer ast.Close()
	mod := "base_model.model." + name[:len(name)-len(".weight")]
	A, err := ast.ReadFloat32(mod+".lora_A.weight", nil)
	if err != nil {
		t.Fatal(err)
	}
	B, err := ast.ReadFloat32(mod+".lora_B.weight", nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, cols := w.shape[0], w.shape[1]
	r := int64(len(A)) / cols
	s := 2.0 // alpha 32 / r 16
	out := make([]float32, len(W))
	for i := range rows {
		for j := range cols {
			x := W[i*cols+j]
			for k := range r {
				u := float32(s * float64(B[i*r+k]))
				x = float32(u*A[k*cols+j]) + x
			}
			y, ok := round(pipeline.DType(w.dtype), float64(x))
			if !ok {
				t.Fatalf("%s[%d, %d]: %v", name, i, j, x)
			}
			out[i*cols+j] = y
		}
	}
	return out
}

// TestGuardScale pins the guard's constant against its derivation (guard.go) and the rank limits.
func TestGuardScale(t *testing.T) {
	for _, c := range []struct {
		dtype pipeline.DType
		r     int
		ok    bool
	}{{pipeline.BF16, 16, true}, {pipeline.BF16, maxFastRankBF16, true}, {pipeline.BF16, maxFastRankBF16 + 1, false},
		{pipeline.F16, 64, true}, {pipeline.F16, maxFastRankF16 + 1, false}} {
		k, floor, ok := guardScale(c.dtype, c.r)
		if ok != c.ok {
			t.Errorf("%s rank %d: ok %v", c.dtype, c.r, ok)
			continue
		}
		if !ok {
			continue
		}
		// An unflagged value (|x| ≥ K·S, |x| ≥ floor) has E = c(|W|+S) ≤ c(|x|+2S+E) within 2^-(p+2)·|x|.
		cc := float64(c.r+3) * 0x1p-24
		p := map[pipeline.DType]float64{pipeline.BF16: 8, pipeline.F16: 11}[c.dtype]
		for _, x := range []float64{1, 1e-3, 1e-9} {
			S := x / k
			E := cc * (x + 2*S) / (1 - cc)
			if E > math.Exp2(-(p+2))*x/2*(1+1e-12) {
				t.Errorf("%s rank %d: K %g lets a value of %g through with bound %g", c.dtype, c.r, k, x, E)
			}
		}
		if floor <= 0 {
			t.Errorf("%s: floor %g", c.dtype, floor)
		}
	}
}

// TestMergeFloat32Overflow: rank terms that overflow float32 but cancel exactly are recomputed in float64 (the
// merged value is the base's: weights of 1e30 survive next to terms of 6e38 there), on the fused and the
// three-pass path; a value that is really out of range is an error naming the element.
func TestMergeFloat32Overflow(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	os.MkdirAll(base, 0o755)
	rng := rand.New(rand.NewPCG(5, 5))
	writeST(t, filepath.Join(base, "model.safetensors"), []tensor{
		{"model.layers.0.mlp.down_proj.weight", safetensors.BF16, []int64{8, 32}, randVals(rng, 8*32, 1e30)},
		{"model.layers.0.mlp.up_proj.weight", safetensors.BF16, []int64{5, 8}, randVals(rng, 5*8, 1e30)},
	})
	writeJSON(t, filepath.Join(base, "config.json"), map[string]any{"model_type": "qwen3"})
	factors := func(mod string, rows, cols int64, second float32) []tensor {
		A := make([]float32, 2*cols)
		for i := range A {
			A[i] = 3e19
		}
		B := make([]float32, rows*2)
		for i := int64(0); i < rows; i++ {
			B[2*i], B[2*i+1] = 2e19, second // 2e19·3e19 = 6e38: +Inf in float32
		}
		p := "base_model.model.model.layers.0.mlp." + mod
		return []tensor{{p + ".lora_A.weight", safetensors.F32, []int64{2, cols}, A}, {p + ".lora_B.weight", safetensors.F32, []int64{rows, 2}, B}}
	}
	for _, c := range []struct {
		name   string
		second float32
		ok     bool
	}{{"cancel", -2e19, true}, {"overflow", 2e19, false}} {
		t.Run(c.name, func(t *testing.T) {
			ad := writeAdapter(t, filepath.Join(dir, c.name), loraConfig(2, 2, []string{"down_proj", "up_proj"}),
				append(factors("down_proj", 8, 32, c.second), factors("up_proj", 5, 8, c.second)...))
			out := filepath.Join(dir, c.name+"-out")
			_, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil)
			if !c.ok {
				if err == nil || !strings.Contains(err.Error(), "not finite") {
					t.Fatalf("err = %v, want a not-finite error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := safetensors.OpenDir(out)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			bst, _ := safetensors.OpenDir(base)
			defer bst.Close()
			for _, name := range []string{"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.up_proj.weight"} {
				g, _ := got.ReadFloat32(name, nil)
				w, _ := bst.ReadFloat32(name, nil)
				for i := range w {
					if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
						t.Fatalf("%s[%d] = %v, want the base's %v (the terms cancel exactly)", name, i, g[i], w[i])
					}
				}
			}
		})
	}
}
