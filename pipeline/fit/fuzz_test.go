package fit

import (
	"bytes"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

const qwen35Tiny = `{"architectures":["Qwen3_5ForCausalLM"],"vocab_size":64,"hidden_size":32,"intermediate_size":64,
"num_hidden_layers":4,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":32,"max_position_embeddings":256,
"linear_conv_kernel_dim":4,"linear_key_head_dim":32,"linear_value_head_dim":32,"linear_num_key_heads":1,
"linear_num_value_heads":2,"tie_word_embeddings":true}`

// FuzzEstimate feeds arbitrary bytes through the GGUF reader into the estimate: no panic, no negative parts.
func FuzzEstimate(f *testing.F) {
	s, err := ShapeFromConfig([]byte(qwen35Tiny))
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	encodeShape(f, &buf, s)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Open(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			return
		}
		b, err := Estimate(g, Options{Ctx: 1 << 20, Parallel: 256, UBatch: 4096})
		if err != nil {
			return
		}
		for _, p := range []int64{b.Weights, b.KVCache, b.Recurrent, b.Checkpoints, b.Compute, b.Output, b.Overhead} {
			if p < 0 || p > b.Total {
				t.Fatalf("part %d out of [0, total %d]: %+v", p, b.Total, b)
			}
		}
	})
}

func FuzzShapeFromConfig(f *testing.F) {
	f.Add([]byte(qwen3Config))
	f.Add([]byte(qwen3MoEConfig))
	if data, err := knownFS.ReadFile("known/qwen3.5-0.8b.json"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ShapeFromConfig(data)
		if err != nil {
			return
		}
		if _, err := s.WeightBytes(); err != nil {
			return
		}
		_, _ = EstimateShape(s, Options{Ctx: 256})
	})
}

func FuzzParseProfiles(f *testing.F) {
	f.Add(builtinJSON)
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParseProfiles(data)
		if err != nil {
			return
		}
		for _, p := range ps {
			if p.Name == "" || p.UsableBytes <= 0 {
				t.Fatalf("invalid profile accepted: %+v", p)
			}
		}
	})
}
