package convert

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// qwen35Cfg is a tiny Qwen3_5ForConditionalGeneration config: hidden 2, 4 layers (3 linear + 1 full),
// K heads kh × dim 1, V heads vh × dim 2, conv kernel 2.
func qwen35Cfg(kh, vh int) map[string]any {
	text := map[string]any{
		"hidden_size": 2, "num_hidden_layers": 4, "num_attention_heads": 1, "num_key_value_heads": 1,
		"head_dim": 4, "intermediate_size": 4, "vocab_size": 8, "rms_norm_eps": 1e-6,
		"max_position_embeddings": 64, "linear_num_key_heads": kh, "linear_num_value_heads": vh,
		"linear_key_head_dim": 1, "linear_value_head_dim": 2, "linear_conv_kernel_dim": 2,
		"full_attention_interval": 4, "mtp_num_hidden_layers": 1, "eos_token_id": 6,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
			"mrope_section": []any{1, 1, 0}},
	}
	return map[string]any{
		"architectures":       []any{"Qwen3_5ForConditionalGeneration"},
		"hidden_size":         999, // the text_config value must win
		"text_config":         text,
		"vision_config":       map[string]any{"depth": 1},
		"tie_word_embeddings": true,
	}
}

const lm = "model.language_model."

// qwen35Fake has the embedding and one linear-attention layer 0, with K heads kh, V heads vh.
func qwen35Fake(kh, vh int64) *fakeSource {
	f := newFake()
	f.add(lm+"embed_tokens.weight", "BF16", []int64{8, 2}, nil)
	qk := 2 * kh
	f.add(lm+"layers.0.linear_attn.in_proj_qkv.weight", "BF16", []int64{qk + 2*vh, 2}, nil)
	f.add(lm+"layers.0.linear_attn.in_proj_z.weight", "BF16", []int64{2 * vh, 2}, nil)
	f.add(lm+"layers.0.linear_attn.in_proj_b.weight", "BF16", []int64{vh, 2}, nil)
	f.add(lm+"layers.0.linear_attn.in_proj_a.weight", "BF16", []int64{vh, 2}, nil)
	f.add(lm+"layers.0.linear_attn.out_proj.weight", "BF16", []int64{2, 2 * vh}, nil)
	f.add(lm+"layers.0.linear_attn.conv1d.weight", "BF16", []int64{qk + 2*vh, 1, 2}, nil)
	f.add(lm+"layers.0.linear_attn.A_log", "F32", []int64{vh}, seq(int(vh), func(i int) float32 { return float32(i) / 4 }))
	f.add(lm+"layers.0.linear_attn.dt_bias", "F32", []int64{vh}, nil)
	f.add(lm+"layers.0.linear_attn.norm.weight", "F32", []int64{2}, []float32{0.5, -0.25})
	f.add(lm+"layers.0.input_layernorm.weight", "BF16", []int64{2}, []float32{0.5, -0.25})
	f.add(lm+"layers.0.post_attention_layernorm.weight", "BF16", []int64{2}, []float32{0, 1})
	f.add(lm+"layers.3.self_attn.q_norm.weight", "BF16", []int64{4}, []float32{0, 1, 2, -1})
	f.add(lm+"norm.weight", "BF16", []int64{2}, []float32{-1, 0})
	return f
}

// tiled reorders blocks from grouped-by-K-head order to tiled order with explicit loops: for each V index v,
// for each K head k, the block k·r+v.
func tiled(blocks [][]float32, kh, r int) []float32 {
	var out []float32
	for v := 0; v < r; v++ {
		for k := 0; k < kh; k++ {
			out = append(out, blocks[k*r+v]...)
		}
	}
	return out
}

func chunks(x []float32, size int) [][]float32 {
	var out [][]float32
	for i := 0; i < len(x); i += size {
		out = append(out, x[i:i+size])
	}
	return out
}

func TestReorderGoldenVector(t *testing.T) {
	// ollama convert_qwen3next_test.go: Kh=2, Vh=4, rows of width 2 [0,1|2,3|4,5|6,7] → [0,1,4,5,2,3,6,7].
	m := loadFake(t, qwen35Cfg(2, 4), qwen35Regex, qwen35Fake(2, 4), Options{})
	got := readAll(t, m, "blk.0.ssm_beta.weight")
	if want := []float32{0, 1, 4, 5, 2, 3, 6, 7}; !equalF32(got, want) {
		t.Fatalf("ssm_beta = %v, want %v", got, want)
	}
	if got := readAll(t, m, "blk.0.ssm_alpha.weight"); !equalF32(got, []float32{0, 1, 4, 5, 2, 3, 6, 7}) {
		t.Fatalf("ssm_alpha = %v", got)
	}
}

