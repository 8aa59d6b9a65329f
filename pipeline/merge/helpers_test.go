package merge

import (
	"encoding/json"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// tensor is a tensor a test writes by hand.
type tensor struct {
	name  string
	dtype safetensors.DType
	shape []int64
	vals  []float32
}

func writeST(t testing.TB, path string, ts []tensor) {
	t.Helper()
	ts = slices.Clone(ts)
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	plan := make([]safetensors.WriteInfo, len(ts))
	for i, x := range ts {
		plan[i] = safetensors.WriteInfo{Name: x.name, DType: x.dtype, Shape: x.shape}
	}
	w, err := safetensors.Create(path, plan, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if err := w.WriteFloat32(x.name, x.vals); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func randVals(rng *rand.Rand, n int64, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return v
}

// loraConfig is a plain adapter_config.json.
func loraConfig(r int, alpha float64, targets any) map[string]any {
	return map[string]any{"peft_type": "LORA", "r": r, "lora_alpha": alpha, "target_modules": targets,
		"bias": "none", "fan_in_fan_out": false, "use_rslora": false, "use_dora": false, "base_model_name_or_path": "test"}
}

// writeAdapter writes a hand-made adapter folder.
func writeAdapter(t testing.TB, dir string, cfg map[string]any, ts []tensor) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, AdapterConfigName), cfg)
	writeST(t, filepath.Join(dir, AdapterWeightsName), ts)
	return dir
}

func genBase(t testing.TB, dir string, s tinymodel.Spec) string {
	t.Helper()
	if err := tinymodel.Generate(dir, s); err != nil {
		t.Fatal(err)
	}
	return dir
}

func genAdapter(t testing.TB, dir string, base tinymodel.Spec, a tinymodel.AdapterSpec) string {
	t.Helper()
	if err := tinymodel.GenerateAdapter(dir, base, a); err != nil {
		t.Fatal(err)
	}
	return dir
}

func preset(t testing.TB, name string) tinymodel.Spec {
	t.Helper()
	s, ok := tinymodel.Preset(name)
	if !ok {
		t.Fatalf("no preset %q", name)
	}
	return s
}

// ---- the independent naive merge (float64, whole matrices) ----

type ntensor struct {
	vals  []float64
	shape []int64
	dtype string
	// exact when anything but LoRA (DoRA, a saved tensor, a bias) touched the tensor: it takes the float64
	// path and must round exactly (see near).
	exact bool
}

type naiveAdapter struct {
	dir    string
	weight float64
}

