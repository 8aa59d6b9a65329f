package convert

import (
	"fmt"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// qwen35: Qwen3_5ForConditionalGeneration / Qwen3_5ForCausalLM, text part (conversion/qwen.py
// Qwen3_5TextModel: _Qwen35MtpMixin, _Qwen35MRopeMixin, _LinearAttentionVReorderBase → Qwen3NextModel →
// Qwen2MoeModel → TextModel). Hybrid Gated-DeltaNet (linear_attn) + gated full attention layers.
//
// Transforms: every RMSNorm weight named *norm.weight except linear_attn.norm.weight is zero-centred and gets
// +1; A_log → -exp(A_log) as blk.N.ssm_a; dt_bias → blk.N.ssm_dt.bias; conv1d [C,1,K] is squeezed to [C,K]
// (F32); when linear_num_key_heads != linear_num_value_heads the V heads are reordered from grouped to tiled
// order in attn_qkv (V rows), attn_gate, ssm_beta, ssm_alpha, ssm_dt, ssm_a, ssm_conv1d (V channels) and
// ssm_out (columns). post_attention_layernorm becomes blk.N.post_attention_norm. The vision tower is dropped;
// the MTP block (mtp.*) is dropped unless Options.KeepMTP.
var qwen35Arch = archSpec{
	name:    "qwen35",
	classes: []string{"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"},
	moe:     true, next: true, qwen35: true,
	layer:    mergeMaps(denseAttention, qkNorm, denseFFN, linearAttention, nextN, map[string]string{"post_attention_layernorm": "post_attention_norm"}),
	defaults: map[string]int64{"head_dim": 256},
	setup:    qwen35Setup,
	extraKVs: qwen35KVs,
}

var linearAttention = map[string]string{
	"linear_attn.in_proj_qkv": "attn_qkv",
	"linear_attn.in_proj_z":   "attn_gate",
	"linear_attn.in_proj_b":   "ssm_beta",
	"linear_attn.in_proj_a":   "ssm_alpha",
	"linear_attn.conv1d":      "ssm_conv1d",
	"linear_attn.dt_proj":     "ssm_dt",
	"linear_attn.A_log":       "ssm_a",
	"linear_attn.norm":        "ssm_norm",
	"linear_attn.out_proj":    "ssm_out",
}

// nextN maps the MTP block's own tensors after _Qwen35MtpMixin renamed mtp.fc etc. to model.layers.L.*.
var nextN = map[string]string{
	"eh_proj":          "nextn.eh_proj",
	"enorm":            "nextn.enorm",
	"hnorm":            "nextn.hnorm",
	"shared_head.norm": "nextn.shared_head_norm",
}

// defaultMRoPESections is _Qwen35MRopeMixin._QWEN35_DEFAULT_MROPE_SECTION.
var defaultMRoPESections = []int32{11, 11, 10, 0}

// linearDims are the Gated-DeltaNet head counts and sizes.
type linearDims struct {
	kh, vh, dk, dv int64
	r              int64 // V heads per K head
	reorder        bool  // kh != vh: V heads are reordered
}

func qwen35Setup(b *builder) error {
	var err error
	get := func(key string) int64 {
		if err != nil {
			return 0
		}
		var v int64
		v, err = b.h.positive(key)
		return v
	}
	b.lin = linearDims{kh: get("linear_num_key_heads"), vh: get("linear_num_value_heads"),
		dk: get("linear_key_head_dim"), dv: get("linear_value_head_dim")}
	if err != nil {
		return err
	}
	const maxWidth = 1 << 32 // bounds kh·dk and vh·dv so no product of config values overflows
	if b.lin.kh*b.lin.dk > maxWidth || b.lin.vh*b.lin.dv > maxWidth {
		return b.h.errf("linear_num_value_heads", "linear attention widths %d×%d and %d×%d are implausibly large", b.lin.kh, b.lin.dk, b.lin.vh, b.lin.dv)
	}
	if b.lin.kh != b.lin.vh {
		if b.lin.vh%b.lin.kh != 0 {
			return b.h.errf("linear_num_value_heads", "%d is not a multiple of linear_num_key_heads %d", b.lin.vh, b.lin.kh)
		}
		b.lin.reorder = true
		b.lin.r = b.lin.vh / b.lin.kh
	}
	if b.keepMTP {
		n, _, err := b.h.uint32("mtp_num_hidden_layers")
		if err != nil {
			return err
		}
		b.nMTP = int64(n)
	}
	return nil
}

// filterMTP is _Qwen35MtpMixin.filter_tensors after TextModel's rules: mtp.* is dropped, or renamed to the
// layer-indexed nextn names when the MTP block is kept.
func (b *builder) filterMTP(name string) (string, bool) {
	if strings.HasPrefix(name, "model.mtp.") {
		name = strings.Replace(name, "model.", "", 1)
	}
	if !strings.HasPrefix(name, "mtp.") {
		return name, true
	}
	if !b.keepMTP {
		return "", false
	}
	remap := map[string]string{"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm", "norm": "shared_head.norm"}
	parts := strings.SplitN(name, ".", 4)
	if len(parts) == 4 && parts[1] == "layers" && isDigits(parts[2]) {
		idx := blockID(parts[2])
		return fmt.Sprintf("model.layers.%d.%s", b.nLayers+idx, parts[3]), true
	}
	if len(parts) == 3 {
		if r, ok := remap[parts[1]]; ok {
			return fmt.Sprintf("model.layers.%d.%s.%s", b.nLayers, r, parts[2]), true
		}
	}
	return name, true
}

// reorderV is _LinearAttentionVReorderBase.modify_tensors: V heads from grouped-by-K-head to tiled order.
func (b *builder) reorderV(t *pending) error {
	l := b.lin
	if !l.reorder || !strings.Contains(t.name, "linear_attn.") {
		return nil
	}
	qk := 2 * l.kh * l.dk
	var err error
	switch n := t.name; {
	case strings.Contains(n, ".in_proj_qkv."):
		err = b.reorderDim0(t, qk, l.dv)
	case strings.Contains(n, ".in_proj_z."):
		err = b.reorderDim0(t, 0, l.dv)
	case strings.Contains(n, ".in_proj_b."), strings.Contains(n, ".in_proj_a."):
		err = b.reorderDim0(t, 0, 1)
	case strings.Contains(n, ".A_log"), strings.Contains(n, ".dt_bias"), strings.Contains(n, ".dt_proj"):
		if len(t.shape) == 1 {
			err = b.reorderDim0(t, 0, 1)
		} else {
			err = b.reorderLastDim(t, 1)
		}
	case strings.Contains(n, ".conv1d"):
		err = b.reorderDim0(t, qk, l.dv)
	case strings.Contains(n, ".out_proj."):
		if len(t.shape) != 2 {
			return srcErr(t.st, "out_proj shape %v (want 2-D)", t.shape)
		}
		err = b.reorderLastDim(t, l.dv)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	t.addTransform("v-reorder")
	return nil
}

// reorderDim0 reorders the V heads (head size hd along dim 0) that follow the first offset entries of dim 0.
func (b *builder) reorderDim0(t *pending, offset, hd int64) error {
	l := b.lin
	if want := offset + l.vh*hd; t.shape[0] != want {
		return srcErr(t.st, "dim 0 of shape %v is %d, want %d (%d + linear_num_value_heads %d × %d)", t.shape, t.shape[0], want, offset, l.vh, hd)
	}
	if len(t.shape) == 1 {
		perm := make([]int32, 0, t.shape[0])
		for i := range offset {
			perm = append(perm, int32(i))
		}
		for _, p := range reorderPerm(l.kh, l.r, hd) {
			perm = append(perm, int32(offset)+p)
		}
		t.plan.colPerm = perm
		return nil
	}
	inner := int64(1) // rows per index of dim 0
	for _, d := range t.shape[1 : len(t.shape)-1] {
		inner *= d
	}
	var segs []segment
	if offset > 0 {
		segs = append(segs, segment{src: t.st.Name, rows: offset * inner})
	}
	segs = append(segs, segment{src: t.st.Name, rows: l.vh * hd * inner, srcRow0: offset * inner, block: hd * inner, kh: l.kh, r: l.r})
	t.plan.segs = segs
	return nil
}

// reorderLastDim reorders the V heads (head size hd) along the last dimension, within every row.
func (b *builder) reorderLastDim(t *pending, hd int64) error {
	l := b.lin
	if n := t.shape[len(t.shape)-1]; n != l.vh*hd {
		return srcErr(t.st, "last dim of shape %v is %d, want linear_num_value_heads %d × %d", t.shape, n, l.vh, hd)
	}
	t.plan.colPerm = reorderPerm(l.kh, l.r, hd)
	return nil
}

// nextModify is Qwen3NextModel.modify_tensors.
func (b *builder) nextModify(t *pending) error {
	switch n := t.name; {
	case strings.HasSuffix(n, ".A_log"):
		t.plan.op = opNegExp
		t.addTransform("-exp")
	case strings.HasSuffix(n, ".dt_bias"):
		t.name = n[:strings.LastIndex(n, ".dt_bias")] + ".dt_proj.bias"
	case strings.Contains(n, "conv1d"):
		var sq []int64
		for _, d := range t.shape {
			if d != 1 {
				sq = append(sq, d)
			}
		}
		if len(sq) == 0 || sq[len(sq)-1] != t.shape[len(t.shape)-1] {
			return srcErr(t.st, "conv1d shape %v (want [channels, 1, kernel] with kernel > 1)", t.shape)
		}
		t.shape = sq
		t.addTransform("squeeze")
	case strings.HasSuffix(n, "norm.weight") && !strings.HasSuffix(n, "linear_attn.norm.weight"):
		t.plan.op = opAddOne
		t.addTransform("+1")
	}
	if strings.Contains(t.name, "in_proj_qkvz") || strings.Contains(t.name, "in_proj_ba") {
		return srcErr(t.st, "legacy Qwen3-Next fused projection %q", t.name)
	}
	return nil
}

// qwen35KVs appends, in class-chain order, Qwen2MoeModel's, Qwen3NextModel's, the MRoPE mixin's and the
// MTP mixin's keys.
func qwen35KVs(b *builder, k *kvList) error {
	if err := moeKVs(b, k); err != nil {
		return err
	}
	arch := b.spec.name
	h := b.h
	for _, kv := range []struct{ key, hf string }{
		{"ssm.conv_kernel", "linear_conv_kernel_dim"},
		{"ssm.state_size", "linear_key_head_dim"},
		{"ssm.group_count", "linear_num_key_heads"},
		{"ssm.time_step_rank", "linear_num_value_heads"},
	} {
		v, err := h.reqUint32(kv.hf)
		if err != nil {
			return err
		}
		k.add(arch+"."+kv.key, gguf.Uint32(v))
	}
	inner := b.lin.dv * b.lin.vh
	if inner > 1<<32-1 {
		return h.errf("linear_value_head_dim", "inner size %d overflows uint32", inner)
	}
	k.add(arch+".ssm.inner_size", gguf.Uint32(uint32(inner)))
	interval := uint32(4)
	if v, ok, err := h.uint32("full_attention_interval"); err != nil {
		return err
	} else if ok {
		interval = v
	}
	k.add(arch+".full_attention_interval", gguf.Uint32(interval))

	var ropeDim int64
	if v, ok, err := h.int("head_dim"); err != nil {
		return err
	} else if ok {
		ropeDim = v
	} else {
		hidden, err := h.positive("hidden_size")
		if err != nil {
			return err
		}
		heads, err := h.positive("num_attention_heads")
		if err != nil {
			return err
		}
		ropeDim = hidden / heads
	}
	factor := 0.25
	if v, ok, err := h.float("partial_rotary_factor"); err != nil {
		return err
	} else if ok {
		factor = v
	} else if x, ok := b.rope["partial_rotary_factor"]; ok {
		f, err := jsonFloat(x)
		if err != nil {
			return h.errf("rope_parameters", "partial_rotary_factor: %v", err)
		}
		factor = f
	}
	dim := int64(float64(ropeDim) * factor)
	if dim < 0 || dim > 1<<32-1 {
		return h.errf("partial_rotary_factor", "rope dimension %d out of range", dim)
	}
	k.add(arch+".rope.dimension_count", gguf.Uint32(uint32(dim)))

	if _, ok := b.rope["mrope_section"]; !ok {
		k.add(arch+".rope.dimension_sections", gguf.Int32s(append([]int32(nil), defaultMRoPESections...)))
	}
	if b.nMTP > 0 {
		k.add(arch+".nextn_predict_layers", gguf.Uint32(uint32(b.nMTP)))
	}
	return nil
}
