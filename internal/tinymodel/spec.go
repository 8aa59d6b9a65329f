package tinymodel

import (
	"fmt"
	"slices"
)

// Weight dtypes Generate can write (safetensors dtype strings).
const (
	F32  = "F32"
	BF16 = "BF16"
)

// Architectures Generate can write.
const (
	Qwen2     = "qwen2"     // Qwen2ForCausalLM (Qwen2 / Qwen2.5)
	Qwen3     = "qwen3"     // Qwen3ForCausalLM
	Qwen3MoE  = "qwen3moe"  // Qwen3MoeForCausalLM
	Qwen35    = "qwen35"    // Qwen3_5ForConditionalGeneration
	Qwen35MoE = "qwen35moe" // Qwen3_5MoeForConditionalGeneration
)

// Spec describes a checkpoint to generate. Zero fields take the defaults of
// the architecture's preset (see Normalize), so a test can start from a
// preset and override only what it cares about.
type Spec struct {
	Name string // preset name, used for the model's name in config files
	Arch string // one of the architecture constants
	Seed uint64
	// DType of the weight tensors: F32 (default) or BF16.
	DType string

	HiddenSize       int
	NumLayers        int
	NumHeads         int
	NumKVHeads       int
	HeadDim          int // written as head_dim except for qwen2 (which derives it)
	IntermediateSize int
	// VocabSize is config.json vocab_size (rows of the embedding);
	// TokenizerSize the number of tokens tokenizer.json defines (BPE vocab
	// plus added tokens). VocabSize > TokenizerSize exercises padding.
	VocabSize      int
	TokenizerSize  int
	TiedEmbeddings bool
	AttentionBias  bool // q/k/v biases (qwen2)

	RopeTheta             float64
	RMSNormEps            float64
	MaxPositionEmbeddings int

	// Mixture of experts (qwen3moe, qwen35moe).
	NumExperts                   int
	NumExpertsPerTok             int
	MoEIntermediateSize          int
	SharedExpertIntermediateSize int // qwen35moe
	NormTopKProb                 bool

	// Qwen3.5 hybrid layers.
	LinearNumKeyHeads     int
	LinearNumValueHeads   int
	LinearKeyHeadDim      int
	LinearValueHeadDim    int
	LinearConvKernel      int
	FullAttentionInterval int
	PartialRotaryFactor   float64
	MRoPESection          []int
	MTPLayers             int  // mtp_num_hidden_layers; > 0 writes mtp.* tensors
	Vision                bool // write a tiny model.visual.* tower

	// Standard deviations of the random weights.
	EmbedStd  float64 // embed_tokens
	LMHeadStd float64 // lm_head
	WeightStd float64 // projections
	MLPStd    float64 // MLP gate/up projections (larger, so the MLP is clearly nonlinear)
	NormStd   float64 // spread of norm weights around their centre

	// OutlierChannels > 0 gives the activations outlier channels, as trained LLMs have (a few hidden
	// dimensions carry values far larger than the rest, which is what makes importance-weighted
	// quantization pay off): that many hidden dimensions, chosen from the seed, get OutlierScale times the
	// gain in every layer's input and post-attention RMSNorm (so the inputs of the projections have outlier
	// columns), and the embedding's values in those columns are heavy-tailed (Student's t with 3 degrees of
	// freedom at the embedding's scale). The final norm is left alone, so the logits keep their scale.
	OutlierChannels int
	OutlierScale    float64 // default 20 when OutlierChannels > 0

	// MaxShardBytes > 0 splits the weights into model-0000i-of-0000n
	// shards of at most this many bytes plus model.safetensors.index.json.
	MaxShardBytes int64
}