// naive merges adapters into the base the textbook way: whole ΔW matrices in float64, PEFT's formulas spelled
// out per case. baseVal returns a base tensor; mapName turns an adapter module path into a base tensor path.
// It returns every tensor an adapter touched (lm_head.weight included for a tied base).
func naive(t *testing.T, baseVal func(string) ntensor, tiedEmbed string, ads []naiveAdapter, mapName func(string) string) map[string]*ntensor {
	t.Helper()
	cur := map[string]*ntensor{}
	get := func(name string) *ntensor {
		if x := cur[name]; x != nil {
			return x
		}
		src := name
		if name == "lm_head.weight" && tiedEmbed != "" {
			src = tiedEmbed
		}
		b := baseVal(src)
		x := &ntensor{vals: slices.Clone(b.vals), shape: b.shape, dtype: b.dtype}
		cur[name] = x
		return x
	}
	for _, ad := range ads {
		raw, err := os.ReadFile(filepath.Join(ad.dir, AdapterConfigName))
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		num := func(k string, d float64) float64 {
			if v, ok := cfg[k].(float64); ok {
				return v
			}
			return d
		}
		flag := func(k string) bool { b, _ := cfg[k].(bool); return b }
		pat := func(k string, mod string, d float64) float64 {
			m, _ := cfg[k].(map[string]any)
			for key, v := range m {
				if regexp.MustCompile(`^(.*\.)?(` + key + `)$`).MatchString(mod) {
					return v.(float64)
				}
			}
			return d
		}
		st, err := safetensors.OpenFiles(filepath.Join(ad.dir, AdapterWeightsName))
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string][]float64{}
		shapes := map[string][]int64{}
		var keys []string
		for _, ti := range st.Tensors() {
			f, err := st.ReadFloat32(ti.Name, nil)
			if err != nil {
				t.Fatal(err)
			}
			v := make([]float64, len(f))
			for i, x := range f {
				v[i] = float64(x)
			}
			vals[ti.Name], shapes[ti.Name] = v, ti.Shape
			keys = append(keys, ti.Name)
		}
		st.Close()
		sort.Strings(keys)
		w := ad.weight
		if w == 0 {
			w = 1
		}
		scale := func(mod string) float64 {
			r := pat("rank_pattern", mod, num("r", 8))
			alpha := pat("alpha_pattern", mod, num("lora_alpha", 8))
			if flag("use_rslora") {
				return w * alpha / math.Sqrt(r)
			}
			return w * alpha / r
		}
		// saved whole tensors replace the base first
		for _, k := range keys {
			if strings.Contains(k, "lora_") {
				continue
			}
			rel := strings.TrimPrefix(k, "base_model.model.")
			rel = strings.Replace(rel, ".modules_to_save.", ".", 1)
			x := get(mapName(rel))
			if len(x.vals) != len(vals[k]) {
				t.Fatalf("naive: %s size", k)
			}
			x.exact = true
			copy(x.vals, vals[k])
		}
		for _, k := range keys {
			switch {
			case strings.HasSuffix(k, ".lora_A.weight"):
				mod := strings.TrimSuffix(strings.TrimPrefix(k, "base_model.model."), ".lora_A.weight")
				A, B := vals[k], vals[strings.TrimSuffix(k, "lora_A.weight")+"lora_B.weight"]
				r, in := shapes[k][0], shapes[k][1]
				out := int64(len(B)) / r
				s := scale(mod)
				delta := make([]float64, out*in) // [out, in]
				for o := range out {
					for i := range in {
						var acc float64
						for kk := range r {
							acc += B[o*r+kk] * A[kk*in+i]
						}
						delta[o*in+i] = s * acc
					}
				}
				W := get(mapName(mod) + ".weight")
				fif := flag("fan_in_fan_out") && W.shape[0] == in
				at := func(o, i int64) *float64 { // element (o, i) of W in [out, in] terms
					if fif {
						return &W.vals[i*out+o]
					}
					return &W.vals[o*in+i]
				}
				for o := range out {
					for i := range in {
						*at(o, i) += delta[o*in+i]
					}
				}
				magKey := strings.TrimSuffix(k, "lora_A.weight") + "lora_magnitude_vector"
				if m, ok := vals[magKey]; ok { // DoRA: per output, norm over inputs (of W + ΔW)
					W.exact = true
					for o := range out {
						var ss float64
						for i := range in {
							ss += *at(o, i) * *at(o, i)
						}
						f := m[o] / math.Sqrt(ss)
						for i := range in {
							*at(o, i) *= f
						}
					}
				}
				if lb, ok := vals[strings.TrimSuffix(k, "lora_A.weight")+"lora_B.bias"]; ok {
					b := get(mapName(mod) + ".bias")
					b.exact = true
					for o := range out {
						b.vals[o] += s * lb[o]
					}
				}
			case strings.HasSuffix(k, ".lora_embedding_A"):
				mod := strings.TrimSuffix(strings.TrimPrefix(k, "base_model.model."), ".lora_embedding_A")
				A, B := vals[k], vals[strings.TrimSuffix(k, "A")+"B"]
				r, vocab := shapes[k][0], shapes[k][1]
				dim := int64(len(B)) / r
				s := scale(mod)
				W := get(mapName(mod) + ".weight") // [vocab, dim]
				for tok := range vocab {
					for d := range dim {
						var acc float64
						for kk := range r {
							acc += B[d*r+kk] * A[kk*vocab+tok]
						}
						W.vals[tok*dim+d] += s * acc
					}
				}
				if m, ok := vals[strings.TrimSuffix(k, "lora_embedding_A")+"lora_magnitude_vector"]; ok {
					W.exact = true
					for d := range dim { // DoRA on embeddings: per embedding dimension, norm over the vocabulary
						var ss float64
						for tok := range vocab {
							ss += W.vals[tok*dim+d] * W.vals[tok*dim+d]
						}
						f := m[d] / math.Sqrt(ss)
						for tok := range vocab {
							W.vals[tok*dim+d] *= f
						}
					}
				}
			}
		}
	}
	return cur
}

// roundTo rounds x to dtype with math/big (independent of the package's rounding).
func roundTo(dtype string, x float64) float32 {
	if dtype == "F16" && math.Abs(x) < 0x1p-14 { // f16 subnormals: multiples of 2^-24
		return float32(math.RoundToEven(x*0x1p24) / 0x1p24)
	}
	prec := map[string]uint{"F32": 24, "BF16": 8, "F16": 11}[dtype]
	f := new(big.Float).SetPrec(prec).SetMode(big.ToNearestEven).SetFloat64(x)
	v, _ := f.Float32()
	return v
}