func TestReorderTransforms(t *testing.T) {
	const kh, vh, r, dv, d = 2, 4, 2, 2, 2
	src := qwen35Fake(kh, vh)
	m := loadFake(t, qwen35Cfg(kh, vh), qwen35Regex, src, Options{})
	val := func(name string) []float32 { return src.t[lm+name].data }

	// attn_qkv: the 2·kh·dk = 4 q/k rows stay, the V rows (blocks of dv rows) are tiled.
	qkv := val("layers.0.linear_attn.in_proj_qkv.weight")
	want := append(slices.Clone(qkv[:4*d]), tiled(chunks(qkv[4*d:], dv*d), kh, r)...)
	if got := readAll(t, m, "blk.0.attn_qkv.weight"); !equalF32(got, want) {
		t.Errorf("attn_qkv = %v, want %v", got, want)
	}
	// attn_gate: all rows, blocks of dv rows.
	z := val("layers.0.linear_attn.in_proj_z.weight")
	if got, want := readAll(t, m, "blk.0.attn_gate.weight"), tiled(chunks(z, dv*d), kh, r); !equalF32(got, want) {
		t.Errorf("attn_gate = %v, want %v", got, want)
	}
	// ssm_out: columns, blocks of dv columns, in every row.
	o := val("layers.0.linear_attn.out_proj.weight")
	var wantOut []float32
	for _, row := range chunks(o, vh*dv) {
		wantOut = append(wantOut, tiled(chunks(row, dv), kh, r)...)
	}
	if got := readAll(t, m, "blk.0.ssm_out.weight"); !equalF32(got, wantOut) {
		t.Errorf("ssm_out = %v, want %v", got, wantOut)
	}
	// conv1d: squeezed [C,1,K] → ne {K, C}, F32; V channels tiled.
	c := val("layers.0.linear_attn.conv1d.weight")
	wantConv := append(slices.Clone(c[:4*2]), tiled(chunks(c[4*2:], dv*2), kh, r)...)
	if got := readAll(t, m, "blk.0.ssm_conv1d.weight"); !equalF32(got, wantConv) {
		t.Errorf("ssm_conv1d = %v, want %v", got, wantConv)
	}
	conv, _ := m.Tensor("blk.0.ssm_conv1d.weight")
	if !slices.Equal(conv.Shape, []uint64{2, 4 + vh*dv}) || conv.Type != gguf.TypeF32 {
		t.Errorf("ssm_conv1d shape %v type %s, want [2 %d] F32", conv.Shape, conv.Type, 4+vh*dv)
	}
	// ssm_a: reorder (head dim 1), then -exp.
	a := val("layers.0.linear_attn.A_log")
	var wantA []float32
	for _, x := range tiled(chunks(a, 1), kh, r) {
		wantA = append(wantA, float32(-math.Exp(float64(x))))
	}
	if got := readAll(t, m, "blk.0.ssm_a"); !equalF32(got, wantA) {
		t.Errorf("ssm_a = %v, want %v", got, wantA)
	}
	// ssm_dt.bias: renamed from dt_bias and reordered.
	if got, want := readAll(t, m, "blk.0.ssm_dt.bias"), tiled(chunks(val("layers.0.linear_attn.dt_bias"), 1), kh, r); !equalF32(got, want) {
		t.Errorf("ssm_dt.bias = %v, want %v", got, want)
	}
}

func TestNoReorderWhenHeadsEqual(t *testing.T) {
	src := qwen35Fake(2, 2)
	m := loadFake(t, qwen35Cfg(2, 2), qwen35Regex, src, Options{})
	for hf, g := range map[string]string{
		"layers.0.linear_attn.in_proj_qkv.weight": "blk.0.attn_qkv.weight",
		"layers.0.linear_attn.in_proj_z.weight":   "blk.0.attn_gate.weight",
		"layers.0.linear_attn.out_proj.weight":    "blk.0.ssm_out.weight",
		"layers.0.linear_attn.conv1d.weight":      "blk.0.ssm_conv1d.weight",
	} {
		if got := readAll(t, m, g); !equalF32(got, src.t[lm+hf].data) {
			t.Errorf("%s changed without a reorder: %v", g, got)
		}
	}
}

