package reference

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// mergeByHand applies a PEFT adapter to the base tensors the way merge_and_unload does, from the formulas
// (PEFT lora/layer.py get_delta_weight, DoRA merge, Embedding delta, modules_to_save), independently of the
// run-time path: W' = W + s·B A; DoRA W' = (m/‖W + s·B A‖_row)(W + s·B A); E' = E + s·(B A)ᵀ.
func mergeByHand(t *testing.T, base *memTensors, adapterDir string, tied bool) *memTensors {
	t.Helper()
	var cfg map[string]any
	data, err := os.ReadFile(filepath.Join(adapterDir, "adapter_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(adapterDir, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read := func(name string) ([]float32, []int64) {
		info, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("adapter lacks %s", name)
		}
		v, err := f.ReadFloat32(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return v, info.Shape
	}
	out := &memTensors{shapes: base.shapes, data: map[string][]float32{}, order: base.order}
	for k, v := range base.data {
		out.data[k] = append([]float32(nil), v...)
	}
	baseName := func(module string) string {
		name := strings.TrimPrefix(module, "base_model.model.") + ".weight"
		if _, ok := out.data[name]; !ok {
			name = strings.Replace(name, "model.", "model.language_model.", 1)
		}
		if _, ok := out.data[name]; !ok {
			t.Fatalf("no base tensor for %s", module)
		}
		return name
	}
	alpha := cfg["lora_alpha"].(float64)
	scaling := func(module string, r int) float64 {
		a := alpha
		if ap, ok := cfg["alpha_pattern"].(map[string]any); ok {
			for k, v := range ap { // the tests use one pattern key at most
				if strings.HasSuffix(strings.TrimPrefix(module, "base_model.model."), k) {
					a = v.(float64)
				}
			}
		}
		if cfg["use_rslora"] == true {
			return a / math.Sqrt(float64(r))
		}
		return a / float64(r)
	}
	for _, ti := range f.Tensors() {
		name := ti.Name
		switch {
		case strings.HasSuffix(name, ".lora_A.weight"):
			module := strings.TrimSuffix(name, ".lora_A.weight")
			A, sa := read(name)
			B, _ := read(module + ".lora_B.weight")
			r, in := int(sa[0]), int(sa[1])
			W := out.data[baseName(module)]
			o := len(W) / in
			s := scaling(module, r)
			for i := 0; i < o; i++ {
				for j := 0; j < in; j++ {
					var ba float64
					for k := 0; k < r; k++ {
						ba += float64(B[i*r+k]) * float64(A[k*in+j])
					}
					W[i*in+j] = float32(float64(W[i*in+j]) + s*ba)
				}
			}
			if cfg["use_dora"] == true {
				mag, _ := read(module + ".lora_magnitude_vector")
				for i := 0; i < o; i++ {
					var ss float64
					for j := 0; j < in; j++ {
						ss += float64(W[i*in+j]) * float64(W[i*in+j])
					}
					sc := float64(mag[i]) / math.Sqrt(ss)
					for j := 0; j < in; j++ {
						W[i*in+j] = float32(float64(W[i*in+j]) * sc)
					}
				}
			}
		case strings.HasSuffix(name, ".lora_embedding_A"):
			module := strings.TrimSuffix(name, ".lora_embedding_A")
			A, sa := read(name)
			B, _ := read(module + ".lora_embedding_B")
			r, vocab := int(sa[0]), int(sa[1])
			E := out.data[baseName(module)]
			d := len(E) / vocab
			s := scaling(module, r)
			for v := 0; v < vocab; v++ {
				for j := 0; j < d; j++ {
					var ba float64
					for k := 0; k < r; k++ {
						ba += float64(B[j*r+k]) * float64(A[k*vocab+v])
					}
					E[v*d+j] = float32(float64(E[v*d+j]) + s*ba)
				}
			}
		case strings.HasSuffix(name, ".lora_B.weight"), strings.HasSuffix(name, ".lora_embedding_B"),
			strings.HasSuffix(name, ".lora_magnitude_vector"):
		default: // modules_to_save
			v, _ := read(name)
			out.data[baseName(strings.TrimSuffix(name, ".weight"))] = v
		}
	}
	return out
}

func TestTinyAdaptersMatchHandMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: hidden-256 models")
	}
	q2, _ := tinymodel.Preset("qwen2")
	q2t, _ := tinymodel.Preset("qwen2-tied")
	q35, _ := tinymodel.Preset("qwen35")
	for _, c := range []struct {
		name string
		base tinymodel.Spec
		spec tinymodel.AdapterSpec
	}{
		{"qwen2-plain", q2, tinymodel.AdapterSpec{Seed: 1, Rank: 4, TargetModules: []string{"q_proj", "v_proj", "down_proj", "lm_head"},
			AlphaPattern: map[string]float64{"down_proj": 32}}},
		{"qwen2-dora-rslora", q2, tinymodel.AdapterSpec{Seed: 2, Rank: 4, RSLoRA: true, DoRA: true, TargetModules: []string{"v_proj", "down_proj"}}},
		{"qwen2-tied-embed", q2t, tinymodel.AdapterSpec{Seed: 3, Rank: 4, BStd: 0.2, TargetModules: []string{"embed_tokens", "o_proj"}}},
		{"qwen2-save", q2, tinymodel.AdapterSpec{Seed: 4, Rank: 2, TargetModules: []string{"k_proj"}, ModulesToSave: []string{"lm_head", "embed_tokens"}}},
		{"qwen35-textonly", q35, tinymodel.AdapterSpec{Seed: 5, Rank: 4, BStd: 0.1, TextOnly: true,
			TargetModules: []string{"in_proj_qkv", "in_proj_z", "out_proj", "q_proj", "gate_proj"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tinymodel.Generate(dir, c.base); err != nil {
				t.Fatal(err)
			}
			adir := t.TempDir()
			if err := tinymodel.GenerateAdapter(adir, c.base, c.spec); err != nil {
				t.Fatal(err)
			}
			ck, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			base := &memTensors{shapes: map[string][]int64{}, data: map[string][]float32{}}
			for _, ti := range ck.Tensors() {
				v, err := ck.ReadFloat32(ti.Name, nil)
				if err != nil {
					t.Fatal(err)
				}
				base.put(ti.Name, ti.Shape, v)
			}
			ck.Close()
			merged := mergeByHand(t, base, adir, c.base.TiedEmbeddings)
			mdir := t.TempDir()
			var conf map[string]any
			js, _ := os.ReadFile(filepath.Join(dir, "config.json"))
			if err := json.Unmarshal(js, &conf); err != nil {
				t.Fatal(err)
			}
			writeCheckpoint(t, mdir, conf, merged, safetensors.F32)
			want, err := Load(mdir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := LoadWithAdapters(dir, []Adapter{{Dir: adir}})
			if err != nil {
				t.Fatal(err)
			}
			plain, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			prompt := []int{5, 100, 37, 600, 2, 255, 17, 480}
			lw, lg, lp := want.Forward(prompt), got.Forward(prompt), plain.Forward(prompt)
			var worst, moved float64
			for i := range lw {
				worst = max(worst, maxAbsDiff(lw[i], lg[i]))
				moved = max(moved, maxAbsDiff(lw[i], lp[i]))
			}
			t.Logf("adapter vs hand-merged: max |Δlogit| %.3g; adapter moves logits by up to %.3g", worst, moved)
			if worst > 1e-4 {
				t.Fatalf("run-time adapter and hand-merged weights disagree by %g", worst)
			}
			if moved < 1e-3 {
				t.Fatalf("the adapter barely changes the logits (%g)", moved)
			}
		})
	}
}