// Presets returns the standard tiny checkpoints, in a fixed order.
func Presets() []Spec {
	base := Spec{
		DType: F32, HiddenSize: 256, NumHeads: 4, NumKVHeads: 2, HeadDim: 64,
		IntermediateSize: 512, VocabSize: 768, TokenizerSize: 700,
		RMSNormEps: 1e-6, EmbedStd: 0.1, LMHeadStd: 0.2, WeightStd: 0.04, MLPStd: 0.08, NormStd: 0.05,
	}
	// Scales (hidden 256): attention outputs have rms ~0.4 and MLP outputs
	// ~0.8 (gate/up std 0.08 drive SiLU well into its nonlinear range),
	// several times the embedding's 0.1, so the residual stream carries
	// what the layers compute and greedy decoding of a tied model does not
	// just echo its input. Logits have std ~1.6 (tied) or ~3 (lm_head 0.2):
	// a float32 forward pass of the qwen2/qwen3 presets showed top-1 margins
	// of 0.01-3.6 over 16 greedy steps, far above float32 error.
	qwen2 := base
	qwen2.Name, qwen2.Arch, qwen2.Seed = "qwen2", Qwen2, 2
	qwen2.NumLayers, qwen2.AttentionBias = 2, true
	qwen2.RopeTheta, qwen2.MaxPositionEmbeddings = 1e6, 32768

	qwen2t := qwen2
	qwen2t.Name, qwen2t.Seed, qwen2t.TiedEmbeddings = "qwen2-tied", 22, true

	qwen3 := base
	qwen3.Name, qwen3.Arch, qwen3.Seed = "qwen3", Qwen3, 3
	qwen3.NumLayers, qwen3.HeadDim, qwen3.TiedEmbeddings = 2, 128, true // head_dim != hidden/heads, as in real Qwen3
	qwen3.RopeTheta, qwen3.MaxPositionEmbeddings = 1e6, 40960

	moe := base
	moe.Name, moe.Arch, moe.Seed = "qwen3moe", Qwen3MoE, 4
	moe.NumLayers, moe.NumExperts, moe.NumExpertsPerTok, moe.MoEIntermediateSize, moe.NormTopKProb = 2, 4, 2, 256, true
	moe.RopeTheta, moe.MaxPositionEmbeddings = 1e6, 40960

	q35 := base
	q35.Name, q35.Arch, q35.Seed = "qwen35", Qwen35, 5
	q35.NumLayers, q35.FullAttentionInterval = 4, 4 // layers 0-2 linear, 3 full
	q35.LinearNumKeyHeads, q35.LinearNumValueHeads = 2, 4
	q35.LinearKeyHeadDim, q35.LinearValueHeadDim, q35.LinearConvKernel = 64, 64, 4
	q35.PartialRotaryFactor, q35.MRoPESection = 0.25, []int{3, 3, 2} // rotary dim 16 = 2·(3+3+2)
	q35.MTPLayers, q35.Vision, q35.MaxShardBytes = 1, true, 4<<20
	q35.RopeTheta, q35.MaxPositionEmbeddings = 1e7, 262144

	q35m := q35
	q35m.Name, q35m.Arch, q35m.Seed = "qwen35moe", Qwen35MoE, 6
	q35m.MRoPESection = []int{3, 3, 2}
	q35m.NumExperts, q35m.NumExpertsPerTok, q35m.MoEIntermediateSize, q35m.SharedExpertIntermediateSize = 4, 2, 256, 256
	q35m.IntermediateSize = 0

	return []Spec{qwen2, qwen2t, qwen3, moe, q35, q35m}
}

// Preset returns the preset with the given name.
func Preset(name string) (Spec, bool) {
	for _, p := range Presets() {
		if p.Name == name {
			return p, true
		}
	}
	return Spec{}, false
}

// Normalize fills zero fields from the architecture's preset (the first
// preset of that Arch) and checks the result.
func (s Spec) Normalize() (Spec, error) {
	var def Spec
	for _, p := range Presets() {
		if p.Arch == s.Arch {
			def = p
			break
		}
	}
	if def.Arch == "" {
		return s, fmt.Errorf("tinymodel: unknown architecture %q (want qwen2, qwen3, qwen3moe, qwen35 or qwen35moe)", s.Arch)
	}
	fill := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	fillf := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if s.Name == "" {
		s.Name = def.Name
	}
	if s.DType == "" {
		s.DType = F32
	}
	fill(&s.HiddenSize, def.HiddenSize)
	fill(&s.NumLayers, def.NumLayers)
	fill(&s.NumHeads, def.NumHeads)
	fill(&s.NumKVHeads, def.NumKVHeads)
	fill(&s.HeadDim, def.HeadDim)
	if s.Arch == Qwen2 {
		s.HeadDim = s.HiddenSize / s.NumHeads // Qwen2 has no head_dim key
	}
	if s.Arch != Qwen35MoE {
		fill(&s.IntermediateSize, def.IntermediateSize)
	}
	fill(&s.VocabSize, def.VocabSize)
	fill(&s.TokenizerSize, def.TokenizerSize)
	fillf(&s.RopeTheta, def.RopeTheta)
	fillf(&s.RMSNormEps, def.RMSNormEps)
	fill(&s.MaxPositionEmbeddings, def.MaxPositionEmbeddings)
	fill(&s.NumExperts, def.NumExperts)
	fill(&s.NumExpertsPerTok, def.NumExpertsPerTok)
	fill(&s.MoEIntermediateSize, def.MoEIntermediateSize)
	fill(&s.SharedExpertIntermediateSize, def.SharedExpertIntermediateSize)
	fill(&s.LinearNumKeyHeads, def.LinearNumKeyHeads)
	fill(&s.LinearNumValueHeads, def.LinearNumValueHeads)
	fill(&s.LinearKeyHeadDim, def.LinearKeyHeadDim)
	fill(&s.LinearValueHeadDim, def.LinearValueHeadDim)
	fill(&s.LinearConvKernel, def.LinearConvKernel)
	fill(&s.FullAttentionInterval, def.FullAttentionInterval)
	fillf(&s.PartialRotaryFactor, def.PartialRotaryFactor)
	if s.MRoPESection == nil {
		s.MRoPESection = slices.Clone(def.MRoPESection)
	}
	fillf(&s.EmbedStd, def.EmbedStd)
	fillf(&s.LMHeadStd, def.LMHeadStd)
	fillf(&s.WeightStd, def.WeightStd)
	fillf(&s.MLPStd, def.MLPStd)
	fillf(&s.NormStd, def.NormStd)
	if s.OutlierChannels > 0 && s.OutlierScale == 0 {
		s.OutlierScale = 20
	}
	return s, s.validate()
}

