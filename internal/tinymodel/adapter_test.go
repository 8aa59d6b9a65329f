package tinymodel

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestGenerateAdapter(t *testing.T) {
	q3, _ := Preset("qwen3")
	q2, _ := Preset("qwen2")
	q35, _ := Preset("qwen35")
	cases := []struct {
		name  string
		base  Spec
		spec  AdapterSpec
		want  map[string][]int64 // key -> shape (subset)
		count int                // number of tensors
	}{
		{"qwen3-default", q3, AdapterSpec{Seed: 1}, map[string][]int64{
			"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {8, 256},
			"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": {512, 8},
			"base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight": {8, 512},
		}, 2 * 4 * 2},
		{"qwen2-dora-rs-save", q2, AdapterSpec{Seed: 2, Rank: 4, RSLoRA: true, DoRA: true, TargetModules: []string{"v_proj", "down_proj"},
			ModulesToSave: []string{"lm_head"}, Layers: []int{1}, RankPattern: map[string]int{"down_proj": 2}, AlphaPattern: map[string]float64{"v_proj": 4}}, map[string][]int64{
			"base_model.model.model.layers.1.self_attn.v_proj.lora_magnitude_vector": {128},
			"base_model.model.model.layers.1.mlp.down_proj.lora_A.weight":            {2, 512},
			"base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight":         {128, 4},
			"base_model.model.lm_head.weight":                                        {768, 256},
		}, 2*3 + 1},
		{"qwen35-linear-embed", q35, AdapterSpec{Seed: 3, TargetModules: []string{"in_proj_qkv", "out_proj", "q_proj", "embed_tokens"}}, map[string][]int64{
			"base_model.model.model.language_model.layers.0.linear_attn.in_proj_qkv.lora_A.weight": {8, 256},
			"base_model.model.model.language_model.layers.2.linear_attn.out_proj.lora_B.weight":    {256, 8},
			"base_model.model.model.language_model.layers.3.self_attn.q_proj.lora_B.weight":        {512, 8},
			"base_model.model.model.language_model.embed_tokens.lora_embedding_A":                  {8, 768},
			"base_model.model.model.language_model.embed_tokens.lora_embedding_B":                  {256, 8},
		}, 2 * (3*2 + 1 + 1)},
		{"qwen35-textonly", q35, AdapterSpec{Seed: 4, TextOnly: true, TargetModules: []string{"o_proj"}, ModulesToSave: []string{"embed_tokens"}, DType: BF16}, map[string][]int64{
			"base_model.model.model.layers.3.self_attn.o_proj.lora_A.weight": {8, 256},
			"base_model.model.model.embed_tokens.weight":                     {768, 256},
		}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := GenerateAdapter(dir, c.base, c.spec); err != nil {
				t.Fatal(err)
			}
			hdr, start, data := readHeader(t, filepath.Join(dir, "adapter_model.safetensors"))
			if len(hdr) != c.count {
				var keys []string
				for k := range hdr {
					keys = append(keys, k)
				}
				t.Errorf("%d tensors, want %d: %v", len(hdr), c.count, keys)
			}
			for k, shape := range c.want {
				e, ok := hdr[k]
				if !ok || !reflect.DeepEqual(e.Shape, shape) {
					t.Errorf("%s: %v (present %v), want %v", k, e.Shape, ok, shape)
				}
			}
			for k := range hdr {
				if strings.Contains(k, "mtp.") || strings.Contains(k, "visual") || strings.Contains(k, ".default") {
					t.Errorf("unexpected key %s", k)
				}
			}
			var cfg map[string]any
			b, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			spec, _ := c.spec.normalize()
			if cfg["peft_type"] != "LORA" || cfg["r"] != float64(spec.Rank) || cfg["lora_alpha"] != spec.Alpha ||
				cfg["use_dora"] != spec.DoRA || cfg["use_rslora"] != spec.RSLoRA || cfg["bias"] != "none" {
				t.Errorf("adapter_config %v", cfg)
			}
			if c.spec.DoRA {
				// The magnitude is the base row norm, perturbed by a few percent.
				k := "base_model.model.model.layers.1.self_attn.v_proj.lora_magnitude_vector"
				w, _, _ := c.base.TensorValues("model.layers.1.self_attn.v_proj.weight")
				var ss float64
				for _, x := range w[:256] {
					ss += float64(x) * float64(x)
				}
				got := math.Float32frombits(binary.LittleEndian.Uint32(data[start+hdr[k].Offsets[0]:]))
				if r := float64(got) / math.Sqrt(ss); r < 0.8 || r > 1.2 {
					t.Errorf("magnitude[0] = %v, row norm %v", got, math.Sqrt(ss))
				}
			}
		})
	}
	// Errors: nothing matched, lm_head on a tied model.
	if err := GenerateAdapter(t.TempDir(), q3, AdapterSpec{TargetModules: []string{"nope"}}); err == nil {
		t.Error("adapter matching nothing accepted")
	}
	if err := GenerateAdapter(t.TempDir(), q3, AdapterSpec{ModulesToSave: []string{"lm_head"}}); err == nil {
		t.Error("lm_head modules_to_save on a tied model accepted")
	}
	// Deterministic.
	a, b := t.TempDir(), t.TempDir()
	GenerateAdapter(a, q3, AdapterSpec{Seed: 9, DoRA: true})
	GenerateAdapter(b, q3, AdapterSpec{Seed: 9, DoRA: true})
	if !reflect.DeepEqual(dirHashes(t, a), dirHashes(t, b)) {
		t.Error("adapter generation not deterministic")
	}
}
