package convert

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// quantizationVersion is GGML_QUANT_VERSION (gguf-py constants.py), written as general.quantization_version.
const quantizationVersion = 2

// kvList collects metadata in write order.
type kvList []gguf.KV

func (k *kvList) add(key string, v gguf.Value) { *k = append(*k, gguf.KV{Key: key, Value: v}) }

// optUint32 adds key from the first present HF field, if any.
func (k *kvList) optUint32(h *hparams, key string, fields ...string) error {
	f, ok := h.find(fields...)
	if !ok {
		return nil
	}
	v, _, err := h.uint32(f)
	if err != nil {
		return err
	}
	k.add(key, gguf.Uint32(v))
	return nil
}

// optFloat32 adds key as float32 from the first present HF field, if any.
func (k *kvList) optFloat32(h *hparams, key string, fields ...string) error {
	f, ok := h.find(fields...)
	if !ok {
		return nil
	}
	v, _, err := h.float(f)
	if err != nil {
		return err
	}
	k.add(key, gguf.Float32(float32(v)))
	return nil
}

// findUint returns the first present field of keys as uint32; it fails when none is present.
func (h *hparams) findUint(keys ...string) (uint32, error) {
	f, ok := h.find(keys...)
	if !ok {
		return 0, h.missing(keys...)
	}
	return h.reqUint32(f)
}

// applyDefaults fills in the transformers config defaults of the architecture for absent keys.
func (h *hparams) applyDefaults(d map[string]int64) {
	for k, v := range d {
		if !h.has(k) {
			h.merged[k] = json.Number(strconv.FormatInt(v, 10))
		}
	}
}

// ropeParameters is TextModel.__init__'s rope_parameters: rope_parameters or rope_scaling from the config,
// with rope_theta and rope_type mirrored into it.
func (b *builder) ropeParameters() (map[string]any, error) {
	h := b.h
	rp := map[string]any{}
	src, present := h.merged["rope_parameters"]
	if !present {
		src = h.merged["rope_scaling"]
	}
	if src != nil {
		m, ok := src.(map[string]any)
		if !ok {
			return nil, h.errf("rope_parameters", "not a JSON object")
		}
		for k, v := range m {
			rp[k] = v
		}
	}
	_, full := rp["full_attention"]
	_, sliding := rp["sliding_attention"]
	if !full && !sliding {
		if f, ok := h.find("local_rope_theta", "rope_local_theta", "rope_theta_local", "swa_rope_theta", "rope_local_base_freq"); ok {
			rp["sliding_attention"] = map[string]any{"rope_theta": h.merged[f]}
		}
		if _, ok := rp["rope_theta"]; !ok {
			if f, ok := h.find("global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"); ok {
				rp["rope_theta"] = h.merged[f]
			}
		}
		if _, ok := rp["rope_type"]; !ok {
			if t, ok := rp["type"]; ok && t != nil {
				rp["rope_type"] = t
			}
		}
	}
	return rp, nil
}