func (s Spec) isMoE() bool    { return s.Arch == Qwen3MoE || s.Arch == Qwen35MoE }
func (s Spec) isQwen35() bool { return s.Arch == Qwen35 || s.Arch == Qwen35MoE }

func (s Spec) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("tinymodel: spec %q: "+format, append([]any{s.Name}, a...)...)
	}
	switch {
	case s.DType != F32 && s.DType != BF16:
		return bad("dtype %q, want F32 or BF16", s.DType)
	case s.HiddenSize <= 0 || s.NumLayers <= 0 || s.NumHeads <= 0 || s.NumKVHeads <= 0 || s.HeadDim <= 0:
		return bad("sizes must be positive")
	case s.NumHeads%s.NumKVHeads != 0:
		return bad("num_attention_heads %d not a multiple of num_key_value_heads %d", s.NumHeads, s.NumKVHeads)
	case s.TokenizerSize < 256+len(specialTokens)+1:
		return bad("tokenizer size %d too small (256 bytes + %d added tokens + at least one merge)", s.TokenizerSize, len(specialTokens))
	case s.VocabSize < s.TokenizerSize:
		return bad("vocab_size %d below the tokenizer's %d tokens", s.VocabSize, s.TokenizerSize)
	case s.TokenizerSize > maxTokenizerSize:
		return bad("tokenizer size %d above the %d the built-in corpus supports", s.TokenizerSize, maxTokenizerSize)
	case s.OutlierChannels < 0 || s.OutlierChannels > s.HiddenSize || s.OutlierScale < 0:
		return bad("outlier channels %d (scale %g) for hidden size %d", s.OutlierChannels, s.OutlierScale, s.HiddenSize)
	}
	if s.isMoE() && (s.NumExperts <= 0 || s.NumExpertsPerTok <= 0 || s.NumExpertsPerTok > s.NumExperts || s.MoEIntermediateSize <= 0) {
		return bad("MoE needs 0 < num_experts_per_tok <= num_experts and moe_intermediate_size > 0")
	}
	if s.isQwen35() {
		rot := int(float64(s.HeadDim) * s.PartialRotaryFactor)
		sum := 0
		for _, v := range s.MRoPESection {
			sum += v
		}
		switch {
		case s.LinearNumKeyHeads <= 0 || s.LinearNumValueHeads%s.LinearNumKeyHeads != 0:
			return bad("linear_num_value_heads %d not a multiple of linear_num_key_heads %d", s.LinearNumValueHeads, s.LinearNumKeyHeads)
		case s.FullAttentionInterval <= 0:
			return bad("full_attention_interval must be positive")
		case 2*sum != rot:
			return bad("mrope_section %v sums to %d, want rotary dim %d / 2", s.MRoPESection, sum, rot)
		}
	}
	return nil
}

// layerTypes returns Qwen3.5's layer_types: layer i is full attention when
// (i+1) is a multiple of the interval (transformers Qwen3_5TextConfig).
// Other architectures have only full-attention layers.
func (s Spec) layerTypes() []string {
	t := make([]string, s.NumLayers)
	for i := range t {
		if !s.isQwen35() || (i+1)%s.FullAttentionInterval == 0 {
			t[i] = "full_attention"
		} else {
			t[i] = "linear_attention"
		}
	}
	return t
}
