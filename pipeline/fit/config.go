package fit

import (
	"encoding/json"
	"fmt"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// hfConfig holds the config.json fields the shape needs. Qwen3.5 nests them in text_config; the converter
// merges text_config over the root (gguf-quant-convert.md §4.1), and so does ShapeFromConfig.
type hfConfig struct {
	Architectures         []string `json:"architectures"`
	ModelType             string   `json:"model_type"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool    `json:"tie_word_embeddings"`

	// Qwen3.5 gated delta net
	LinearConvKernelDim   int      `json:"linear_conv_kernel_dim"`
	LinearKeyHeadDim      int      `json:"linear_key_head_dim"`
	LinearValueHeadDim    int      `json:"linear_value_head_dim"`
	LinearNumKeyHeads     int      `json:"linear_num_key_heads"`
	LinearNumValueHeads   int      `json:"linear_num_value_heads"`
	FullAttentionInterval int      `json:"full_attention_interval"`
	LayerTypes            []string `json:"layer_types"`

	// MoE
	NumExperts                   int `json:"num_experts"`
	NumExpertsPerTok             int `json:"num_experts_per_tok"`
	MoeIntermediateSize          int `json:"moe_intermediate_size"`
	SharedExpertIntermediateSize int `json:"shared_expert_intermediate_size"`
}

// maxDim bounds every size read from a config so products cannot overflow.
const maxDim = 1 << 20

// ShapeFromConfig builds the shape of the GGUF that phonellm convert would write for a Hugging Face config.json
// (qwen2, qwen3, qwen3moe, qwen35, qwen35moe; BF16 matrices, F32 norms and 1-D tensors; no MTP block), so a model
// can be sized before any weight is downloaded. Quantize the result with [Shape.Quantize]. The tokenizer
// metadata is not in config.json; HeaderBytes is estimated at 40 bytes per vocabulary entry (token, type and
// merge strings of byte-level BPE vocabularies).
func ShapeFromConfig(configJSON []byte) (Shape, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(configJSON, &raw); err != nil {
		return Shape{}, fmt.Errorf("fit: config.json: %w", err)
	}
	var c hfConfig
	if err := json.Unmarshal(configJSON, &c); err != nil {
		return Shape{}, fmt.Errorf("fit: config.json: %w", err)
	}
	if tc, ok := raw["text_config"]; ok && string(tc) != "null" {
		if err := json.Unmarshal(tc, &c); err != nil { // text_config fields override the root's
			return Shape{}, fmt.Errorf("fit: config.json text_config: %w", err)
		}
	}
	arch, err := archOf(c)
	if err != nil {
		return Shape{}, err
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	for name, v := range map[string]int{"vocab_size": c.VocabSize, "hidden_size": c.HiddenSize,
		"num_hidden_layers": c.NumHiddenLayers, "num_attention_heads": c.NumAttentionHeads, "head_dim": c.HeadDim} {
		if v <= 0 || v > maxDim {
			return Shape{}, fmt.Errorf("fit: config.json: %s = %d, want 1..%d", name, v, maxDim)
		}
	}
	if c.NumHiddenLayers > 512 {
		return Shape{}, fmt.Errorf("fit: config.json: num_hidden_layers %d above 512", c.NumHiddenLayers)
	}
	for name, v := range map[string]int{"intermediate_size": c.IntermediateSize, "num_key_value_heads": c.NumKeyValueHeads,
		"linear_conv_kernel_dim": c.LinearConvKernelDim, "linear_key_head_dim": c.LinearKeyHeadDim,
		"linear_value_head_dim": c.LinearValueHeadDim, "linear_num_key_heads": c.LinearNumKeyHeads,
		"linear_num_value_heads": c.LinearNumValueHeads, "num_experts": c.NumExperts,
		"moe_intermediate_size": c.MoeIntermediateSize, "shared_expert_intermediate_size": c.SharedExpertIntermediateSize,
		"num_experts_per_tok": c.NumExpertsPerTok, "full_attention_interval": c.FullAttentionInterval} {
		if v < 0 || v > maxDim {
			return Shape{}, fmt.Errorf("fit: config.json: %s = %d, want 0..%d", name, v, maxDim)
		}
	}
	moe := arch == "qwen3moe" || arch == "qwen35moe"
	if moe && (c.NumExperts == 0 || c.NumExpertsPerTok == 0 || c.MoeIntermediateSize == 0) {
		return Shape{}, fmt.Errorf("fit: config.json: %s needs num_experts, num_experts_per_tok and moe_intermediate_size", arch)
	}
	if !moe && c.IntermediateSize == 0 {
		return Shape{}, fmt.Errorf("fit: config.json: intermediate_size missing")
	}

	tied := false
	if c.TieWordEmbeddings != nil {
		tied = *c.TieWordEmbeddings
	}
	E, V, L := u(c.HiddenSize), u(c.VocabSize), c.NumHiddenLayers
	H, Hkv, hd := u(c.NumAttentionHeads), u(c.NumKeyValueHeads), u(c.HeadDim)
	s := Shape{Name: "config.json", Arch: arch, KV: map[string]any{}, FileType: gguf.FileTypeBF16,
		HeaderBytes: int64(c.VocabSize) * 40}
	kv := func(k string, v any) { s.KV[arch+"."+k] = v }
	s.KV["general.architecture"] = arch
	kv("block_count", uint32(L))
	kv("context_length", uint32(max(c.MaxPositionEmbeddings, 0)))
	kv("embedding_length", uint32(E))
	kv("vocab_size", uint32(V))
	kv("attention.head_count", uint32(H))
	kv("attention.head_count_kv", uint32(Hkv))
	kv("attention.key_length", uint32(hd))
	kv("attention.value_length", uint32(hd))
	if c.IntermediateSize > 0 {
		kv("feed_forward_length", uint32(c.IntermediateSize))
	}
	if moe {
		kv("expert_count", uint32(c.NumExperts))
		kv("expert_used_count", uint32(c.NumExpertsPerTok))
		kv("expert_feed_forward_length", uint32(c.MoeIntermediateSize))
		if c.SharedExpertIntermediateSize > 0 {
			kv("expert_shared_feed_forward_length", uint32(c.SharedExpertIntermediateSize))
		}
	}

	add := func(name string, t gguf.Type, shape ...uint64) {
		s.Tensors = append(s.Tensors, plan.TensorDesc{Name: name, Type: t, Shape: shape})
	}
	bf, f32 := gguf.TypeBF16, gguf.TypeF32
	add("token_embd.weight", bf, E, V)
	add("output_norm.weight", f32, E)
	if !tied {
		add("output.weight", bf, E, V)
	}

	hybrid := arch == "qwen35" || arch == "qwen35moe"
	var full []bool
	if hybrid {
		if full, err = fullLayers(c); err != nil {
			return Shape{}, err
		}
		if c.LinearConvKernelDim == 0 || c.LinearKeyHeadDim == 0 || c.LinearValueHeadDim == 0 ||
			c.LinearNumKeyHeads == 0 || c.LinearNumValueHeads == 0 {
			return Shape{}, fmt.Errorf("fit: config.json: %s needs the linear_* gated delta net fields", arch)
		}
		kv("ssm.conv_kernel", uint32(c.LinearConvKernelDim))
		kv("ssm.state_size", uint32(c.LinearKeyHeadDim))
		kv("ssm.group_count", uint32(c.LinearNumKeyHeads))
		kv("ssm.time_step_rank", uint32(c.LinearNumValueHeads))
		kv("ssm.inner_size", uint32(c.LinearValueHeadDim*c.LinearNumValueHeads))
		interval := c.FullAttentionInterval
		if interval == 0 {
			interval = 4
		}
		kv("full_attention_interval", uint32(interval))
	}
	S, G := u(c.LinearKeyHeadDim), u(c.LinearNumKeyHeads)
	Sv, R := u(c.LinearValueHeadDim), u(c.LinearNumValueHeads)
	for i := range L {
		b := func(n string) string { return fmt.Sprintf("blk.%d.%s", i, n) }
		add(b("attn_norm.weight"), f32, E)
		switch {
		case hybrid && !full[i]:
			C := 2*S*G + Sv*R
			add(b("attn_qkv.weight"), bf, E, C)
			add(b("attn_gate.weight"), bf, E, Sv*R)
			add(b("ssm_conv1d.weight"), f32, u(c.LinearConvKernelDim), C)
			add(b("ssm_dt.bias"), f32, R)
			add(b("ssm_a"), f32, R)
			add(b("ssm_beta.weight"), bf, E, R)
			add(b("ssm_alpha.weight"), bf, E, R)
			add(b("ssm_norm.weight"), f32, Sv)
			add(b("ssm_out.weight"), bf, Sv*R, E)
		case hybrid:
			add(b("attn_q.weight"), bf, E, 2*H*hd) // query and output gate interleaved per head
			add(b("attn_k.weight"), bf, E, Hkv*hd)
			add(b("attn_v.weight"), bf, E, Hkv*hd)
			add(b("attn_output.weight"), bf, H*hd, E)
			add(b("attn_q_norm.weight"), f32, hd)
			add(b("attn_k_norm.weight"), f32, hd)
		default:
			add(b("attn_q.weight"), bf, E, H*hd)
			add(b("attn_k.weight"), bf, E, Hkv*hd)
			add(b("attn_v.weight"), bf, E, Hkv*hd)
			add(b("attn_output.weight"), bf, H*hd, E)
			if arch == "qwen2" {
				add(b("attn_q.bias"), f32, H*hd)
				add(b("attn_k.bias"), f32, Hkv*hd)
				add(b("attn_v.bias"), f32, Hkv*hd)
			} else {
				add(b("attn_q_norm.weight"), f32, hd)
				add(b("attn_k_norm.weight"), f32, hd)
			}
		}
		if hybrid {
			add(b("post_attention_norm.weight"), f32, E)
		} else {
			add(b("ffn_norm.weight"), f32, E)
		}
		if moe {
			X, Fe := u(c.NumExperts), u(c.MoeIntermediateSize)
			router := bf
			if arch == "qwen35moe" {
				router = f32
			}
			add(b("ffn_gate_inp.weight"), router, E, X)
			add(b("ffn_gate_exps.weight"), bf, E, Fe, X)
			add(b("ffn_up_exps.weight"), bf, E, Fe, X)
			add(b("ffn_down_exps.weight"), bf, Fe, E, X)
			if Fs := u(c.SharedExpertIntermediateSize); Fs > 0 {
				add(b("ffn_gate_inp_shexp.weight"), f32, E)
				add(b("ffn_gate_shexp.weight"), bf, E, Fs)
				add(b("ffn_up_shexp.weight"), bf, E, Fs)
				add(b("ffn_down_shexp.weight"), bf, Fs, E)
			}
		} else {
			F := u(c.IntermediateSize)
			add(b("ffn_gate.weight"), bf, E, F)
			add(b("ffn_up.weight"), bf, E, F)
			add(b("ffn_down.weight"), bf, F, E)
		}
	}
	return s, nil
}

func u(v int) uint64 { return uint64(v) }

// archOf maps the config's architectures / model_type to the GGUF architecture the converter writes.
func archOf(c hfConfig) (string, error) {
	names := append([]string{}, c.Architectures...)
	names = append(names, c.ModelType)
	for _, n := range names {
		switch n {
		case "Qwen2ForCausalLM", "qwen2":
			return "qwen2", nil
		case "Qwen3ForCausalLM", "qwen3":
			return "qwen3", nil
		case "Qwen3MoeForCausalLM", "qwen3_moe":
			return "qwen3moe", nil
		case "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "qwen3_5", "qwen3_5_text":
			return "qwen35", nil
		case "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", "qwen3_5_moe_text":
			return "qwen35moe", nil
		}
	}
	return "", &UnsupportedError{What: fmt.Sprintf("config.json architecture %v / model_type %q (supported: Qwen2, Qwen3, Qwen3-MoE, Qwen3.5, Qwen3.5-MoE)",
		c.Architectures, c.ModelType)}
}

// fullLayers marks the full-attention layers of a Qwen3.5 config: layer_types when present, else layer i is
// full attention iff (i+1) % full_attention_interval == 0 (transformers Qwen3_5TextConfig.__post_init__).
func fullLayers(c hfConfig) ([]bool, error) {
	full := make([]bool, c.NumHiddenLayers)
	if len(c.LayerTypes) > 0 {
		if len(c.LayerTypes) != c.NumHiddenLayers {
			return nil, fmt.Errorf("fit: config.json: %d layer_types for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
		}
		for i, t := range c.LayerTypes {
			switch t {
			case "full_attention":
				full[i] = true
			case "linear_attention":
			default:
				return nil, fmt.Errorf("fit: config.json: layer_types[%d] = %q", i, t)
			}
		}
		return full, nil
	}
	interval := c.FullAttentionInterval
	if interval == 0 {
		interval = 4
	}
	for i := range full {
		full[i] = (i+1)%interval == 0
	}
	return full, nil
}
