package convert

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

func qwen2Cfg() map[string]any {
	return map[string]any{
		"architectures": []any{"Qwen2ForCausalLM"}, "hidden_size": 2, "num_hidden_layers": 1,
		"num_attention_heads": 1, "num_key_value_heads": 1, "intermediate_size": 4, "vocab_size": 8,
		"rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 32768, "rope_scaling": nil,
		"bos_token_id": 6, "eos_token_id": 7,
	}
}

func qwen2Fake(dtype string) *fakeSource {
	f := newFake()
	f.add("lm_head.weight", "F32", []int64{8, 2}, nil)
	f.add("model.embed_tokens.weight", dtype, []int64{8, 2}, nil)
	f.add("model.layers.0.self_attn.q_proj.weight", dtype, []int64{2, 2}, nil)
	f.add("model.layers.0.self_attn.q_proj.bias", dtype, []int64{2}, []float32{1, 2})
	f.add("model.layers.0.input_layernorm.weight", dtype, []int64{2}, []float32{1, 2})
	f.add("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", []int64{1}, nil)
	f.add("model.norm.weight", dtype, []int64{2}, []float32{1, 2})
	return f
}

func TestQwen2TypesAndNames(t *testing.T) {
	src := qwen2Fake("BF16")
	m := loadFake(t, qwen2Cfg(), qwen2Regex, src, Options{})
	if src.reads != 0 {
		t.Errorf("Load read tensor data %d times", src.reads)
	}
	want := map[string]gguf.Type{
		"output.weight":          gguf.TypeBF16, // F32 source, but auto found bf16 2-D tensors
		"token_embd.weight":      gguf.TypeBF16,
		"blk.0.attn_q.weight":    gguf.TypeBF16,
		"blk.0.attn_q.bias":      gguf.TypeF32,
		"blk.0.attn_norm.weight": gguf.TypeF32,
		"output_norm.weight":     gguf.TypeF32,
	}
	if len(m.Tensors) != len(want) {
		t.Errorf("tensors %v", tensorNames(m))
	}
	for n, typ := range want {
		tt, ok := m.Tensor(n)
		if !ok {
			t.Errorf("missing %s", n)
			continue
		}
		if tt.Type != typ {
			t.Errorf("%s type %s, want %s", n, tt.Type, typ)
		}
	}
	// Qwen2 has no zero-centred norms.
	if got := readAll(t, m, "output_norm.weight"); !equalF32(got, []float32{1, 2}) {
		t.Errorf("output_norm = %v", got)
	}
	for k, v := range map[string]string{
		"qwen2.rope.freq_base": "1e+06", "qwen2.context_length": "32768", "general.file_type": "32",
		"tokenizer.ggml.bos_token_id": "6", "tokenizer.ggml.pre": `"qwen2"`,
	} {
		if got, ok := m.KV(k); !ok || got.String() != v {
			t.Errorf("%s = %v, want %s", k, got, v)
		}
	}
	if _, ok := m.KV("qwen2.attention.key_length"); ok {
		t.Error("qwen2 without head_dim must not write key_length")
	}
	if _, ok := m.Tensor("blk.0.rotary_emb.inv_freq"); ok || len(m.Dropped) != 1 {
		t.Errorf("inv_freq not dropped: %v", m.Dropped)
	}
}

