package reference

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/safetensors"
)

type loraPair struct {
	module string // HF module path, e.g. model.layers.0.self_attn.q_proj
	A, B   []float32
	r      int
}

// writeAdapter writes a PEFT adapter directory with the given pairs and adapter_config.json fields.
func writeAdapter(t *testing.T, pairs []loraPair, in, out map[string]int, cfg map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	var infos []safetensors.WriteInfo
	data := map[string][]float32{}
	for _, p := range pairs {
		a := "base_model.model." + p.module + ".lora_A.weight"
		b := "base_model.model." + p.module + ".lora_B.weight"
		infos = append(infos,
			safetensors.WriteInfo{Name: a, DType: safetensors.F32, Shape: []int64{int64(p.r), int64(in[p.module])}},
			safetensors.WriteInfo{Name: b, DType: safetensors.F32, Shape: []int64{int64(out[p.module]), int64(p.r)}})
		data[a], data[b] = p.A, p.B
	}
	w, err := safetensors.Create(filepath.Join(dir, "adapter_model.safetensors"), infos, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if err := w.WriteFloat32(i.Name, data[i.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAdapterMatchesMergedWeights checks the run-time LoRA (W x + s·B(A x)) against a checkpoint whose weights
// were merged by PEFT's formula W' = W + s·(B @ A), s = alpha/r (or alpha/√r with rsLoRA), per-module
// alpha_pattern, times the Adapter.Scale multiplier.
func TestAdapterMatchesMergedWeights(t *testing.T) {
	for _, tc := range tinyCases() {
		if tc.name != "qwen2" && tc.name != "qwen35" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			tc.dtype = safetensors.F32
			dir, cfg, mem := buildCase(t, tc, 99)
			p := "model."
			if tc.conditional {
				p = "model.language_model."
			}
			// Adapter keys for Qwen3.5 use the ForCausalLM spelling on purpose: findLinear maps them.
			modules := []string{"model.layers.1.self_attn.q_proj", "model.layers.0.mlp.down_proj"}
			if cfg.Family == FamilyQwen35 {
				modules = append(modules, "model.layers.0.linear_attn.in_proj_qkv", "model.layers.1.self_attn.o_proj")
			} else {
				modules = append(modules, "model.layers.0.self_attn.v_proj", "lm_head")
			}
			in, out := map[string]int{}, map[string]int{}
			rng := rand.New(rand.NewPCG(5, 5))
			var pairs []loraPair
			for i, mod := range modules {
				name := mod + ".weight"
				if mod != "lm_head" {
					name = p + strings.TrimPrefix(mod, "model.") + ".weight"
				}
				sh := mem.shapes[name]
				out[mod], in[mod] = int(sh[0]), int(sh[1])
				r := 1 + i%3
				pairs = append(pairs, loraPair{module: mod, r: r,
					A: randVec(rng, r*in[mod], 0.3), B: randVec(rng, out[mod]*r, 0.3)})
			}
			for _, rs := range []bool{false, true} {
				acfg := map[string]any{"peft_type": "LORA", "r": 2, "lora_alpha": 3, "use_rslora": rs,
					"alpha_pattern": map[string]any{"down_proj": 5}}
				adir := writeAdapter(t, pairs, in, out, acfg)
				const mult = 0.7
				// Merge by hand into a copy of the base tensors.
				merged := &memTensors{shapes: mem.shapes, data: map[string][]float32{}, order: mem.order}
				for k, v := range mem.data {
					merged.data[k] = append([]float32(nil), v...)
				}
				for _, pr := range pairs {
					name := pr.module + ".weight"
					if pr.module != "lm_head" {
						name = p + strings.TrimPrefix(pr.module, "model.") + ".weight"
					}
					alpha := 3.0
					if strings.HasSuffix(pr.module, "down_proj") {
						alpha = 5
					}
					s := alpha / float64(pr.r)
					if rs {
						s = alpha / math.Sqrt(float64(pr.r))
					}
					W := merged.data[name]
					I, O := in[pr.module], out[pr.module]
					for o := 0; o < O; o++ {
						for i := 0; i < I; i++ {
							var ba float64
							for k := 0; k < pr.r; k++ {
								ba += float64(pr.B[o*pr.r+k]) * float64(pr.A[k*I+i])
							}
							W[o*I+i] = float32(float64(W[o*I+i]) + mult*s*ba)
						}
					}
				}
				mdir := t.TempDir()
				writeCheckpoint(t, mdir, tc.config, merged, safetensors.F32)
				want, err := Load(mdir)
				if err != nil {
					t.Fatal(err)
				}
				got, err := LoadWithAdapters(dir, []Adapter{{Dir: adir, Scale: mult}})
				if err != nil {
					t.Fatal(err)
				}
				base, err := Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				lw, lg, lb := want.Forward(testPrompt), got.Forward(testPrompt), base.Forward(testPrompt)
				var moved float64
				for i := range lw {
					if d := maxAbsDiff(lw[i], lg[i]); d > 2e-4 {
						t.Fatalf("rslora=%v position %d: adapter vs merged logits differ by %g", rs, i, d)
					}
					moved = max(moved, maxAbsDiff(lw[i], lb[i]))
				}
				if moved < 1e-2 {
					t.Fatalf("the adapter barely changes the logits (%g): the test proves nothing", moved)
				}
			}
		})
	}
}

func TestAdapterErrors(t *testing.T) {
	tc := tinyCases()[0]
	tc.dtype = safetensors.F32
	dir, _, _ := buildCase(t, tc, 3)
	in := map[string]int{"model.layers.0.self_attn.nope": 16, "model.layers.0.self_attn.q_proj": 16}
	out := map[string]int{"model.layers.0.self_attn.nope": 16, "model.layers.0.self_attn.q_proj": 16}
	bad := writeAdapter(t, []loraPair{{module: "model.layers.0.self_attn.nope", r: 1, A: make([]float32, 16), B: make([]float32, 16)}},
		in, out, map[string]any{"peft_type": "LORA", "r": 1, "lora_alpha": 1})
	if _, err := LoadWithAdapters(dir, []Adapter{{Dir: bad}}); err == nil || !strings.Contains(err.Error(), "not a linear layer") {
		t.Fatalf("unknown module: %v", err)
	}
	dora := writeAdapter(t, []loraPair{{module: "model.layers.0.self_attn.q_proj", r: 1, A: make([]float32, 16), B: make([]float32, 16)}},
		in, out, map[string]any{"peft_type": "LORA", "r": 1, "lora_alpha": 1, "use_dora": true})
	var fe *FormatError
	if _, err := LoadWithAdapters(dir, []Adapter{{Dir: dora}}); !errors.As(err, &fe) ||
		!strings.Contains(err.Error(), "lora_magnitude_vector") {
		t.Fatalf("dora without magnitude: %v", err)
	}
	var ue *UnsupportedError
	fan := writeAdapter(t, nil, in, out, map[string]any{"peft_type": "LORA", "fan_in_fan_out": true})
	if _, err := LoadWithAdapters(dir, []Adapter{{Dir: fan}}); !errors.As(err, &ue) {
		t.Fatalf("fan_in_fan_out: %v", err)
	}
}

func FuzzParseAdapterConfig(f *testing.F) {
	f.Add([]byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"alpha_pattern":{"down_proj":32,"q_proj":4}}`))
	f.Add([]byte(`{"alpha_pattern":{"(":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ac, err := parseAdapterConfig("adapter_config.json", data)
		if err != nil {
			return
		}
		if s := ac.scaling("model.layers.0.mlp.down_proj", 4); math.IsNaN(s) && ac.Alpha != nil && !math.IsNaN(*ac.Alpha) {
			t.Fatalf("scaling NaN from %s", data)
		}
	})
}
