package convert

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// qwen2: Qwen2ForCausalLM (conversion/qwen.py Qwen2Model, a plain TextModel). Attention q/k/v have biases
// (written F32), no norm transforms, no permutation.
var qwen2Arch = archSpec{
	name:     "qwen2",
	classes:  []string{"Qwen2ForCausalLM"},
	layer:    mergeMaps(denseAttention, denseFFN, map[string]string{"post_attention_layernorm": "ffn_norm"}),
	setup:    noSetup,
	extraKVs: poolingKVs,
}

// denseAttention and denseFFN are the per-block names every Qwen architecture shares.
var (
	denseAttention = map[string]string{
		"input_layernorm":  "attn_norm",
		"self_attn.q_proj": "attn_q",
		"self_attn.k_proj": "attn_k",
		"self_attn.v_proj": "attn_v",
		"self_attn.o_proj": "attn_output",
	}
	denseFFN = map[string]string{
		"mlp.gate_proj": "ffn_gate",
		"mlp.up_proj":   "ffn_up",
		"mlp.down_proj": "ffn_down",
	}
)

// poolingKVs is Qwen2Model._try_set_pooling_type: sentence-transformers checkpoints (modules.json with a
// Pooling module) get {arch}.pooling_type (gguf-py PoolingType: MEAN 1, CLS 2, LAST 3).
func poolingKVs(b *builder, k *kvList) error {
	path := filepath.Join(b.dir, "modules.json")
	var mods []map[string]any
	if err := readJSON(path, maxConfigBytes, &mods); err != nil {
		if isNotExist(err) {
			return nil
		}
		return err
	}
	sub := ""
	for _, m := range mods {
		if typ, _ := m["type"].(string); strings.HasSuffix(typ, "Pooling") {
			sub, _ = m["path"].(string)
			break
		}
	}
	if sub == "" {
		return nil
	}
	if !filepath.IsLocal(sub) {
		return &ConfigError{File: path, Field: "path", Msg: fmt.Sprintf("pooling module path %q leaves the model directory", sub)}
	}
	cfgPath := filepath.Join(b.dir, sub, "config.json")
	var p map[string]any
	if err := readJSON(cfgPath, maxConfigBytes, &p); err != nil {
		return err
	}
	truthy := func(key string) bool { v, _ := p[key].(bool); return v }
	var v uint32
	switch mode, _ := p["pooling_mode"].(string); {
	case truthy("pooling_mode_mean_tokens"):
		v = 1
	case truthy("pooling_mode_cls_token"):
		v = 2
	case truthy("pooling_mode_lasttoken"):
		v = 3
	case mode == "mean":
		v = 1
	case mode == "cls":
		v = 2
	case mode == "lasttoken":
		v = 3
	default:
		return &UnsupportedError{File: cfgPath, What: "pooling mode (only MEAN, CLS and LAST are supported)"}
	}
	k.add(b.spec.name+".pooling_type", gguf.Uint32(v))
	return nil
}
