package reference

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/safetensors"
)

var testPrompt = []int{3, 17, 5, 39, 0, 22, 8}

func TestLoadAndForwardAllFamilies(t *testing.T) {
	for _, tc := range tinyCases() {
		t.Run(tc.name, func(t *testing.T) {
			dir, cfg, mem := buildCase(t, tc, 42)
			m, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Config.Family != cfg.Family {
				t.Fatalf("family %v, want %v", m.Config.Family, cfg.Family)
			}
			logits := m.Forward(testPrompt)
			if len(logits) != len(testPrompt) || len(logits[0]) != cfg.Vocab {
				t.Fatalf("logits %d×%d", len(logits), len(logits[0]))
			}
			var spread float64
			for _, row := range logits {
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, v := range row {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("non-finite logit %v", v)
					}
					lo, hi = min(lo, float64(v)), max(hi, float64(v))
				}
				spread = max(spread, hi-lo)
			}
			if spread < 0.1 {
				t.Fatalf("logits nearly constant (spread %g): the model computes nothing", spread)
			}
			// The checkpoint read through safetensors gives the same logits as the in-memory tensors (exactly for
			// F32, within rounding for 16-bit files).
			mm, err := newModel(cfg, mem, "mem")
			if err != nil {
				t.Fatal(err)
			}
			ref := mm.Forward(testPrompt)
			tol := 0.0
			if tc.dtype != safetensors.F32 {
				tol = 0.5
			}
			for i := range ref {
				if d := maxAbsDiff(ref[i], logits[i]); d > tol {
					t.Fatalf("position %d: loaded vs in-memory logits differ by %g", i, d)
				}
			}
			// Causality: a prefix's logits do not depend on later tokens.
			pre := m.Forward(testPrompt[:3])
			for i := range pre {
				if d := maxAbsDiff(pre[i], logits[i]); d > 1e-6 {
					t.Fatalf("position %d changes with later tokens (%g)", i, d)
				}
			}
			// Greedy = repeated argmax of Forward.
			g := m.Greedy(testPrompt, 4)
			seq := slices.Clone(testPrompt)
			for i := range 4 {
				l := m.Forward(seq)
				next := Argmax(l[len(l)-1])
				if g[i] != next {
					t.Fatalf("greedy[%d] = %d, want %d", i, g[i], next)
				}
				seq = append(seq, next)
			}
		})
	}
}