// kvs builds the metadata before the tokenizer: general.*, TextModel.set_gguf_parameters, the architecture's
// additions, general.quantization_version.
func (b *builder) kvs(name string) ([]gguf.KV, error) {
	h := b.h
	arch := b.spec.name
	p := arch + "."
	var k kvList
	k.add("general.architecture", gguf.String(arch))
	k.add("general.type", gguf.String("model"))
	k.add("general.name", gguf.String(name))

	k.add(p+"block_count", gguf.Uint32(uint32(b.blocks)))
	// upstream reads these with optional=True, but llama.cpp cannot load a Qwen file without them
	// (gguf-quant-convert.md §10.2): a config that lacks one is an error here, not a file that fails on the phone.
	for _, req := range [][]string{{"hidden_size", "n_embd", "dim"}, {"num_attention_heads", "n_head", "n_heads"},
		{"rms_norm_eps", "norm_eps"}} {
		if _, ok := h.find(req...); !ok {
			return nil, h.missing(req...)
		}
	}
	if err := k.optUint32(h, p+"context_length", "max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"); err != nil {
		return nil, err
	}
	if err := k.optUint32(h, p+"embedding_length", "hidden_size", "n_embd", "dim"); err != nil {
		return nil, err
	}
	if err := k.optUint32(h, p+"feed_forward_length", "intermediate_size", "n_inner", "hidden_dim"); err != nil {
		return nil, err
	}
	if err := k.optUint32(h, p+"attention.head_count", "num_attention_heads", "n_head", "n_heads"); err != nil {
		return nil, err
	}
	if err := k.optUint32(h, p+"attention.head_count_kv", "num_key_value_heads", "n_kv_heads"); err != nil {
		return nil, err
	}
	if c, ok := h.merged["is_causal"].(bool); ok && !c {
		k.add(p+"attention.causal", gguf.Bool(false))
	}

	rp := b.rope
	params := rp
	if fa, ok := rp["full_attention"].(map[string]any); ok {
		params = fa
	}
	if err := ropeScaling(h, &k, p, params); err != nil {
		return nil, err
	}
	if ms, ok := rp["mrope_section"]; ok {
		sec, err := int32List(ms)
		if err != nil {
			return nil, h.errf("rope_parameters", "mrope_section: %v", err)
		}
		for len(sec) < 4 {
			sec = append(sec, 0)
		}
		k.add(p+"rope.dimension_sections", gguf.Int32s(sec[:4]))
	}
	if th, ok := params["rope_theta"]; ok && th != nil {
		f, err := jsonFloat(th)
		if err != nil {
			return nil, h.errf("rope_theta", "%v", err)
		}
		k.add(p+"rope.freq_base", gguf.Float32(float32(f)))
	}
	if sw, ok := rp["sliding_attention"].(map[string]any); ok {
		if th, ok := sw["rope_theta"]; ok && th != nil {
			f, err := jsonFloat(th)
			if err != nil {
				return nil, h.errf("rope_parameters", "sliding_attention.rope_theta: %v", err)
			}
			k.add(p+"rope.freq_base_swa", gguf.Float32(float32(f)))
		}
	}
	if err := k.optFloat32(h, p+"attention.layer_norm_rms_epsilon", "rms_norm_eps", "norm_eps"); err != nil {
		return nil, err
	}
	if err := k.optFloat32(h, p+"attention.layer_norm_epsilon", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"); err != nil {
		return nil, err
	}
	if err := k.optUint32(h, p+"expert_count", "num_local_experts", "num_experts"); err != nil {
		return nil, err
	}
	if err := k.optUint32(h, p+"expert_used_count", "num_experts_per_tok", "num_experts_per_token", "top_k_experts"); err != nil {
		return nil, err
	}
	if err := k.optUint32(h, p+"expert_group_count", "n_group"); err != nil {
		return nil, err
	}
	if err := k.optUint32(h, p+"expert_group_used_count", "topk_group"); err != nil {
		return nil, err
	}
	if f, ok := h.find("score_function", "scoring_func", "score_func", "moe_router_activation", "moe_router_activation_func"); ok {
		s, _ := h.str(f)
		switch s {
		case "softmax":
			k.add(p+"expert_gating_func", gguf.Uint32(1)) // ExpertGatingFuncType.SOFTMAX
		case "sigmoid":
			k.add(p+"expert_gating_func", gguf.Uint32(2)) // ExpertGatingFuncType.SIGMOID
		default:
			return nil, h.errf(f, "unsupported expert gating function %v", h.merged[f])
		}
	}
	if h.has("head_dim") {
		v, err := h.reqUint32("head_dim")
		if err != nil {
			return nil, err
		}
		k.add(p+"attention.key_length", gguf.Uint32(v))
		k.add(p+"attention.value_length", gguf.Uint32(v))
	}
	k.add("general.file_type", gguf.Uint32(uint32(b.outType.FileType())))
	if b.spec.extraKVs != nil {
		if err := b.spec.extraKVs(b, &k); err != nil {
			return nil, err
		}
	}
	k.add("general.quantization_version", gguf.Uint32(quantizationVersion))
	return k, nil
}

// ropeScaling writes the rope.scaling.* keys for linear, yarn and longrope (TextModel.set_gguf_parameters);
// other types ("default", "mrope", ...) write nothing.
func ropeScaling(h *hparams, k *kvList, p string, params map[string]any) error {
	rt, _ := params["rope_type"].(string)
	factor, hasFactor := params["factor"]
	f32 := func(name string, x any) (gguf.Value, error) {
		f, err := jsonFloat(x)
		if err != nil {
			return gguf.Value{}, h.errf("rope_parameters", "%s: %v", name, err)
		}
		return gguf.Float32(float32(f)), nil
	}
	switch {
	case rt == "linear" && hasFactor && factor != nil:
		v, err := f32("factor", factor)
		if err != nil {
			return err
		}
		k.add(p+"rope.scaling.type", gguf.String("linear"))
		k.add(p+"rope.scaling.factor", v)
	case rt == "yarn" && hasFactor && factor != nil:
		v, err := f32("factor", factor)
		if err != nil {
			return err
		}
		k.add(p+"rope.scaling.type", gguf.String("yarn"))
		k.add(p+"rope.scaling.factor", v)
		orig, ok := params["original_max_position_embeddings"]
		if !ok {
			return h.errf("rope_parameters", "yarn scaling without original_max_position_embeddings")
		}
		n, err := jsonInt(orig)
		if err != nil || n < 0 || n > math.MaxUint32 {
			return h.errf("rope_parameters", "original_max_position_embeddings: %v", orig)
		}
		k.add(p+"rope.scaling.original_context_length", gguf.Uint32(uint32(n)))
		for _, e := range []struct{ key, a, b string }{
			{"rope.scaling.yarn_ext_factor", "extrapolation_factor", ""},
			{"rope.scaling.yarn_attn_factor", "attention_factor", "attn_factor"},
			{"rope.scaling.yarn_beta_fast", "beta_fast", ""},
			{"rope.scaling.yarn_beta_slow", "beta_slow", ""},
		} {
			x, ok := params[e.a]
			if !ok && e.b != "" {
				x, ok = params[e.b]
			}
			if !ok || x == nil {
				continue
			}
			v, err := f32(e.a, x)
			if err != nil {
				return err
			}
			k.add(p+e.key, v)
		}
	case rt == "su" || rt == "longrope":
		k.add(p+"rope.scaling.type", gguf.String("longrope"))
	}
	return nil
}

func int32List(x any) ([]int32, error) {
	a, ok := x.([]any)
	if !ok {
		return nil, fmt.Errorf("not a list")
	}
	out := make([]int32, 0, len(a))
	for _, e := range a {
		n, err := jsonInt(e)
		if err != nil || n < math.MinInt32 || n > math.MaxInt32 {
			return nil, fmt.Errorf("entry %v is not an int32", e)
		}
		out = append(out, int32(n))
	}
	return out, nil
}
