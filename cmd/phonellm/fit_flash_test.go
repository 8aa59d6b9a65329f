package main

import (
	"strconv"
	"testing"

	"github.com/spf13/cobra"

	"github.com/phonellm/phonellm/pipeline/fit"
)

// TestFitFlashAttentionMatchesServe: fit's goengine estimate for "auto" counts flash attention exactly when
// serve turns it on by default (issue 13 item 8: the goengine's flash attention is slower, so serve leaves it
// off and fit must not count its buffers for a default serve).
func TestFitFlashAttentionMatchesServe(t *testing.T) {
	var f engineFlags
	cmd := &cobra.Command{Use: "serve"}
	f.add(cmd)
	def, err := strconv.ParseBool(cmd.Flags().Lookup("flash-attn").DefValue)
	if err != nil {
		t.Fatal(err)
	}
	if def != fit.GoEngineFlashAttention {
		t.Fatalf("serve --flash-attn defaults to %v, fit.GoEngineFlashAttention is %v", def, fit.GoEngineFlashAttention)
	}
	s, err := fit.ShapeFromConfig([]byte(`{"architectures":["Qwen3ForCausalLM"],"vocab_size":1024,"hidden_size":256,
"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,
"max_position_embeddings":4096}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, fa := range []string{"", "auto"} {
		b, err := fit.EstimateShape(s, fit.Options{Engine: fit.GoEngine, FlashAttention: fa})
		if err != nil {
			t.Fatal(err)
		}
		if b.FlashAttention != def {
			t.Errorf("fit --engine goengine --flash-attn %q counts flash attention %v; serve runs it %v", fa, b.FlashAttention, def)
		}
	}
}
