package convert

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
)

// text is the text_config of a Qwen3.5 config (whose fields win over the root's).
func text(cfg map[string]any) map[string]any { return cfg["text_config"].(map[string]any) }

// editJSON rewrites dir/name through edit.
func editJSON(t *testing.T, dir, name string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	writeJSON(t, dir, name, m)
}

// TestRefusesCheckpointsThatMakeInvalidFiles: convert used to write a GGUF with exit 0 from a config.json that
// disagrees with the tensors (issue 14: num_key_value_heads: 0), which then aborted the engine. The planned
// output is validated now: the conversion fails with an input error naming the field, and writes nothing.
func TestRefusesCheckpointsThatMakeInvalidFiles(t *testing.T) {
	base, ok := tinymodel.Preset("qwen3")
	if !ok {
		t.Fatal("no qwen3 preset")
	}
	base.HiddenSize, base.NumHeads, base.NumKVHeads, base.HeadDim, base.IntermediateSize = 64, 4, 2, 16, 128
	base.VocabSize, base.TokenizerSize = 320, 320
	wide := base
	wide.HeadDim = 512 // 4 heads × 512 = 2048 = 32 × the embedding: consistent tensors, implausible memory
	q35, _ := tinymodel.Preset("qwen35")
	q35.HiddenSize, q35.NumHeads, q35.NumKVHeads, q35.HeadDim, q35.IntermediateSize = 64, 4, 2, 16, 128
	q35.LinearKeyHeadDim, q35.LinearValueHeadDim, q35.MRoPESection, q35.PartialRotaryFactor = 16, 16, []int{2, 1, 1}, 0.5
	q35.VocabSize, q35.TokenizerSize, q35.MTPLayers, q35.Vision, q35.MaxShardBytes = 320, 320, 0, false, 0
	for _, tc := range []struct {
		name  string
		spec  tinymodel.Spec
		edit  func(cfg map[string]any)
		field string // the field the error must name
		want  string // and a piece of its message
	}{
		{"num_key_value_heads 0", base, func(c map[string]any) { c["num_key_value_heads"] = 0 }, "num_key_value_heads", "head_count_kv"},
		{"num_key_value_heads 3", base, func(c map[string]any) { c["num_key_value_heads"] = 3 }, "num_attention_heads", "not a multiple"},
		{"num_attention_heads 8", base, func(c map[string]any) { c["num_attention_heads"] = 8 }, "", `model.layers.0.self_attn.q_proj.weight`},
		{"head_dim 12", base, func(c map[string]any) { c["head_dim"] = 12 }, "", "attn_q.weight"},
		{"rms_norm_eps negative", base, func(c map[string]any) { c["rms_norm_eps"] = -1e-6 }, "rms_norm_eps", "negative"},
		{"rope_theta 0", base, func(c map[string]any) { c["rope_theta"] = 0 }, "rope_theta", "above 1"},
		{"intermediate_size", base, func(c map[string]any) { c["intermediate_size"] = 96 }, "", "ffn_gate.weight"},
		{"heads 32x wider than the embedding", wide, func(map[string]any) {}, "head_dim", "more than 16× embedding_length"},
		{"linear_num_value_heads", q35, func(c map[string]any) { text(c)["linear_num_value_heads"] = 3 }, "text_config.linear_num_value_heads", "not a multiple"},
		{"full_attention_interval 1", q35, func(c map[string]any) { text(c)["full_attention_interval"] = 1 }, "text_config.full_attention_interval", "full_attention_interval"},
		{"num_key_value_heads 0 (qwen35)", q35, func(c map[string]any) { text(c)["num_key_value_heads"] = 0 }, "text_config.num_key_value_heads", "head_count_kv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := generate(t, tc.spec)
			editJSON(t, dir, "config.json", tc.edit)
			out := filepath.Join(t.TempDir(), "out")
			os.MkdirAll(out, 0o755)
			_, err := Run(t.Context(), Options{Model: dir, Out: filepath.Join(out, "m.gguf")}, pipeline.Discard)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err %v (%T), want a ConfigError", err, err)
			}
			if ce.Field != tc.field || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "config.json") {
				t.Errorf("err %q: want field %q and %q", err, tc.field, tc.want)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("left %v", ents)
			}
		})
	}
	// The unedited checkpoints convert.
	for _, spec := range []tinymodel.Spec{base, q35} {
		dir := generate(t, spec)
		if _, err := Run(t.Context(), Options{Model: dir, Out: filepath.Join(t.TempDir(), "m.gguf")}, pipeline.Discard); err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
	}
}
