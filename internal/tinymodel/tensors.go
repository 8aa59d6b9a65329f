package tinymodel

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// initKind says how a tensor's values are drawn.
type initKind int

const (
	initNormal initKind = iota // mean + std·N(0,1)
	// initALog draws Qwen3.5's A_log as log U(0.02, 2). transformers
	// initialises log U(0.01, 16); the smaller range keeps the per-token
	// decay exp(-A·softplus(·)) between ~0.07 and ~0.97, so the recurrent
	// state carries information across several tokens and a wrong state
	// update shows in the logits.
	initALog
)

// tensorSpec is one tensor to generate.
type tensorSpec struct {
	name  string
	shape []int64
	kind  initKind
	mean  float64
	std   float64
	// keepF32 marks tensors the released Qwen3.5 BF16 checkpoints store in
	// F32 (linear_attn.A_log and linear_attn.norm.weight).
	keepF32 bool
	// outliers, when set, marks the outlier columns of the last dimension
	// (Spec.OutlierChannels): a norm's value there is scale times its gain
	// (centre is the stored offset of the gain: 0 for Qwen's plain norms, -1
	// for Qwen3.5's zero-centred ones), an embedding's is heavy-tailed.
	outliers []bool
	scale    float64
	centre   float64
	heavy    bool
}

// tensorDType is the dtype a tensor is stored in.
func (s Spec) tensorDType(t tensorSpec) string {
	if t.keepF32 {
		return F32
	}
	return s.DType
}

