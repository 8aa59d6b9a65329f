package reference

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// FormatError reports a file whose content is malformed or inconsistent.
type FormatError struct {
	File string // file the problem was found in
	What string // what is wrong, naming the field or tensor
}

func (e *FormatError) Error() string { return fmt.Sprintf("reference: %s: %s", e.File, e.What) }

// UnsupportedError reports valid input that this reference implementation does not handle.
type UnsupportedError struct {
	File string
	What string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("reference: %s: unsupported: %s", e.File, e.What)
}

// Family names the modeling code a checkpoint follows.
type Family int

const (
	FamilyQwen2 Family = iota + 1
	FamilyQwen3
	FamilyQwen3MoE
	FamilyQwen35
	FamilyQwen35MoE
)

func (f Family) String() string {
	switch f {
	case FamilyQwen2:
		return "qwen2"
	case FamilyQwen3:
		return "qwen3"
	case FamilyQwen3MoE:
		return "qwen3moe"
	case FamilyQwen35:
		return "qwen35"
	case FamilyQwen35MoE:
		return "qwen35moe"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

var architectures = map[string]Family{
	"Qwen2ForCausalLM":                   FamilyQwen2,
	"Qwen3ForCausalLM":                   FamilyQwen3,
	"Qwen3MoeForCausalLM":                FamilyQwen3MoE,
	"Qwen3_5ForCausalLM":                 FamilyQwen35,
	"Qwen3_5ForConditionalGeneration":    FamilyQwen35,
	"Qwen3_5MoeForCausalLM":              FamilyQwen35MoE,
	"Qwen3_5MoeForConditionalGeneration": FamilyQwen35MoE,
}

// Config is the part of config.json the forward pass needs, with transformers' defaults applied.
type Config struct {
	Architecture string
	Family       Family

	Hidden, Layers, Heads, KVHeads, HeadDim, Intermediate, Vocab int
	Eps                                                          float64
	RopeTheta                                                    float64
	RotaryDim                                                    int   // int(head_dim * partial_rotary_factor)
	MRopeSection                                                 []int // Qwen3.5 only; text positions make it a no-op
	TieEmbeddings                                                bool
	AttentionBias                                                bool // q/k/v/o biases (Qwen3*: attention_bias; Qwen2: q/k/v always)

	// MoE (Qwen3-MoE, Qwen3.5-MoE).
	Experts, TopK, MoEIntermediate, SharedIntermediate int
	NormTopK                                           bool
	SparseStep                                         int
	MLPOnlyLayers                                      []int

	// Qwen3.5 hybrid layers.
	LayerTypes                       []string // "linear_attention" | "full_attention"
	ConvKernel, LinKHeads, LinVHeads int
	LinKDim, LinVDim                 int
	AttnOutputGate                   bool
}

// maxDim bounds every size read from config.json, maxLayers the layer count; the reference is for tiny models.
const (
	maxDim    = 1 << 20
	maxLayers = 1 << 10
)

// LoadConfig reads dir/config.json. For Qwen3.5 the nested text_config wins over root fields, as in
// convert_hf_to_gguf's TextModel.__init__ and transformers' Qwen3_5Config.
func LoadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := readCapped(path, 16<<20)
	if err != nil {
		return Config{}, err
	}
	return parseConfig(path, data)
}

// readCapped reads a JSON side file, refusing files larger than limit bytes.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reference: %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, &FormatError{File: path, What: fmt.Sprintf("larger than %d bytes", limit)}
	}
	return data, nil
}