func TestNormPlusOne(t *testing.T) {
	m := loadFake(t, qwen35Cfg(2, 4), qwen35Regex, qwen35Fake(2, 4), Options{})
	for name, want := range map[string][]float32{
		"blk.0.attn_norm.weight":           {1.5, 0.75},
		"blk.0.post_attention_norm.weight": {1, 2},
		"blk.3.attn_q_norm.weight":         {1, 2, 3, 0},
		"output_norm.weight":               {0, 1},
		"blk.0.ssm_norm.weight":            {0.5, -0.25}, // linear_attn.norm: gated RMSNorm with real weights, no +1
	} {
		if got := readAll(t, m, name); !equalF32(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
		if tt, _ := m.Tensor(name); tt.Type != gguf.TypeF32 {
			t.Errorf("%s type %s, want F32", name, tt.Type)
		}
	}
}

func TestQwen35KVsFromTextConfig(t *testing.T) {
	m := loadFake(t, qwen35Cfg(2, 4), qwen35Regex, qwen35Fake(2, 4), Options{})
	checks := map[string]string{
		"general.architecture":            `"qwen35"`,
		"qwen35.embedding_length":         "2", // text_config wins over the root's 999
		"qwen35.block_count":              "4",
		"qwen35.ssm.conv_kernel":          "2",
		"qwen35.ssm.state_size":           "1",
		"qwen35.ssm.group_count":          "2",
		"qwen35.ssm.time_step_rank":       "4",
		"qwen35.ssm.inner_size":           "8",
		"qwen35.full_attention_interval":  "4",
		"qwen35.rope.dimension_count":     "1", // int(4 × 0.25)
		"qwen35.rope.dimension_sections":  "[int32×4: 1, 1, 0, 0]",
		"qwen35.rope.freq_base":           "1e+07",
		"qwen35.attention.key_length":     "4",
		"general.file_type":               "32", // auto: first 2-D tensor is bf16
		"tokenizer.ggml.pre":              `"qwen35"`,
		"tokenizer.ggml.eos_token_id":     "7", // from tokenizer_config eos_token <|im_end|>
		"tokenizer.ggml.padding_token_id": "6",
	}
	for k, want := range checks {
		v, ok := m.KV(k)
		if !ok {
			t.Errorf("missing KV %s", k)
			continue
		}
		if got := v.String(); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	for _, k := range []string{"qwen35.nextn_predict_layers", "qwen35.expert_count", "tokenizer.ggml.bos_token_id"} {
		if _, ok := m.KV(k); ok {
			t.Errorf("unexpected KV %s", k)
		}
	}
	// The MRoPE mixin writes the default sections only when the config has none.
	cfg := qwen35Cfg(2, 4)
	delete(cfg["text_config"].(map[string]any)["rope_parameters"].(map[string]any), "mrope_section")
	m = loadFake(t, cfg, qwen35Regex, qwen35Fake(2, 4), Options{})
	if v, _ := m.KV("qwen35.rope.dimension_sections"); v.String() != "[int32×4: 11, 11, 10, 0]" {
		t.Errorf("default dimension_sections = %s", v)
	}
	// Order: TextModel keys, then file_type, then the ssm keys, then quantization version, then tokenizer.
	var keys []string
	for _, kv := range m.KVs {
		keys = append(keys, kv.Key)
	}
	idx := func(k string) int { return slices.Index(keys, k) }
	if !(idx("general.architecture") == 0 && idx("qwen35.block_count") < idx("general.file_type") &&
		idx("general.file_type") < idx("qwen35.ssm.conv_kernel") && idx("qwen35.rope.dimension_count") < idx("qwen35.rope.dimension_sections") &&
		idx("qwen35.rope.dimension_sections") < idx("general.quantization_version") && idx("general.quantization_version") < idx("tokenizer.ggml.model")) {
		t.Errorf("KV order: %v", keys)
	}
}

func withMTP(f *fakeSource) *fakeSource {
	f.add("mtp.fc.weight", "BF16", []int64{2, 4}, nil)
	f.add("mtp.pre_fc_norm_embedding.weight", "BF16", []int64{2}, []float32{0, 1})
	f.add("mtp.pre_fc_norm_hidden.weight", "BF16", []int64{2}, []float32{0, 1})
	f.add("mtp.norm.weight", "BF16", []int64{2}, []float32{0, 1})
	f.add("mtp.layers.0.input_layernorm.weight", "BF16", []int64{2}, []float32{0, 1})
	f.add("mtp.layers.0.self_attn.q_proj.weight", "BF16", []int64{8, 2}, nil)
	f.add("model.visual.blocks.0.attn.qkv.weight", "BF16", []int64{6, 2}, nil)
	f.add("model.visual.merger.mlp.0.weight", "F8_E4M3", []int64{2, 2}, nil) // dropped before its dtype matters
	return f
}

func TestMTPDroppedByDefault(t *testing.T) {
	m := loadFake(t, qwen35Cfg(2, 4), qwen35Regex, withMTP(qwen35Fake(2, 4)), Options{})
	if m.BlockCount != 4 || m.MTP {
		t.Errorf("block count %d mtp %v, want 4 false", m.BlockCount, m.MTP)
	}
	for _, n := range tensorNames(m) {
		if strings.HasPrefix(n, "blk.4.") || strings.Contains(n, "nextn") || strings.Contains(n, "visual") {
			t.Errorf("unexpected tensor %s", n)
		}
	}
	for _, want := range []string{"mtp.fc.weight", "mtp.layers.0.self_attn.q_proj.weight", "model.visual.blocks.0.attn.qkv.weight"} {
		if !slices.Contains(m.Dropped, want) {
			t.Errorf("%s not listed as dropped: %v", want, m.Dropped)
		}
	}
}

func TestMTPKept(t *testing.T) {
	m := loadFake(t, qwen35Cfg(2, 4), qwen35Regex, withMTP(qwen35Fake(2, 4)), Options{KeepMTP: true})
	if m.BlockCount != 5 || !m.MTP {
		t.Errorf("block count %d mtp %v, want 5 true", m.BlockCount, m.MTP)
	}
	if v, ok := m.KV("qwen35.nextn_predict_layers"); !ok || v.String() != "1" {
		t.Errorf("nextn_predict_layers = %v %v", v, ok)
	}
	if v, _ := m.KV("qwen35.block_count"); v.String() != "5" {
		t.Errorf("block_count KV = %s", v)
	}
	for name, want := range map[string][]float32{
		"blk.4.nextn.enorm.weight":            {1, 2},
		"blk.4.nextn.hnorm.weight":            {1, 2},
		"blk.4.nextn.shared_head_norm.weight": {1, 2},
		"blk.4.attn_norm.weight":              {1, 2},
	} {
		if got := readAll(t, m, name); !equalF32(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, n := range []string{"blk.4.nextn.eh_proj.weight", "blk.4.attn_q.weight"} {
		if _, ok := m.Tensor(n); !ok {
			t.Errorf("missing %s", n)
		}
	}
	// A config that promises MTP layers the checkpoint lacks would give an unloadable file (llama.cpp#26916).
	if _, err := tryLoadFake(t, qwen35Cfg(2, 4), qwen35Regex, qwen35Fake(2, 4), Options{KeepMTP: true}); err == nil ||
		!strings.Contains(err.Error(), "mtp_num_hidden_layers") {
		t.Errorf("KeepMTP without mtp tensors: err = %v", err)
	}
}

func TestReorderShapeMismatch(t *testing.T) {
	src := qwen35Fake(2, 4)
	src.add(lm+"layers.1.linear_attn.in_proj_z.weight", "BF16", []int64{6, 2}, nil) // want vh·dv = 8 rows
	_, err := tryLoadFake(t, qwen35Cfg(2, 4), qwen35Regex, src, Options{})
	if err == nil || !strings.Contains(err.Error(), "in_proj_z") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzConfig feeds hostile config.json bytes to Load (with the tiny Qwen3.5 tensors): it may fail, never panic.
func FuzzConfig(f *testing.F) {
	for _, c := range []map[string]any{qwen35Cfg(2, 4), qwen35Cfg(2, 2), qwen2Cfg(), qwen3moeCfg()} {
		b, _ := jsonMarshal(c)
		f.Add(b)
	}
	f.Add([]byte(`{"architectures":["Qwen3_5ForCausalLM"],"num_hidden_layers":4294967295,"linear_num_key_heads":0}`))
	dir := f.TempDir()
	writeJSON(f, dir, "tokenizer.json", tinyTokenizer(qwen35Regex, nil))
	src := withMTP(qwen35Fake(2, 4))
	f.Fuzz(func(t *testing.T, cfg []byte) {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, keep := range []bool{false, true} {
			m, err := Load(dir, Options{Source: src, KeepMTP: keep})
			if err != nil {
				continue
			}
			for i := range m.Tensors {
				tt := &m.Tensors[i]
				if _, err := tt.ReadRows(t.Context(), 0, tt.Rows(), nil); err != nil {
					t.Fatalf("%s: %v", tt.Name, err)
				}
			}
		}
	})
}

// TestQwen35CausalLM converts the text-only class: flat config, tensors without "language_model.".
func TestQwen35CausalLM(t *testing.T) {
	cfg := qwen35Cfg(2, 4)
	flat := cfg["text_config"].(map[string]any)
	flat["architectures"] = []any{"Qwen3_5ForCausalLM"}
	src := newFake()
	for n, ft := range qwen35Fake(2, 4).t {
		src.t[strings.Replace(n, "language_model.", "", 1)] = ft
	}
	want := loadFake(t, cfg, qwen35Regex, qwen35Fake(2, 4), Options{})
	got := loadFake(t, flat, qwen35Regex, src, Options{})
	if got.Arch != "qwen35" || !slices.Equal(tensorNames(got), tensorNames(want)) {
		t.Fatalf("arch %s tensors %v, want %v", got.Arch, tensorNames(got), tensorNames(want))
	}
	for _, n := range tensorNames(want) {
		if !equalF32(readAll(t, got, n), readAll(t, want, n)) {
			t.Errorf("%s differs between the two classes", n)
		}
	}
}
