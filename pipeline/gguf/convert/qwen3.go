package convert

// qwen3: Qwen3ForCausalLM (conversion/qwen.py Qwen3Model, derived from Qwen2Model). Adds the per-head
// q_norm/k_norm (ordinary RMSNorm: no +1) and attention.key_length/value_length from head_dim, which
// transformers' Qwen3Config defaults to 128.
var qwen3Arch = archSpec{
	name:     "qwen3",
	classes:  []string{"Qwen3ForCausalLM"},
	layer:    mergeMaps(denseAttention, qkNorm, denseFFN, map[string]string{"post_attention_layernorm": "ffn_norm"}),
	defaults: map[string]int64{"head_dim": 128},
	setup:    noSetup,
	extraKVs: poolingKVs, // inherited from Qwen2Model.set_gguf_parameters
}

var qkNorm = map[string]string{
	"self_attn.q_norm": "attn_q_norm",
	"self_attn.k_norm": "attn_k_norm",
}