func parseConfig(path string, data []byte) (Config, error) {
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		return Config{}, &FormatError{File: path, What: "invalid JSON: " + err.Error()}
	}
	var c Config
	archs, _ := root["architectures"].([]any)
	if len(archs) == 0 {
		return c, &FormatError{File: path, What: `missing "architectures"`}
	}
	c.Architecture, _ = archs[0].(string)
	fam, ok := architectures[c.Architecture]
	if !ok {
		return c, &UnsupportedError{File: path, What: fmt.Sprintf("architecture %q", c.Architecture)}
	}
	c.Family = fam
	h := root
	if tc, ok := root["text_config"].(map[string]any); ok {
		h = make(map[string]any, len(root)+len(tc))
		for k, v := range root {
			h[k] = v
		}
		for k, v := range tc {
			h[k] = v
		}
	}
	r := cfgReader{path: path, m: h}
	c.Hidden = r.int("hidden_size", -1)
	c.Layers = r.int("num_hidden_layers", -1)
	c.Heads = r.int("num_attention_heads", -1)
	c.KVHeads = r.int("num_key_value_heads", c.Heads)
	c.Vocab = r.int("vocab_size", -1)
	c.Eps = r.float("rms_norm_eps", 1e-6)
	if c.Heads > 0 {
		c.HeadDim = r.int("head_dim", c.Hidden/c.Heads)
	}
	if act := r.str("hidden_act", "silu"); act != "silu" {
		r.fail(&UnsupportedError{File: path, What: fmt.Sprintf("hidden_act %q (only silu)", act)})
	}
	// Every Qwen config class defaults tie_word_embeddings to false. text_config (when present) wins over the
	// root, as in convert_hf_to_gguf's merged hparams.
	c.TieEmbeddings = r.bool("tie_word_embeddings", false)
	c.AttentionBias = r.bool("attention_bias", false)

	if r.bool("use_sliding_window", false) {
		r.fail(&UnsupportedError{File: path, What: "use_sliding_window true"})
	}
	if fam != FamilyQwen35 && fam != FamilyQwen35MoE {
		if lt, ok := h["layer_types"].([]any); ok {
			for i, v := range lt {
				if v != "full_attention" {
					r.fail(&UnsupportedError{File: path, What: fmt.Sprintf("layer_types[%d] = %v", i, v)})
					break
				}
			}
		}
	}
	rope, _ := h["rope_parameters"].(map[string]any)
	if rope == nil {
		rope, _ = h["rope_scaling"].(map[string]any)
	}
	rr := cfgReader{path: path, m: rope}
	if rope != nil {
		typ := rr.str("rope_type", rr.str("type", "default"))
		if typ != "default" && typ != "mrope" {
			r.fail(&UnsupportedError{File: path, What: fmt.Sprintf("rope_type %q", typ)})
		}
	}
	c.RopeTheta = r.float("rope_theta", 10000)
	if rope != nil {
		if _, ok := rope["rope_theta"]; ok {
			c.RopeTheta = rr.float("rope_theta", c.RopeTheta)
		}
	}
	prf := 1.0
	if fam == FamilyQwen35 || fam == FamilyQwen35MoE {
		prf = 0.25 // Qwen3_5TextConfig.__post_init__ default
	}
	prf = r.float("partial_rotary_factor", prf)
	if rope != nil {
		if _, ok := rope["partial_rotary_factor"]; ok {
			prf = rr.float("partial_rotary_factor", prf)
		}
	}
	c.RotaryDim = int(float64(c.HeadDim) * prf)
	if rope != nil {
		if sec, ok := rope["mrope_section"].([]any); ok {
			for _, v := range sec {
				f, ok := v.(float64)
				if !ok || f < 0 || f > maxDim || f != math.Trunc(f) {
					r.fail(&FormatError{File: path, What: "mrope_section: expected non-negative integers"})
					break
				}
				c.MRopeSection = append(c.MRopeSection, int(f))
			}
		}
	}

	switch fam {
	case FamilyQwen2, FamilyQwen3:
		c.Intermediate = r.int("intermediate_size", -1)
	case FamilyQwen3MoE:
		c.Intermediate = r.int("intermediate_size", 0)
		c.Experts = r.int("num_experts", -1)
		c.TopK = r.int("num_experts_per_tok", -1)
		c.MoEIntermediate = r.int("moe_intermediate_size", -1)
		c.NormTopK = r.bool("norm_topk_prob", false)
		c.SparseStep = r.int("decoder_sparse_step", 1)
		if l, ok := h["mlp_only_layers"].([]any); ok {
			for _, v := range l {
				f, _ := v.(float64)
				c.MLPOnlyLayers = append(c.MLPOnlyLayers, int(f))
			}
		}
	case FamilyQwen35, FamilyQwen35MoE:
		if fam == FamilyQwen35 {
			c.Intermediate = r.int("intermediate_size", -1)
		} else {
			c.Experts = r.int("num_experts", -1)
			c.TopK = r.int("num_experts_per_tok", -1)
			c.MoEIntermediate = r.int("moe_intermediate_size", -1)
			c.SharedIntermediate = r.int("shared_expert_intermediate_size", -1)
			c.NormTopK = true // Qwen3_5MoeTopKRouter always renormalises the top-k weights
		}
		c.ConvKernel = r.int("linear_conv_kernel_dim", 4)
		c.LinKHeads = r.int("linear_num_key_heads", 16)
		c.LinVHeads = r.int("linear_num_value_heads", 32)
		c.LinKDim = r.int("linear_key_head_dim", 128)
		c.LinVDim = r.int("linear_value_head_dim", 128)
		c.AttnOutputGate = r.bool("attn_output_gate", true)
		if !c.AttnOutputGate {
			r.fail(&UnsupportedError{File: path, What: "attn_output_gate false (Qwen3_5Attention always gates)"})
		}
		if lt, ok := h["layer_types"].([]any); ok && lt != nil {
			for _, v := range lt {
				s, _ := v.(string)
				c.LayerTypes = append(c.LayerTypes, s)
			}
		} else {
			interval := r.int("full_attention_interval", 4)
			if interval <= 0 {
				interval = 4
			}
			for i := 0; i < c.Layers && i < maxDim; i++ {
				if (i+1)%interval == 0 {
					c.LayerTypes = append(c.LayerTypes, "full_attention")
				} else {
					c.LayerTypes = append(c.LayerTypes, "linear_attention")
				}
			}
		}
	}
	if r.err != nil {
		return c, r.err
	}
	return c, c.validate(path)
}

