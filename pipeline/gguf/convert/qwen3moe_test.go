package convert

import (
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

func qwen3moeCfg() map[string]any {
	return map[string]any{
		"architectures": []any{"Qwen3MoeForCausalLM"}, "hidden_size": 2, "num_hidden_layers": 1,
		"num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 2, "intermediate_size": 6,
		"moe_intermediate_size": 3, "num_experts": 2, "num_experts_per_tok": 1, "vocab_size": 8,
		"rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 128, "bos_token_id": 6,
	}
}

func TestQwen3MoeStacking(t *testing.T) {
	src := newFake()
	src.add("model.embed_tokens.weight", "BF16", []int64{8, 2}, nil)
	for e := 0; e < 2; e++ {
		for _, p := range []string{"gate_proj", "up_proj", "down_proj"} {
			shape := []int64{3, 2}
			if p == "down_proj" {
				shape = []int64{2, 3}
			}
			base := float32(100*e) + map[string]float32{"gate_proj": 0, "up_proj": 10, "down_proj": 20}[p]
			src.add("model.layers.0.mlp.experts."+itoa(e)+"."+p+".weight", "BF16", shape, seq(6, func(i int) float32 { return base + float32(i) }))
		}
	}
	src.add("model.layers.0.mlp.gate.weight", "BF16", []int64{2, 2}, nil)
	src.add("model.layers.0.post_attention_layernorm.weight", "BF16", []int64{2}, []float32{1, 2})
	src.add("model.layers.0.self_attn.q_norm.weight", "BF16", []int64{2}, []float32{1, 2})
	m := loadFake(t, qwen3moeCfg(), qwen2Regex, src, Options{})

	var names []string
	for _, tt := range m.Tensors {
		names = append(names, tt.Name)
	}
	// Stacked when the last expert tensor (experts.1.up_proj) is seen, in the order down, gate, up; then the router.
	want := []string{"token_embd.weight", "blk.0.ffn_down_exps.weight", "blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight",
		"blk.0.ffn_gate_inp.weight", "blk.0.ffn_norm.weight", "blk.0.attn_q_norm.weight"}
	if !slices.Equal(names, want) {
		t.Fatalf("tensors %v, want %v", names, want)
	}
	gate, _ := m.Tensor("blk.0.ffn_gate_exps.weight")
	if !slices.Equal(gate.Shape, []uint64{2, 3, 2}) || gate.Type != gguf.TypeBF16 {
		t.Errorf("ffn_gate_exps shape %v type %s", gate.Shape, gate.Type)
	}
	down, _ := m.Tensor("blk.0.ffn_down_exps.weight")
	if !slices.Equal(down.Shape, []uint64{3, 2, 2}) {
		t.Errorf("ffn_down_exps shape %v, want [3 2 2]", down.Shape)
	}
	wantGate := []float32{0, 1, 2, 3, 4, 5, 100, 101, 102, 103, 104, 105}
	if got := readAll(t, m, "blk.0.ffn_gate_exps.weight"); !equalF32(got, wantGate) {
		t.Errorf("ffn_gate_exps = %v, want %v", got, wantGate)
	}
	// A partial block read crosses the expert boundary.
	rows, err := gate.ReadRows(t.Context(), 2, 2, nil)
	if err != nil || !equalF32(rows, []float32{4, 5, 100, 101}) {
		t.Errorf("rows 2..4 = %v, %v", rows, err)
	}
	if inp, _ := m.Tensor("blk.0.ffn_gate_inp.weight"); inp.Type != gguf.TypeF32 {
		t.Errorf("router type %s, want F32", inp.Type)
	}
	// Qwen3 norms are plain RMSNorm: no +1.
	if got := readAll(t, m, "blk.0.attn_q_norm.weight"); !equalF32(got, []float32{1, 2}) {
		t.Errorf("attn_q_norm = %v", got)
	}
	if v, _ := m.KV("qwen3moe.expert_feed_forward_length"); v.String() != "3" {
		t.Errorf("expert_feed_forward_length = %s", v)
	}
	if v, _ := m.KV("qwen3moe.expert_count"); v.String() != "2" {
		t.Errorf("expert_count = %s", v)
	}

	delete(src.t, "model.layers.0.mlp.experts.1.up_proj.weight")
	if _, err := tryLoadFake(t, qwen3moeCfg(), qwen2Regex, src, Options{}); err == nil || !strings.Contains(err.Error(), "incomplete experts") {
		t.Errorf("missing expert: err = %v", err)
	}
}

func TestFusedGateUpSplit(t *testing.T) {
	src := newFake()
	src.add("model.embed_tokens.weight", "F32", []int64{8, 2}, nil)
	// [E=2, 2·ff=4, d=2]: expert e rows 0-1 gate, 2-3 up.
	src.add("model.layers.0.mlp.experts.gate_up_proj", "F32", []int64{2, 4, 2}, nil)
	src.add("model.layers.0.mlp.experts.down_proj", "F32", []int64{2, 2, 2}, nil)
	m := loadFake(t, qwen3moeCfg(), qwen2Regex, src, Options{})
	if got, want := readAll(t, m, "blk.0.ffn_gate_exps.weight"), []float32{0, 1, 2, 3, 8, 9, 10, 11}; !equalF32(got, want) {
		t.Errorf("gate = %v, want %v", got, want)
	}
	if got, want := readAll(t, m, "blk.0.ffn_up_exps.weight"), []float32{4, 5, 6, 7, 12, 13, 14, 15}; !equalF32(got, want) {
		t.Errorf("up = %v, want %v", got, want)
	}
	down, _ := m.Tensor("blk.0.ffn_down_exps.weight")
	if !slices.Equal(down.Shape, []uint64{2, 2, 2}) {
		t.Errorf("down shape %v", down.Shape)
	}
	if got := readAll(t, m, "blk.0.ffn_down_exps.weight"); !equalF32(got, src.t["model.layers.0.mlp.experts.down_proj"].data) {
		t.Errorf("down = %v", got)
	}
	// All sources F32: auto picks F16.
	if m.OutType != OutF16 {
		t.Errorf("outtype %s, want f16", m.OutType)
	}
}

func itoa(i int) string { return string(rune('0' + i)) }