// near reports whether got, which differs from the exactly rounded value of element i, is its neighbour one
// ulp away: the float32 path (fast.go) may round a value within its error bound of a rounding boundary the
// other way, and its guard (guard.go) recomputes every value whose bound could reach further. Anything else
// (a float64-path tensor, or a value two or more ulps off) is an error.
func (w *ntensor) near(i int, got float32) bool {
	if w.exact || w.dtype != "BF16" && w.dtype != "F16" {
		return false
	}
	return ulpsApart(w.dtype, roundTo(w.dtype, w.vals[i]), got) == 1
}

// ulpsApart is the number of BF16 or F16 values from a to b (both values of the dtype), across zero too.
func ulpsApart(dtype string, a, b float32) int {
	key := func(v float32) int {
		var h uint16
		if dtype == "BF16" {
			h = uint16(math.Float32bits(v) >> 16)
		} else {
			h = half.F32ToF16(v)
		}
		if h&0x8000 != 0 {
			return -int(h & 0x7FFF)
		}
		return int(h)
	}
	d := key(a) - key(b)
	if d < 0 {
		d = -d
	}
	return d
}

// maxNear bounds how many values of a tensor of n may legitimately round to the neighbour (see near): such
// values sit within ~2⁻²⁰ of a rounding boundary, about one in 10⁴; more means a real error.
func maxNear(n int) int { return 3 + n/1000 }

// tinyBase returns baseVal for a tinymodel spec.
func tinyBase(t *testing.T, s tinymodel.Spec) func(string) ntensor {
	return func(name string) ntensor {
		v, shape, err := s.TensorValues(name)
		if err != nil {
			t.Fatal(err)
		}
		dt, _ := s.TensorDType(name)
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return ntensor{vals: out, shape: shape, dtype: dt}
	}
}

func identity(s string) string { return s }

// checkOutput compares a merged checkpoint folder against the naive result: changed tensors bit for bit after
// rounding, every other tensor byte-identical to the base.
func checkOutput(t *testing.T, out, base string, want map[string]*ntensor) {
	t.Helper()
	got, err := safetensors.OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	b, err := safetensors.OpenDir(base)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for name, w := range want {
		ti, ok := got.Tensor(name)
		if !ok {
			t.Errorf("merged output lacks %q", name)
			continue
		}
		if string(ti.DType) != w.dtype || !slices.Equal(ti.Shape, w.shape) {
			t.Errorf("%s: %s %v, want %s %v", name, ti.DType, ti.Shape, w.dtype, w.shape)
			continue
		}
		v, err := got.ReadFloat32(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		bad, near := 0, 0
		for i, x := range v {
			if e := roundTo(w.dtype, w.vals[i]); math.Float32bits(e) != math.Float32bits(x) {
				if w.near(i, x) {
					near++
					continue
				}
				if bad < 3 {
					t.Errorf("%s[%d] = %v, want %v (exact %v)", name, i, x, e, w.vals[i])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ", name, bad, len(v))
		}
		if near > maxNear(len(v)) {
			t.Errorf("%s: %d of %d values round the other way at a rounding boundary, more than the %d the float32 path explains", name, near, len(v), maxNear(len(v)))
		}
	}
	for _, ti := range got.Tensors() {
		if want[ti.Name] != nil {
			continue
		}
		bt, ok := b.Tensor(ti.Name)
		if !ok {
			t.Errorf("merged output has %q, which neither the base nor the merge has", ti.Name)
			continue
		}
		if bt.DType != ti.DType || !slices.Equal(bt.Shape, ti.Shape) || !sameBytes(t, got, b, ti.Name) {
			t.Errorf("unchanged tensor %q differs from the base", ti.Name)
		}
	}
	for _, bt := range b.Tensors() {
		if _, ok := got.Tensor(bt.Name); !ok {
			t.Errorf("merged output lost base tensor %q", bt.Name)
		}
	}
}

func sameBytes(t *testing.T, x, y *safetensors.Checkpoint, name string) bool {
	rx, err := x.Raw(name)
	if err != nil {
		t.Fatal(err)
	}
	ry, err := y.Raw(name)
	if err != nil {
		t.Fatal(err)
	}
	if rx.Size() != ry.Size() {
		return false
	}
	bx, by := make([]byte, rx.Size()), make([]byte, ry.Size())
	rx.ReadAt(bx, 0)
	ry.ReadAt(by, 0)
	return string(bx) == string(by)
}
