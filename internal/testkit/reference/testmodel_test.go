package reference

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// tinyCase describes a hand-made checkpoint: its config.json and how its tensors are named and laid out.
type tinyCase struct {
	name        string
	config      map[string]any
	conditional bool // Qwen3.5 weights under model.language_model.
	fusedMoE    bool // transformers v5 fused experts
	dtype       safetensors.DType
}

func tinyCases() []tinyCase {
	base := func(arch string) map[string]any {
		return map[string]any{
			"architectures": []string{arch}, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
			"num_key_value_heads": 2, "intermediate_size": 24, "vocab_size": 40, "rms_norm_eps": 1e-6,
			"rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": false,
		}
	}
	qwen2 := base("Qwen2ForCausalLM")
	qwen3 := base("Qwen3ForCausalLM")
	qwen3["head_dim"] = 8
	qwen3["tie_word_embeddings"] = true
	moe := base("Qwen3MoeForCausalLM")
	moe["head_dim"] = 8
	moe["num_experts"] = 4
	moe["num_experts_per_tok"] = 2
	moe["moe_intermediate_size"] = 12
	moe["norm_topk_prob"] = true
	moe["decoder_sparse_step"] = 1
	moe["mlp_only_layers"] = []int{1}
	q35text := func(moeText bool) map[string]any {
		t := map[string]any{
			"hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
			"head_dim": 8, "intermediate_size": 24, "vocab_size": 40, "rms_norm_eps": 1e-6, "hidden_act": "silu",
			"linear_conv_kernel_dim": 4, "linear_key_head_dim": 4, "linear_value_head_dim": 6,
			"linear_num_key_heads": 2, "linear_num_value_heads": 4, "full_attention_interval": 2,
			"attn_output_gate": true, "tie_word_embeddings": true,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7,
				"partial_rotary_factor": 0.5, "mrope_section": []int{1, 1, 0}, "mrope_interleaved": true},
		}
		if moeText {
			t["num_experts"] = 4
			t["num_experts_per_tok"] = 2
			t["moe_intermediate_size"] = 8
			t["shared_expert_intermediate_size"] = 10
		}
		return t
	}
	q35cond := map[string]any{"architectures": []string{"Qwen3_5ForConditionalGeneration"},
		"text_config": q35text(false), "tie_word_embeddings": true}
	q35causal := q35text(false)
	q35causal["architectures"] = []string{"Qwen3_5ForCausalLM"}
	q35moe := map[string]any{"architectures": []string{"Qwen3_5MoeForConditionalGeneration"},
		"text_config": q35text(true)}
	return []tinyCase{
		{name: "qwen2", config: qwen2, dtype: safetensors.F32},
		{name: "qwen3", config: qwen3, dtype: safetensors.BF16},
		{name: "qwen3moe", config: moe, dtype: safetensors.F32},
		{name: "qwen3moe-fused", config: moe, fusedMoE: true, dtype: safetensors.F32},
		{name: "qwen35", config: q35cond, conditional: true, dtype: safetensors.F32},
		{name: "qwen35-causal", config: q35causal, dtype: safetensors.F16},
		{name: "qwen35moe", config: q35moe, conditional: true, dtype: safetensors.BF16},
	}
}

type tensorSpec struct {
	name  string
	shape []int64
	kind  int // 0 weight, 1 norm weight (around 1, or around 0 when zero-centred), 2 A_log, 3 plain norm
}

