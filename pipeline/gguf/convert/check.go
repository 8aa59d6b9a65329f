package convert

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
)

// hfFields maps a GGUF hyper-parameter (without the architecture prefix) to the config.json fields it is
// converted from, so a refusal names the field the user can fix.
var hfFields = map[string][]string{
	"block_count":                          {"num_hidden_layers", "mtp_num_hidden_layers"},
	"nextn_predict_layers":                 {"mtp_num_hidden_layers"},
	"context_length":                       {"max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"},
	"embedding_length":                     {"hidden_size", "n_embd", "dim"},
	"feed_forward_length":                  {"intermediate_size", "n_inner", "hidden_dim"},
	"attention.head_count":                 {"num_attention_heads", "n_head", "n_heads"},
	"attention.head_count_kv":              {"num_key_value_heads", "n_kv_heads"},
	"attention.key_length":                 {"head_dim"},
	"attention.value_length":               {"head_dim"},
	"attention.layer_norm_rms_epsilon":     {"rms_norm_eps", "norm_eps"},
	"rope.freq_base":                       {"rope_theta", "rope_parameters", "rope_scaling"},
	"rope.dimension_count":                 {"partial_rotary_factor", "head_dim"},
	"rope.dimension_sections":              {"rope_parameters", "rope_scaling"},
	"rope.scaling.type":                    {"rope_parameters", "rope_scaling"},
	"rope.scaling.factor":                  {"rope_parameters", "rope_scaling"},
	"rope.scaling.original_context_length": {"rope_parameters", "rope_scaling"},
	"expert_count":                         {"num_experts", "num_local_experts"},
	"expert_used_count":                    {"num_experts_per_tok", "num_experts_per_token", "top_k_experts"},
	"expert_feed_forward_length":           {"moe_intermediate_size"},
	"expert_shared_feed_forward_length":    {"shared_expert_intermediate_size"},
	"expert_group_count":                   {"n_group"},
	"expert_group_used_count":              {"topk_group"},
	"ssm.conv_kernel":                      {"linear_conv_kernel_dim"},
	"ssm.state_size":                       {"linear_key_head_dim"},
	"ssm.group_count":                      {"linear_num_key_heads"},
	"ssm.time_step_rank":                   {"linear_num_value_heads"},
	"ssm.inner_size":                       {"linear_value_head_dim", "linear_num_value_heads"},
	"full_attention_interval":              {"full_attention_interval", "layer_types"},
}

// check runs package modelcheck on the planned output: a checkpoint whose config.json disagrees with its
// tensors (num_key_value_heads: 0, a head count that does not match q_proj, ...) would otherwise become a GGUF
// that no engine loads — llama.cpp refuses it and Ollama's engine aborts in ggml. The error names the
// config.json field (or the checkpoint tensor) behind the first problem.
func (m *Model) check(h *hparams) error {
	pm := modelcheck.Model{Name: m.Dir, KVs: m.KVs, Tensors: make([]gguf.TensorInfo, len(m.Tensors))}
	for i, t := range m.Tensors {
		pm.Tensors[i] = gguf.TensorInfo{Name: t.Name, Type: t.Type, Shape: t.Shape}
	}
	err := modelcheck.Check(pm, modelcheck.Options{})
	var me *modelcheck.Error
	if !errors.As(err, &me) {
		return err
	}
	p := me.Problems[0]
	msg := "the converted GGUF would not load: " + p.String()
	if t, ok := m.Tensor(p.Tensor); ok && len(t.Sources) > 0 {
		msg += fmt.Sprintf(" (converted from checkpoint tensor %q)", t.Sources[0])
	}
	if n := len(me.Problems) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more problems)", n)
	}
	if p.Unsupported {
		return &UnsupportedError{File: h.file, What: strings.TrimPrefix(msg, "the converted GGUF would not load: ")}
	}
	switch {
	case p.Tensor != "":
		return &ConfigError{File: h.file, Msg: msg}
	case strings.HasPrefix(p.Key, "tokenizer."):
		return &ConfigError{File: filepath.Join(m.Dir, "tokenizer.json"), Msg: msg}
	case p.Key != "":
		suffix := strings.TrimPrefix(p.Key, m.Arch+".")
		if f, ok := h.find(hfFields[suffix]...); ok {
			return &ConfigError{File: h.file, Field: h.field(f), Msg: msg}
		}
	}
	return &ConfigError{File: h.file, Msg: msg}
}