func (t tensorSpec) numElements() int64 {
	n := int64(1)
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// tensors lists every tensor of the checkpoint, sorted by name (the order
// save_pretrained gives same-dtype tensors).
func (s Spec) tensors() []tensorSpec {
	var ts []tensorSpec
	d := int64(s.HiddenSize)
	add := func(name string, std float64, shape ...int64) {
		ts = append(ts, tensorSpec{name: name, shape: shape, std: std})
	}
	// Qwen2/Qwen3 RMSNorm multiplies by w (init 1); Qwen3.5's zero-centred
	// RMSNorm multiplies by (1 + w) (init 0), so its stored weight is w-1.
	norm := func(name string, n int64) {
		mean := 1.0
		if s.isQwen35() {
			mean = 0
		}
		ts = append(ts, tensorSpec{name: name, shape: []int64{n}, mean: mean, std: s.NormStd})
	}
	w := s.WeightStd
	prefix := "model."
	if s.isQwen35() {
		prefix = "model.language_model."
	}
	add(prefix+"embed_tokens.weight", s.EmbedStd, int64(s.VocabSize), d)
	norm(prefix+"norm.weight", d)
	defer func() { s.markOutliers(ts) }()
	if !s.TiedEmbeddings {
		add("lm_head.weight", s.LMHeadStd, int64(s.VocabSize), d)
	}
	types := s.layerTypes()
	for i := range s.NumLayers {
		lp := fmt.Sprintf("%slayers.%d.", prefix, i)
		full := !s.isQwen35() || types[i] == "full_attention"
		ts = append(ts, s.layerTensors(lp, full)...)
	}
	if s.isQwen35() && s.MTPLayers > 0 {
		add("mtp.fc.weight", w, d, 2*d)
		norm("mtp.pre_fc_norm_embedding.weight", d)
		norm("mtp.pre_fc_norm_hidden.weight", d)
		norm("mtp.norm.weight", d)
		for i := range s.MTPLayers {
			ts = append(ts, s.layerTensors(fmt.Sprintf("mtp.layers.%d.", i), true)...)
		}
	}
	if s.isQwen35() && s.Vision {
		ts = append(ts, s.visionTensors()...)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	return ts
}

// layerTensors lists one decoder layer: attention (full or linear), norms
// and MLP (dense or mixture of experts).
func (s Spec) layerTensors(lp string, full bool) []tensorSpec {
	var ts []tensorSpec
	d := int64(s.HiddenSize)
	w := s.WeightStd
	add := func(name string, std float64, shape ...int64) {
		ts = append(ts, tensorSpec{name: lp + name, shape: shape, std: std})
	}
	normMean := 1.0
	if s.isQwen35() {
		normMean = 0
	}
	norm := func(name string, n int64, mean float64) {
		ts = append(ts, tensorSpec{name: lp + name, shape: []int64{n}, mean: mean, std: s.NormStd})
	}
	norm("input_layernorm.weight", d, normMean)
	norm("post_attention_layernorm.weight", d, normMean)
	h, kv, hd := int64(s.NumHeads), int64(s.NumKVHeads), int64(s.HeadDim)
	if full {
		qRows := h * hd
		if s.isQwen35() {
			qRows *= 2 // attn_output_gate: query and gate interleaved per head
		}
		add("self_attn.q_proj.weight", w, qRows, d)
		add("self_attn.k_proj.weight", w, kv*hd, d)
		add("self_attn.v_proj.weight", w, kv*hd, d)
		add("self_attn.o_proj.weight", w, d, h*hd)
		if s.AttentionBias {
			add("self_attn.q_proj.bias", w/2, h*hd)
			add("self_attn.k_proj.bias", w/2, kv*hd)
			add("self_attn.v_proj.bias", w/2, kv*hd)
		}
		if s.Arch != Qwen2 {
			norm("self_attn.q_norm.weight", hd, normMean)
			norm("self_attn.k_norm.weight", hd, normMean)
		}
	} else {
		kh, vh := int64(s.LinearNumKeyHeads), int64(s.LinearNumValueHeads)
		dk, dv := int64(s.LinearKeyHeadDim), int64(s.LinearValueHeadDim)
		conv := 2*kh*dk + vh*dv
		add("linear_attn.in_proj_qkv.weight", w, conv, d)
		add("linear_attn.in_proj_z.weight", w, vh*dv, d)
		add("linear_attn.in_proj_b.weight", w, vh, d)
		add("linear_attn.in_proj_a.weight", w, vh, d)
		add("linear_attn.conv1d.weight", 0.2, conv, 1, int64(s.LinearConvKernel))
		ts = append(ts,
			tensorSpec{name: lp + "linear_attn.dt_bias", shape: []int64{vh}, mean: 1, std: 0.1},
			tensorSpec{name: lp + "linear_attn.A_log", shape: []int64{vh}, kind: initALog, keepF32: true},
			// Qwen3_5RMSNormGated: a plain weight (init 1), not zero-centred.
			tensorSpec{name: lp + "linear_attn.norm.weight", shape: []int64{dv}, mean: 1, std: s.NormStd, keepF32: true})
		add("linear_attn.out_proj.weight", w, d, vh*dv)
	}
	m := s.MLPStd // gate/up projections
	switch {
	case s.Arch == Qwen3MoE:
		e, f := int64(s.NumExperts), int64(s.MoEIntermediateSize)
		add("mlp.gate.weight", 0.1, e, d)
		for j := range e {
			add(fmt.Sprintf("mlp.experts.%d.gate_proj.weight", j), m, f, d)
			add(fmt.Sprintf("mlp.experts.%d.up_proj.weight", j), m, f, d)
			add(fmt.Sprintf("mlp.experts.%d.down_proj.weight", j), w, d, f)
		}
	case s.Arch == Qwen35MoE:
		// Fused expert tensors as the released Qwen3.5 MoE checkpoints store
		// them: gate_up_proj [E, 2F, D] (gate rows first), down_proj [E, D, F].
		e, f, sf := int64(s.NumExperts), int64(s.MoEIntermediateSize), int64(s.SharedExpertIntermediateSize)
		add("mlp.gate.weight", 0.1, e, d)
		add("mlp.experts.gate_up_proj", m, e, 2*f, d)
		add("mlp.experts.down_proj", w, e, d, f)
		add("mlp.shared_expert.gate_proj.weight", m, sf, d)
		add("mlp.shared_expert.up_proj.weight", m, sf, d)
		add("mlp.shared_expert.down_proj.weight", w, d, sf)
		add("mlp.shared_expert_gate.weight", 0.1, 1, d)
	default:
		f := int64(s.IntermediateSize)
		add("mlp.gate_proj.weight", m, f, d)
		add("mlp.up_proj.weight", m, f, d)
		add("mlp.down_proj.weight", w, d, f)
	}
	return ts
}

// Tiny vision tower (Qwen3_5VisionModel, depth 1) that converters must skip.
const (
	visionHidden    = 32
	visionFFN       = 64
	visionPatch     = 4
	visionTemporal  = 2
	visionMerge     = 2
	visionPositions = 16
)

func (s Spec) visionTensors() []tensorSpec {
	var ts []tensorSpec
	add := func(name string, std float64, shape ...int64) {
		ts = append(ts, tensorSpec{name: "model.visual." + name, shape: shape, std: std})
	}
	ln := func(name string, n int64) {
		ts = append(ts,
			tensorSpec{name: "model.visual." + name + ".weight", shape: []int64{n}, mean: 1, std: 0.05},
			tensorSpec{name: "model.visual." + name + ".bias", shape: []int64{n}, std: 0.02})
	}
	vh, vf := int64(visionHidden), int64(visionFFN)
	merged := vh * visionMerge * visionMerge
	add("patch_embed.proj.weight", 0.05, vh, 3, visionTemporal, visionPatch, visionPatch)
	add("patch_embed.proj.bias", 0.02, vh)
	add("pos_embed.weight", 0.05, visionPositions, vh)
	ln("blocks.0.norm1", vh)
	ln("blocks.0.norm2", vh)
	add("blocks.0.attn.qkv.weight", 0.05, 3*vh, vh)
	add("blocks.0.attn.qkv.bias", 0.02, 3*vh)
	add("blocks.0.attn.proj.weight", 0.05, vh, vh)
	add("blocks.0.attn.proj.bias", 0.02, vh)
	add("blocks.0.mlp.linear_fc1.weight", 0.05, vf, vh)
	add("blocks.0.mlp.linear_fc1.bias", 0.02, vf)
	add("blocks.0.mlp.linear_fc2.weight", 0.05, vh, vf)
	add("blocks.0.mlp.linear_fc2.bias", 0.02, vh)
	ln("merger.norm", vh)
	add("merger.linear_fc1.weight", 0.05, merged, merged)
	add("merger.linear_fc1.bias", 0.02, merged)
	add("merger.linear_fc2.weight", 0.05, int64(s.HiddenSize), merged)
	add("merger.linear_fc2.bias", 0.02, int64(s.HiddenSize))
	return ts
}

// fill writes the values of elements [off, off+len(dst)) of tensor t. The
// stream is positioned by drawing, so callers go through a tensor in order
// with one generator and pass the offset of every chunk.
func (t tensorSpec) fill(r *rng, dst []float32, off int64) {
	cols := int64(len(t.outliers))
	for i := range dst {
		switch {
		case t.kind == initALog:
			dst[i] = float32(math.Log(0.02 + 1.98*r.uniform()))
		case cols > 0 && t.outliers[(off+int64(i))%cols]:
			if t.heavy {
				dst[i] = float32(t.std * r.studentT3())
			} else { // the gain scaled, stored relative to the norm's centre
				gain := t.mean - t.centre + t.std*r.normal()
				dst[i] = float32(gain*t.scale + t.centre)
			}
		default:
			dst[i] = float32(t.mean + t.std*r.normal())
		}
	}
}

// markOutliers marks the outlier columns of the layers' hidden-size norms and
// of the embedding (Spec.OutlierChannels), which are the same dimensions
// everywhere. The final norm keeps ordinary gains, so the logits keep their
// scale: the outliers live in what the layers' matrices multiply, as in
// trained models.
func (s Spec) markOutliers(ts []tensorSpec) {
	if s.OutlierChannels == 0 {
		return
	}
	d := s.HiddenSize
	mark := make([]bool, d)
	r := streamFor(s.Seed, "outlier-channels")
	for n := 0; n < s.OutlierChannels; {
		if c := int(r.next() % uint64(d)); !mark[c] {
			mark[c] = true
			n++
		}
	}
	centre := 0.0
	if s.isQwen35() {
		centre = -1 // the stored weight w of a zero-centred norm is the gain minus 1
	}
	for i := range ts {
		t := &ts[i]
		hiddenNorm := len(t.shape) == 1 && t.shape[0] == int64(d) && strings.HasSuffix(t.name, "layernorm.weight")
		embed := strings.HasSuffix(t.name, "embed_tokens.weight")
		if hiddenNorm || embed {
			t.outliers, t.scale, t.centre, t.heavy = mark, s.OutlierScale, centre, embed
		}
	}
}

// values returns the whole tensor (for small tensors and tests).
func (s Spec) values(t tensorSpec) []float32 {
	v := make([]float32, t.numElements())
	t.fill(streamFor(s.Seed, t.name), v, 0)
	return v
}