func (c *Config) validate(path string) error {
	bad := func(format string, a ...any) error { return &FormatError{File: path, What: fmt.Sprintf(format, a...)} }
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden_size", c.Hidden}, {"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.Vocab}} {
		if f.v <= 0 || f.v > maxDim {
			return bad("%s = %d: expected 1..%d", f.name, f.v, maxDim)
		}
	}
	if c.Layers > maxLayers {
		return bad("num_hidden_layers = %d: more than %d", c.Layers, maxLayers)
	}
	if c.Heads%c.KVHeads != 0 {
		return bad("num_attention_heads %d not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.RotaryDim <= 0 || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0 {
		return bad("rotary dim %d (head_dim × partial_rotary_factor) must be even and in 2..%d", c.RotaryDim, c.HeadDim)
	}
	if c.Eps <= 0 || c.RopeTheta <= 0 {
		return bad("rms_norm_eps and rope_theta must be positive")
	}
	if c.Intermediate < 0 || c.Intermediate > maxDim {
		return bad("intermediate_size = %d: expected 0..%d", c.Intermediate, maxDim)
	}
	if c.Family == FamilyQwen3MoE || c.Family == FamilyQwen35MoE {
		if c.Experts <= 0 || c.Experts > 4096 || c.TopK <= 0 || c.TopK > c.Experts {
			return bad("num_experts %d / num_experts_per_tok %d: expected 1 <= top-k <= experts <= 4096", c.Experts, c.TopK)
		}
		if c.MoEIntermediate <= 0 || c.MoEIntermediate > maxDim {
			return bad("moe_intermediate_size = %d", c.MoEIntermediate)
		}
		if c.SparseStep <= 0 && c.Family == FamilyQwen3MoE {
			return bad("decoder_sparse_step = %d", c.SparseStep)
		}
		if c.Family == FamilyQwen35MoE && (c.SharedIntermediate <= 0 || c.SharedIntermediate > maxDim) {
			return bad("shared_expert_intermediate_size = %d", c.SharedIntermediate)
		}
	}
	if c.Family == FamilyQwen35 || c.Family == FamilyQwen35MoE {
		if len(c.LayerTypes) != c.Layers {
			return bad("layer_types has %d entries, num_hidden_layers is %d", len(c.LayerTypes), c.Layers)
		}
		for i, t := range c.LayerTypes {
			if t != "linear_attention" && t != "full_attention" {
				return bad("layer_types[%d] = %q", i, t)
			}
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"linear_conv_kernel_dim", c.ConvKernel}, {"linear_num_key_heads", c.LinKHeads},
			{"linear_num_value_heads", c.LinVHeads}, {"linear_key_head_dim", c.LinKDim},
			{"linear_value_head_dim", c.LinVDim}} {
			if f.v <= 0 || f.v > maxDim {
				return bad("%s = %d: expected 1..%d", f.name, f.v, maxDim)
			}
		}
		if c.LinVHeads%c.LinKHeads != 0 {
			return bad("linear_num_value_heads %d not a multiple of linear_num_key_heads %d", c.LinVHeads, c.LinKHeads)
		}
	}
	return nil
}

// usesMoE reports whether decoder layer i has a sparse MoE block (Qwen3MoeDecoderLayer's rule).
func (c *Config) usesMoE(i int) bool {
	switch c.Family {
	case FamilyQwen35MoE:
		return true
	case FamilyQwen3MoE:
		return !slices.Contains(c.MLPOnlyLayers, i) && c.Experts > 0 && (i+1)%c.SparseStep == 0
	}
	return false
}

type cfgReader struct {
	path string
	m    map[string]any
	err  error
}

func (r *cfgReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// int reads an integer field; def < 0 makes the field required.
func (r *cfgReader) int(key string, def int) int {
	v, ok := r.m[key]
	if !ok || v == nil {
		if def < 0 {
			r.fail(&FormatError{File: r.path, What: fmt.Sprintf("missing %q", key)})
		}
		return def
	}
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || f < 0 || f > maxDim {
		r.fail(&FormatError{File: r.path, What: fmt.Sprintf("%q = %v: expected an integer in 0..%d", key, v, maxDim)})
		return 0
	}
	return int(f)
}

func (r *cfgReader) float(key string, def float64) float64 {
	v, ok := r.m[key]
	if !ok || v == nil {
		return def
	}
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		r.fail(&FormatError{File: r.path, What: fmt.Sprintf("%q = %v: expected a number", key, v)})
		return def
	}
	return f
}

func (r *cfgReader) bool(key string, def bool) bool {
	v, ok := r.m[key]
	if !ok || v == nil {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		r.fail(&FormatError{File: r.path, What: fmt.Sprintf("%q = %v: expected a boolean", key, v)})
		return def
	}
	return b
}

func (r *cfgReader) str(key, def string) string {
	v, ok := r.m[key]
	if !ok || v == nil {
		return def
	}
	s, ok := v.(string)
	if !ok {
		r.fail(&FormatError{File: r.path, What: fmt.Sprintf("%q = %v: expected a string", key, v)})
		return def
	}
	return s
}