// TestLayoutVariantsAgree checks that the two on-disk spellings of the same weights (Qwen3.5
// ForConditionalGeneration vs ForCausalLM names; Qwen3-MoE per-expert vs fused experts) give identical logits.
func TestLayoutVariantsAgree(t *testing.T) {
	cases := tinyCases()
	byName := map[string]tinyCase{}
	for _, c := range cases {
		byName[c.name] = c
	}
	pairs := [][2]string{{"qwen35", "qwen35-causal"}, {"qwen3moe", "qwen3moe-fused"}}
	for _, p := range pairs {
		a, b := byName[p[0]], byName[p[1]]
		a.dtype, b.dtype = safetensors.F32, safetensors.F32
		dirA, _, memA := buildCase(t, a, 7)
		js, _ := json.Marshal(b.config)
		cfgB, err := parseConfig("config.json", js)
		if err != nil {
			t.Fatal(err)
		}
		memB := &memTensors{shapes: map[string][]int64{}, data: map[string][]float32{}}
		for _, s := range specTensors(cfgB, b) {
			name := s.name
			switch {
			case strings.HasSuffix(name, "mlp.experts.gate_up_proj"):
				pre := strings.TrimSuffix(name, "gate_up_proj")
				E, ff, d := int(s.shape[0]), int(s.shape[1])/2, int(s.shape[2])
				var v []float32
				for e := 0; e < E; e++ {
					v = append(v, memA.data[pre+strconv.Itoa(e)+".gate_proj.weight"]...)
					v = append(v, memA.data[pre+strconv.Itoa(e)+".up_proj.weight"]...)
				}
				if len(v) != E*2*ff*d {
					t.Fatal("bad fused size")
				}
				memB.put(name, s.shape, v)
				continue
			case strings.HasSuffix(name, "mlp.experts.down_proj"):
				pre := strings.TrimSuffix(name, "down_proj")
				var v []float32
				for e := 0; e < int(s.shape[0]); e++ {
					v = append(v, memA.data[pre+strconv.Itoa(e)+".down_proj.weight"]...)
				}
				memB.put(name, s.shape, v)
				continue
			}
			src := name
			if a.conditional && !b.conditional {
				src = strings.Replace(name, "model.", "model.language_model.", 1)
			}
			v, ok := memA.data[src]
			if !ok {
				t.Fatalf("%s: no counterpart for %s", p[1], name)
			}
			memB.put(name, s.shape, v)
		}
		dirB := t.TempDir()
		writeCheckpoint(t, dirB, b.config, memB, safetensors.F32)
		ma, err := Load(dirA)
		if err != nil {
			t.Fatal(err)
		}
		mb, err := Load(dirB)
		if err != nil {
			t.Fatal(err)
		}
		la, lb := ma.Forward(testPrompt), mb.Forward(testPrompt)
		for i := range la {
			if d := maxAbsDiff(la[i], lb[i]); d != 0 {
				t.Fatalf("%s vs %s: position %d differs by %g", p[0], p[1], i, d)
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tc := tinyCases()[0] // qwen2
	tc.dtype = safetensors.F32
	js, _ := json.Marshal(tc.config)
	cfg, _ := parseConfig("config.json", js)
	specs := specTensors(cfg, tc)
	build := func(t *testing.T, mutate func(cfg map[string]any, m *memTensors)) error {
		conf := map[string]any{}
		for k, v := range tc.config {
			conf[k] = v
		}
		m := randomTensors(cfg, specs, 1)
		mutate(conf, m)
		dir := t.TempDir()
		writeCheckpoint(t, dir, conf, m, safetensors.F32)
		_, err := Load(dir)
		return err
	}
	for _, c := range []struct {
		name   string
		mutate func(cfg map[string]any, m *memTensors)
		want   string
		unsup  bool
	}{
		{"unknown architecture", func(c map[string]any, m *memTensors) { c["architectures"] = []string{"LlamaForCausalLM"} },
			`architecture "LlamaForCausalLM"`, true},
		{"missing config key", func(c map[string]any, m *memTensors) { delete(c, "hidden_size") }, `missing "hidden_size"`, false},
		{"bad config value", func(c map[string]any, m *memTensors) { c["num_attention_heads"] = 2.5 }, `"num_attention_heads"`, false},
		{"unsupported act", func(c map[string]any, m *memTensors) { c["hidden_act"] = "gelu" }, `hidden_act "gelu"`, true},
		{"missing tensor", func(c map[string]any, m *memTensors) {
			n := "model.layers.1.self_attn.k_proj.bias"
			m.order = slices.DeleteFunc(m.order, func(s string) bool { return s == n })
		}, `missing tensor "model.layers.1.self_attn.k_proj.bias"`, false},
		{"wrong shape", func(c map[string]any, m *memTensors) {
			n := "model.layers.0.mlp.up_proj.weight"
			m.shapes[n] = []int64{16, 24}
		}, `tensor "model.layers.0.mlp.up_proj.weight" has shape [16 24], expected [24 16]`, false},
		{"unexpected tensor", func(c map[string]any, m *memTensors) {
			m.put("model.layers.0.self_attn.o_proj.bias", []int64{16}, make([]float32, 16))
		}, `unexpected tensor "model.layers.0.self_attn.o_proj.bias"`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := build(t, c.mutate)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
			var ue *UnsupportedError
			var fe *FormatError
			if c.unsup && !errors.As(err, &ue) {
				t.Fatalf("error %T is not *UnsupportedError", err)
			}
			if !c.unsup && !errors.As(err, &fe) {
				t.Fatalf("error %T is not *FormatError", err)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "nope")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing dir: %v", err)
	}
}

func TestConfigQwen35Defaults(t *testing.T) {
	js := `{"architectures":["Qwen3_5ForConditionalGeneration"],"tie_word_embeddings":false,
	  "text_config":{"hidden_size":32,"num_hidden_layers":8,"num_attention_heads":2,"num_key_value_heads":1,
	  "head_dim":16,"intermediate_size":8,"vocab_size":10,"tie_word_embeddings":true,
	  "rope_parameters":{"rope_type":"default","rope_theta":10000000}}}`
	c, err := parseConfig("config.json", []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := []string{"linear_attention", "linear_attention", "linear_attention", "full_attention",
		"linear_attention", "linear_attention", "linear_attention", "full_attention"}
	if !slices.Equal(c.LayerTypes, wantTypes) {
		t.Fatalf("layer types %v", c.LayerTypes)
	}
	if c.RotaryDim != 4 || c.RopeTheta != 1e7 || !c.TieEmbeddings || c.LinKHeads != 16 || c.LinVHeads != 32 ||
		c.ConvKernel != 4 || c.LinKDim != 128 {
		t.Fatalf("defaults: %+v", c)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, tc := range tinyCases() {
		js, _ := json.Marshal(tc.config)
		f.Add(js)
	}
	f.Add([]byte(`{"architectures":["Qwen3_5ForCausalLM"],"layer_types":["x"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseConfig("config.json", data)
		if err != nil {
			return
		}
		// A config that parses is internally consistent.
		if c.Layers <= 0 || c.Layers > maxLayers || c.RotaryDim <= 0 || c.RotaryDim > c.HeadDim || c.Heads%c.KVHeads != 0 {
			t.Fatalf("inconsistent config accepted: %+v", c)
		}
		for i := 0; i < c.Layers; i++ {
			_ = c.usesMoE(i)
		}
	})
}