func TestOutTypes(t *testing.T) {
	for _, tc := range []struct {
		dtype string
		ot    OutType
		want  gguf.Type
		ftype string
	}{
		{"BF16", "", gguf.TypeBF16, "32"},
		{"F16", OutAuto, gguf.TypeF16, "1"},
		{"F32", "", gguf.TypeF16, "1"}, // nothing 16-bit: upstream defaults to f16
		{"BF16", OutF32, gguf.TypeF32, "0"},
		{"BF16", OutF16, gguf.TypeF16, "1"},
		{"F16", OutBF16, gguf.TypeBF16, "32"},
	} {
		m := loadFake(t, qwen2Cfg(), qwen2Regex, qwen2Fake(tc.dtype), Options{OutType: tc.ot})
		tt, _ := m.Tensor("blk.0.attn_q.weight")
		if tt.Type != tc.want {
			t.Errorf("%s in, outtype %q: attn_q %s, want %s", tc.dtype, tc.ot, tt.Type, tc.want)
		}
		if v, _ := m.KV("general.file_type"); v.String() != tc.ftype {
			t.Errorf("%s in, outtype %q: file_type %s, want %s", tc.dtype, tc.ot, v, tc.ftype)
		}
		if b, _ := m.Tensor("blk.0.attn_q.bias"); b.Type != gguf.TypeF32 {
			t.Errorf("bias type %s", b.Type)
		}
	}
	if _, err := ParseOutType("q8_0"); err == nil {
		t.Error("ParseOutType accepted q8_0")
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name   string
		edit   func(cfg map[string]any, src *fakeSource)
		substr []string
		typed  any
	}{
		{"unknown architecture", func(c map[string]any, _ *fakeSource) { c["architectures"] = []any{"LlamaForCausalLM"} },
			[]string{"config.json", "LlamaForCausalLM", "Qwen3_5ForConditionalGeneration"}, &UnsupportedError{}},
		{"no architectures", func(c map[string]any, _ *fakeSource) { delete(c, "architectures") },
			[]string{"config.json", `"architectures"`}, &ConfigError{}},
		{"missing layers", func(c map[string]any, _ *fakeSource) { delete(c, "num_hidden_layers") },
			[]string{"config.json", "n_layers"}, &ConfigError{}},
		{"bad type", func(c map[string]any, _ *fakeSource) { c["hidden_size"] = "wide" },
			[]string{"config.json", `"hidden_size"`}, &ConfigError{}},
		{"unsupported dtype", func(_ map[string]any, s *fakeSource) {
			s.t["model.layers.0.self_attn.q_proj.weight"] = fakeTensor{"F8_E4M3", []int64{2, 2}, make([]float32, 4)}
		}, []string{"F8_E4M3", "q_proj"}, &UnsupportedError{}},
		{"unmappable tensor", func(_ map[string]any, s *fakeSource) {
			s.add("model.layers.0.mystery.weight", "BF16", []int64{2, 2}, nil)
		},
			[]string{"model.layers.0.mystery.weight"}, &UnsupportedError{}},
		{"vocab mismatch", func(c map[string]any, _ *fakeSource) { c["vocab_size"] = 9 },
			[]string{"vocab_size", "token_embd"}, &ConfigError{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, src := qwen2Cfg(), qwen2Fake("BF16")
			tc.edit(cfg, src)
			_, err := tryLoadFake(t, cfg, qwen2Regex, src, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			for _, s := range tc.substr {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q lacks %q", msg, s)
				}
			}
			switch tc.typed.(type) {
			case *UnsupportedError:
				var e *UnsupportedError
				if !errors.As(err, &e) {
					t.Errorf("error %T is not an UnsupportedError", err)
				}
			case *ConfigError:
				var e *ConfigError
				if !errors.As(err, &e) {
					t.Errorf("error %T is not a ConfigError", err)
				}
			}
		})
	}
}

// TestRunAtomic checks that a conversion failing half-way leaves neither the output nor a temporary file.
func TestRunAtomic(t *testing.T) {
	dir := modelDir(t, qwen2Cfg(), qwen2Regex)
	src := qwen2Fake("BF16")
	src.fail = "model.norm.weight" // the last tensor
	outDir := t.TempDir()
	out := filepath.Join(outDir, "x.gguf")
	_, err := Run(t.Context(), Options{Model: dir, Out: out, Source: src, partial: true}, pipeline.Discard)
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("err = %v", err)
	}
	if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
	// And a good run writes it, named by default after the model in the output folder.
	src.fail = ""
	res, err := Run(t.Context(), Options{Model: dir, Out: outDir, Source: src, OutType: OutF32, partial: true}, pipeline.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(outDir, "model-F32.gguf"); res.Artifacts[0].Path != want {
		t.Errorf("path %s, want %s", res.Artifacts[0].Path, want)
	}
	f, err := gguf.OpenFile(res.Artifacts[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if res.Tensors != len(f.Tensors) || res.Artifacts[0].Size != f.Size || res.Params != 8*2*2+2*2+2+2+2 {
		t.Errorf("result %+v vs file of %d tensors, %d bytes", res, len(f.Tensors), f.Size)
	}
}

func TestRunCancelled(t *testing.T) {
	dir := modelDir(t, qwen2Cfg(), qwen2Regex)
	ctx, cancel := contextWithCancel(t)
	cancel()
	out := filepath.Join(t.TempDir(), "x.gguf")
	if _, err := Run(ctx, Options{Model: dir, Out: out, Source: qwen2Fake("BF16")}, pipeline.Discard); err == nil {
		t.Fatal("no error")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("output exists after cancel: %v", err)
	}
}

func TestPoolingType(t *testing.T) {
	dir := modelDir(t, qwen2Cfg(), qwen2Regex)
	writeJSON(t, dir, "modules.json", []any{
		map[string]any{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
		map[string]any{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}})
	if err := os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, "1_Pooling"), "config.json", map[string]any{"pooling_mode_lasttoken": true})
	m, err := Load(dir, Options{Source: qwen2Fake("BF16"), partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.KV("qwen2.pooling_type"); !ok || v.String() != "3" {
		t.Errorf("pooling_type = %v %v", v, ok)
	}
}
