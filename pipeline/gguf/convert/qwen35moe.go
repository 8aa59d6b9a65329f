package convert

// qwen35moe: Qwen3_5MoeForConditionalGeneration / Qwen3_5MoeForCausalLM, text part (conversion/qwen.py
// Qwen3_5MoeTextModel, same chain as qwen35). Everything of qwen35, with the FFN replaced by routed experts
// (stacked or split as for qwen3moe, see qwen3moe.go) plus one shared expert whose gate
// mlp.shared_expert_gate [1, d] becomes blk.N.ffn_gate_inp_shexp (F32).
var qwen35moeArch = archSpec{
	name:    "qwen35moe",
	classes: []string{"Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"},
	moe:     true, next: true, qwen35: true,
	layer: mergeMaps(denseAttention, qkNorm, linearAttention, nextN, moeFFN, sharedExpert,
		map[string]string{"post_attention_layernorm": "post_attention_norm"}),
	defaults: map[string]int64{"head_dim": 256},
	setup:    qwen35Setup,
	extraKVs: qwen35KVs,
}

var sharedExpert = map[string]string{
	"mlp.shared_expert.gate_proj": "ffn_gate_shexp",
	"mlp.shared_expert.up_proj":   "ffn_up_shexp",
	"mlp.shared_expert.down_proj": "ffn_down_shexp",
	"mlp.shared_expert_gate":      "ffn_gate_inp_shexp",
}
