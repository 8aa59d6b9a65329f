package goengine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/hostile"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
)

// TestLoadRefusesHostileFiles covers issue 14's files that reached ggml before: each aborted the process
// (GGML_ASSERT in ggml_reshape or ggml_can_mul_mat), panicked while loading or on the first request, or turned
// every logit into NaN. They must be refused at load with a one-line input error naming the key or tensor.
// (internal/testkit/hostile runs the whole corpus through the CLI; these run in process.)
func TestLoadRefusesHostileFiles(t *testing.T) {
	dir := t.TempDir()
	all, err := hostile.Corpus(context.Background(), filepath.Join(dir, "corpus"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]hostile.Mutant{}
	for _, m := range all {
		byName[m.Name] = m
	}
	for _, tc := range []struct {
		mutant, want string
	}{
		{"qwen3-f16/hparams/attention.head_count 3", "qwen3.attention.head_count: 3 is not a multiple of attention.head_count_kv 2"},
		{"qwen3-f16/hparams/attention.head_count 5", "attention.head_count"},
		{"qwen3-f16/shapes/blk.0.ffn_up.weight transposed", "tensor blk.0.ffn_up.weight: shape [128 64], want [64 128] = {embedding_length, feed_forward_length}; it is transposed"},
		{"qwen3-f16/vocab/40 tokens more than embedding rows", "more than the 304 rows of token_embd.weight"},
		{"qwen3-f16/hparams/rope.freq_base NaN", "rope.freq_base"},
		{"qwen35-f16/hparams/attention.layer_norm_rms_epsilon -1", "layer_norm_rms_epsilon"},
		{"qwen3-f16/hparams/attention.head_count_kv 0", "attention.head_count_kv"},
		{"qwen2-f32/shapes/extra layer past block_count", "layer 2 is beyond block_count 2"},
		{"qwen35-f16/hparams/rope.dimension_count 7", "rope.dimension_count"},
		{"qwen35-f16/hparams/rope.dimension_sections [0 0 0 4]", "rope.dimension_sections"},
		{"qwen35-f16/shapes/blk.0.ssm_conv1d.weight as F16", "ssm_conv1d"},
		{"qwen3-f16/data/NaN in output_norm.weight", "output_norm.weight"},
		{"qwen3-f16/templates/syntax error", "tokenizer.chat_template"},
		{"qwen35-mtp-f32/control/unchanged", "multi-token-prediction"},
	} {
		t.Run(tc.mutant, func(t *testing.T) {
			m, ok := byName[tc.mutant]
			if !ok {
				t.Fatalf("no mutant %q", tc.mutant)
			}
			path := filepath.Join(dir, hostile.FileName(m))
			if err := m.Write(path); err != nil {
				t.Fatal(err)
			}
			e, err := Load(context.Background(), Options{Path: path, Threads: 1})
			if err == nil {
				e.Close()
				t.Fatal("loaded")
			}
			var me *modelcheck.Error
			if !errors.As(err, &me) || !me.InputError() || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err %v, want a one-line input error mentioning %q", err, tc.want)
			}
		})
	}
}

// TestQuantizedCacheNeedsWholeBlocks: a q8_0 KV cache stores key rows in 32-element blocks; 16-wide heads made
// ggml assert when the cache was allocated. (A quantized cache needs flash attention, which Options.Validate
// checks first: without it Ollama's engine keeps V transposed, which a block-quantized tensor cannot hold.)
func TestQuantizedCacheNeedsWholeBlocks(t *testing.T) {
	dir := t.TempDir()
	path := writeTinyGGUF(t, dir, tinySpec{arch: "qwen3", seed: 69})
	_, err := Load(context.Background(), Options{Path: path, Threads: 1, KVCacheType: "q8_0", FlashAttention: true})
	var me *modelcheck.Error
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "q8_0") {
		t.Fatalf("q8_0 cache with 16-wide heads: %v", err)
	}
	if e, err := Load(context.Background(), Options{Path: writeTinyGGUF(t, dir, tinySpec{arch: "qwen3", seed: 70, headDim: 32, heads: 2, kvHeads: 1}), Threads: 1, KVCacheType: "q8_0", FlashAttention: true}); err != nil {
		t.Fatalf("q8_0 cache with 32-wide heads: %v", err)
	} else {
		e.Close()
	}
}