// specTensors lists the checkpoint's tensors, written independently from the loader from the modeling classes.
func specTensors(c Config, tc tinyCase) []tensorSpec {
	var out []tensorSpec
	add := func(kind int, name string, shape ...int) {
		s := make([]int64, len(shape))
		for i, v := range shape {
			s[i] = int64(v)
		}
		out = append(out, tensorSpec{name: name, shape: s, kind: kind})
	}
	p := "model."
	if tc.conditional {
		p = "model.language_model."
	}
	d := c.Hidden
	add(0, p+"embed_tokens.weight", c.Vocab, d)
	add(1, p+"norm.weight", d)
	if !c.TieEmbeddings {
		add(0, "lm_head.weight", c.Vocab, d)
	}
	q35 := c.Family == FamilyQwen35 || c.Family == FamilyQwen35MoE
	for i := 0; i < c.Layers; i++ {
		lp := fmt.Sprintf("%slayers.%d.", p, i)
		add(1, lp+"input_layernorm.weight", d)
		add(1, lp+"post_attention_layernorm.weight", d)
		if q35 && c.LayerTypes[i] == "linear_attention" {
			kd, vd := c.LinKHeads*c.LinKDim, c.LinVHeads*c.LinVDim
			add(0, lp+"linear_attn.in_proj_qkv.weight", 2*kd+vd, d)
			add(0, lp+"linear_attn.in_proj_z.weight", vd, d)
			add(0, lp+"linear_attn.in_proj_b.weight", c.LinVHeads, d)
			add(0, lp+"linear_attn.in_proj_a.weight", c.LinVHeads, d)
			add(0, lp+"linear_attn.conv1d.weight", 2*kd+vd, 1, c.ConvKernel)
			add(0, lp+"linear_attn.dt_bias", c.LinVHeads)
			add(2, lp+"linear_attn.A_log", c.LinVHeads)
			add(3, lp+"linear_attn.norm.weight", c.LinVDim)
			add(0, lp+"linear_attn.out_proj.weight", d, vd)
		} else {
			q := c.Heads * c.HeadDim
			if q35 {
				q *= 2
			}
			add(0, lp+"self_attn.q_proj.weight", q, d)
			add(0, lp+"self_attn.k_proj.weight", c.KVHeads*c.HeadDim, d)
			add(0, lp+"self_attn.v_proj.weight", c.KVHeads*c.HeadDim, d)
			add(0, lp+"self_attn.o_proj.weight", d, c.Heads*c.HeadDim)
			if c.Family == FamilyQwen2 {
				add(0, lp+"self_attn.q_proj.bias", c.Heads*c.HeadDim)
				add(0, lp+"self_attn.k_proj.bias", c.KVHeads*c.HeadDim)
				add(0, lp+"self_attn.v_proj.bias", c.KVHeads*c.HeadDim)
			} else {
				add(1, lp+"self_attn.q_norm.weight", c.HeadDim)
				add(1, lp+"self_attn.k_norm.weight", c.HeadDim)
			}
		}
		moeLayer := c.Family == FamilyQwen35MoE || (c.Family == FamilyQwen3MoE && i != 1)
		if moeLayer {
			ff := c.MoEIntermediate
			add(0, lp+"mlp.gate.weight", c.Experts, d)
			if tc.fusedMoE {
				add(0, lp+"mlp.experts.gate_up_proj", c.Experts, 2*ff, d)
				add(0, lp+"mlp.experts.down_proj", c.Experts, d, ff)
			} else {
				for e := 0; e < c.Experts; e++ {
					ep := fmt.Sprintf("%smlp.experts.%d.", lp, e)
					add(0, ep+"gate_proj.weight", ff, d)
					add(0, ep+"up_proj.weight", ff, d)
					add(0, ep+"down_proj.weight", d, ff)
				}
			}
			if c.Family == FamilyQwen35MoE {
				add(0, lp+"mlp.shared_expert.gate_proj.weight", c.SharedIntermediate, d)
				add(0, lp+"mlp.shared_expert.up_proj.weight", c.SharedIntermediate, d)
				add(0, lp+"mlp.shared_expert.down_proj.weight", d, c.SharedIntermediate)
				add(0, lp+"mlp.shared_expert_gate.weight", 1, d)
			}
		} else {
			add(0, lp+"mlp.gate_proj.weight", c.Intermediate, d)
			add(0, lp+"mlp.up_proj.weight", c.Intermediate, d)
			add(0, lp+"mlp.down_proj.weight", d, c.Intermediate)
		}
	}
	return out
}

// memTensors is an in-memory source.
type memTensors struct {
	order  []string
	shapes map[string][]int64
	data   map[string][]float32
}

func (m *memTensors) shape(name string) ([]int64, bool) { s, ok := m.shapes[name]; return s, ok }
func (m *memTensors) read(name string) ([]float32, error) {
	return append([]float32(nil), m.data[name]...), nil
}
func (m *memTensors) names() []string { return m.order }

func (m *memTensors) put(name string, shape []int64, v []float32) {
	if _, ok := m.shapes[name]; !ok {
		m.order = append(m.order, name)
	}
	m.shapes[name] = shape
	m.data[name] = v
}

// randomTensors fills specs with seeded values of a scale that keeps activations O(1).
func randomTensors(c Config, specs []tensorSpec, seed uint64) *memTensors {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	zc := c.Family == FamilyQwen35 || c.Family == FamilyQwen35MoE
	m := &memTensors{shapes: map[string][]int64{}, data: map[string][]float32{}}
	for _, s := range specs {
		n := int64(1)
		for _, v := range s.shape {
			n *= v
		}
		v := make([]float32, n)
		for i := range v {
			r := rng.NormFloat64()
			switch s.kind {
			case 0:
				v[i] = float32(r * 0.35)
			case 1:
				if zc {
					v[i] = float32(r * 0.2)
				} else {
					v[i] = float32(1 + r*0.2)
				}
			case 2:
				v[i] = float32(r * 0.5)
			case 3:
				v[i] = float32(1 + r*0.2)
			}
		}
		m.put(s.name, s.shape, v)
	}
	return m
}

// writeCheckpoint writes config.json and model.safetensors (in dtype) into dir.
func writeCheckpoint(t testing.TB, dir string, config map[string]any, m *memTensors, dtype safetensors.DType) {
	t.Helper()
	js, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	infos := make([]safetensors.WriteInfo, len(m.order))
	for i, n := range m.order {
		infos[i] = safetensors.WriteInfo{Name: n, DType: dtype, Shape: m.shapes[n]}
	}
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), infos, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range m.order {
		if err := w.WriteFloat32(n, m.data[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}

// buildCase parses tc's config, draws its tensors and writes the checkpoint to a temp dir.
func buildCase(t testing.TB, tc tinyCase, seed uint64) (string, Config, *memTensors) {
	t.Helper()
	js, _ := json.Marshal(tc.config)
	cfg, err := parseConfig("config.json", js)
	if err != nil {
		t.Fatalf("%s: %v", tc.name, err)
	}
	m := randomTensors(cfg, specTensors(cfg, tc), seed)
	dir := t.TempDir()
	writeCheckpoint(t, dir, tc.config, m, tc.dtype)
	return dir, cfg, m
}
