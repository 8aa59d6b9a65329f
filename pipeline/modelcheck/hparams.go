package modelcheck

import (
	"fmt"
	"math"
	"strconv"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Limits. maxLayers and maxExperts are llama.cpp's LLAMA_MAX_LAYERS and LLAMA_MAX_EXPERTS
// (src/llama-hparams.h), which its loader asserts; maxDim bounds every width so products of a few of them cannot
// overflow (real models stay below 2^18).
const (
	maxLayers  = 512
	maxExperts = 1024
	maxDim     = 1 << 24
	maxConv    = 1 << 10
	// maxWidth bounds attention and linear-attention widths relative to the embedding, and maxState the
	// linear-attention head size, so the memory the engine allocates at load (KV cache, recurrent state,
	// compute buffers) stays proportional to the weights (real Qwen models: widths 1-4× the embedding,
	// head sizes 128-256).
	maxWidth = 16
	maxState = 1 << 10
)

// hparams are the hyper-parameters a Qwen model's graph is built from, read as the engines read them.
type hparams struct {
	nAll, nextn, n int // block_count, MTP layers, trunk layers (nAll − nextn)
	embd           uint64
	ff             uint64 // feed_forward_length; 0 when absent (MoE)
	heads          uint64
	kvHeads        []uint64 // per layer (len nAll); 0 on Qwen3.5's recurrent layers
	headDim        uint64   // key and value head size
	rope           uint64   // rotary dimensions

	moe                  bool
	experts, used        uint64
	ffExp, ffShared      uint64
	ssmConv, ssmState    uint64 // Qwen3.5 linear attention: conv kernel, head size S
	ssmGroups, ssmVHeads uint64 // K heads G, V heads R
	recurrent            []bool // per layer (len nAll)

	vocabRows uint64 // rows of token_embd (set by checkTensors)
}

// hybrid reports whether arch mixes gated-delta-net (recurrent) layers with full attention (Qwen3.5).
func hybrid(arch string) bool { return arch == "qwen35" || arch == "qwen35moe" }

// value reads a metadata key as the engines do: the GGUF type must match, or both treat the key as absent (and
// Ollama's engine goes on with zero). It reports false after recording a problem.
func (c *checker) value(key string, want gguf.ValueType, required bool) (any, bool, bool) {
	v, ok := c.kv[key]
	if !ok {
		if required {
			c.keyf(key, "missing")
			return nil, false, false
		}
		return nil, false, true
	}
	if v.Type != want {
		c.keyf(key, "is a %s, want a %s", typeName(v), want)
		return nil, false, false
	}
	return v.V, true, true
}

func typeName(v gguf.Value) string {
	if a, ok := v.V.(gguf.Array); ok {
		return "array of " + a.Elem.String()
	}
	return v.Type.String()
}

// u32 reads a uint32 key in [lo, hi]; absent optional keys return present=false.
func (c *checker) u32(key string, required bool, lo, hi uint64) (val uint64, present, ok bool) {
	x, present, ok := c.value(key, gguf.ValueUint32, required)
	if !ok || !present {
		return 0, present, ok
	}
	val = uint64(x.(uint32))
	if val < lo || val > hi {
		c.keyf(key, "%d is out of range (want %d..%d)", val, lo, hi)
		return val, true, false
	}
	return val, true, true
}

// f32 reads a finite float32 key.
func (c *checker) f32(key string, required bool) (val float64, present, ok bool) {
	x, present, ok := c.value(key, gguf.ValueFloat32, required)
	if !ok || !present {
		return 0, present, ok
	}
	val = float64(x.(float32))
	if math.IsNaN(val) || math.IsInf(val, 0) {
		c.keyf(key, "%v is not a finite number", val)
		return val, true, false
	}
	return val, true, true
}

// f32s formats a float32 value read as float64 without float64 digits ("1e-06", not "9.999999974752427e-07").
func f32s(v float64) string { return strconv.FormatFloat(v, 'g', -1, 32) }

func (c *checker) str(key string) (string, bool, bool) {
	x, present, ok := c.value(key, gguf.ValueString, false)
	if !ok || !present {
		return "", present, ok
	}
	return x.(string), true, true
}

func (c *checker) boolean(key string) bool {
	_, _, ok := c.value(key, gguf.ValueBool, false)
	return ok
}

// hparams reads and cross-checks the hyper-parameters of c.arch. It reports false when any is missing or
// broken; the tensor shapes cannot be derived then.
func (c *checker) hparams() (*hparams, bool) {
	start := len(c.problems)
	h := &hparams{moe: c.arch == "qwen3moe" || c.arch == "qwen35moe"}
	isHybrid := hybrid(c.arch)

	nAll, _, okN := c.u32(c.k("block_count"), true, 1, maxLayers)
	h.nAll = int(nAll)
	nextn, present, ok := c.u32(c.k("nextn_predict_layers"), false, 0, maxLayers)
	switch {
	case !ok || !okN:
	case present && nextn > 0 && !isHybrid:
		c.keyf(c.k("nextn_predict_layers"), "%d, but %s has no multi-token-prediction layers", nextn, c.arch)
	case nextn >= nAll:
		c.keyf(c.k("nextn_predict_layers"), "%d is not less than block_count %d", nextn, nAll)
	case c.o.Serve && nextn > 0:
		c.add(Problem{Key: c.k("nextn_predict_layers"), Unsupported: true,
			Msg: fmt.Sprintf("%d: the file carries a multi-token-prediction block that Ollama's engine cannot load; re-convert without it (phonellm convert, or llama.cpp's converter with --no-mtp)", nextn)})
		return h, false
	default:
		h.nextn = int(nextn)
	}
	h.n = h.nAll - h.nextn

	c.u32(c.k("context_length"), true, 1, math.MaxUint32)
	h.embd, _, _ = c.u32(c.k("embedding_length"), true, 1, maxDim)
	h.ff, _, _ = c.u32(c.k("feed_forward_length"), !h.moe, 1, maxDim)
	h.heads, _, _ = c.u32(c.k("attention.head_count"), true, 1, maxDim)
	if pt, present, ok := c.u32(c.k("pooling_type"), false, 0, math.MaxUint32); ok && present && pt != 0 && c.o.Serve {
		c.add(Problem{Key: c.k("pooling_type"), Unsupported: true, Msg: fmt.Sprintf("%d: the built-in engine does not serve embedding models (want 0 or absent)", pt)})
	}
	if vb, present, ok := c.u32(c.k("vision.block_count"), false, 0, math.MaxUint32); ok && present && vb != 0 {
		c.add(Problem{Key: c.k("vision.block_count"), Unsupported: true, Msg: fmt.Sprintf("%d: a vision tower inside the model file is not supported (llama.cpp keeps it in a separate mmproj file)", vb)})
	}
	if len(c.problems) > start || h.embd == 0 || h.heads == 0 {
		return h, false
	}

	c.headDims(h)
	c.rope(h)
	if eps, _, ok := c.f32(c.k("attention.layer_norm_rms_epsilon"), true); ok && eps < 0 {
		c.keyf(c.k("attention.layer_norm_rms_epsilon"), "%s is negative (ggml's RMS norm asserts eps ≥ 0)", f32s(eps))
	}
	if s, present, ok := c.f32(c.k("attention.scale"), false); ok && present && s <= 0 {
		c.keyf(c.k("attention.scale"), "%s, want a positive scale", f32s(s))
	}
	c.experts(h)
	if isHybrid {
		c.linearAttention(h)
	} else {
		c.kvHeads(h)
	}
	return h, len(c.problems) == start
}

// headDims derives the key/value head size: attention.key_length and value_length, or embedding_length /
// head_count when absent (llama.cpp's defaults); the two must agree (both engines use one head size).
func (c *checker) headDims(h *hparams) {
	k, kPresent, okK := c.u32(c.k("attention.key_length"), false, 1, maxDim)
	v, vPresent, okV := c.u32(c.k("attention.value_length"), false, 1, maxDim)
	if !okK || !okV {
		return
	}
	if (!kPresent || !vPresent) && h.embd%h.heads != 0 {
		c.keyf(c.k("attention.head_count"), "%d does not divide embedding_length %d, and attention.key_length/value_length are not given", h.heads, h.embd)
		return
	}
	if !kPresent {
		k = h.embd / h.heads
	}
	if !vPresent {
		v = h.embd / h.heads
	}
	if k != v {
		c.keyf(c.k("attention.value_length"), "%d differs from the key head size %d (the engines use one head size)", v, k)
		return
	}
	h.headDim = k
	if h.heads*k > maxWidth*h.embd {
		// Plausibility: the KV cache and the activations grow with the attention width, which would no longer
		// be proportional to the weights in the file (real models: 1-4× the embedding).
		c.keyf(c.k("attention.key_length"), "%d × head_count %d = %d is more than %d× embedding_length %d", k, h.heads, h.heads*k, maxWidth, h.embd)
		return
	}
	if c.arch == "qwen2" && h.heads*k != h.embd {
		// llama.cpp's qwen2 graph projects to {n_embd, n_embd}.
		c.keyf(c.k("attention.key_length"), "%d × head_count %d = %d, want embedding_length %d for qwen2", k, h.heads, h.heads*k, h.embd)
	}
}

// rope checks the rotary embedding parameters.
func (c *checker) rope(h *hparams) {
	if base, _, ok := c.f32(c.k("rope.freq_base"), true); ok && base <= 1 {
		// The rotation frequencies are base^(-2i/d): a base below 1 makes them grow with i, and a tiny one
		// overflows them to infinity (NaN logits); yarn divides by log(base).
		c.keyf(c.k("rope.freq_base"), "%s, want a base above 1 (the rotation frequencies are base^(-2i/d))", f32s(base))
	}
	isHybrid := hybrid(c.arch)
	if h.headDim == 0 {
		return
	}
	dims, present, ok := c.u32(c.k("rope.dimension_count"), false, 1, maxDim)
	if !ok {
		return
	}
	if !present {
		dims = h.headDim
	}
	switch {
	case !isHybrid && dims != h.headDim:
		c.keyf(c.k("rope.dimension_count"), "%d, want the head size %d (llama.cpp's %s graph rotates whole heads)", dims, h.headDim, c.arch)
		return
	case dims > h.headDim:
		c.keyf(c.k("rope.dimension_count"), "%d is larger than the head size %d", dims, h.headDim)
		return
	case dims%2 != 0:
		c.keyf(c.k("rope.dimension_count"), "%d is odd (rotations pair dimensions; ggml asserts an even count)", dims)
		return
	}
	h.rope = dims

	typ := ""
	for _, key := range []string{c.k("rope.scaling.type"), c.k("rope.type")} {
		if key == c.k("rope.type") && !isHybrid {
			break // only Ollama's qwen3next graph reads rope.type
		}
		s, present, ok := c.str(key)
		if !ok || !present {
			continue
		}
		switch s {
		case "", "none", "linear", "yarn":
		default:
			c.keyf(key, "%q, want none, linear or yarn", s)
		}
		if typ == "" {
			typ = s
		}
	}
	factor, present, ok := c.f32(c.k("rope.scaling.factor"), false)
	switch {
	case !ok:
	case present && factor <= 0:
		c.keyf(c.k("rope.scaling.factor"), "%s, want a positive factor (the frequency scale is its inverse)", f32s(factor))
	case present && typ == "yarn" && factor < 1:
		c.keyf(c.k("rope.scaling.factor"), "%s, want at least 1 for yarn scaling", f32s(factor))
	}
	c.u32(c.k("rope.scaling.original_context_length"), false, 1, math.MaxInt32)

	if isHybrid {
		c.mropeSections(h)
	}
}

// mropeSections checks Qwen3.5's multimodal rope sections. Ollama reads the first non-empty int32 array among
// mrope_sections, rope.mrope_section and rope.dimension_sections; llama.cpp requires rope.dimension_sections.
// ggml divides by the sum of the sections and asserts it is positive and at most the head size.
func (c *checker) mropeSections(h *hparams) {
	for _, suffix := range []string{"mrope_sections", "rope.mrope_section", "rope.dimension_sections"} {
		key := c.k(suffix)
		x, present, ok := c.value(key, gguf.ValueArray, suffix == "rope.dimension_sections")
		if !ok || !present {
			continue
		}
		a := x.(gguf.Array)
		vals, isI32 := a.Values.([]int32)
		switch {
		case !isI32:
			c.keyf(key, "is an array of %s, want int32", a.Elem)
			continue
		case len(vals) < 3 || len(vals) > 4:
			c.keyf(key, "has %d values, want 4 (or 3)", len(vals))
			continue
		}
		var sum int64
		for i, s := range vals {
			if s < 0 {
				c.keyf(key, "section %d is %d, want ≥ 0", i, s)
				return
			}
			sum += int64(s)
		}
		if vals[0] == 0 && vals[1] == 0 && vals[2] == 0 {
			c.keyf(key, "%v: the first three sections are all zero", vals)
		} else if uint64(sum)*2 > h.rope {
			c.keyf(key, "%v: the sections cover %d rotary pairs, more than the %d of rope.dimension_count %d", vals, sum, h.rope/2, h.rope)
		}
	}
	c.boolean(c.k("rope.mrope_interleaved"))
	c.boolean(c.k("mrope_interleaved"))
}

// kvHeads reads attention.head_count_kv for the attention-only architectures: a scalar (Ollama's qwen2 and
// qwen3 read it as one uint32, and an absent or mistyped key becomes 0 heads).
func (c *checker) kvHeads(h *hparams) {
	kv, _, ok := c.u32(c.k("attention.head_count_kv"), true, 1, maxDim)
	if !ok {
		return
	}
	if h.heads%kv != 0 {
		c.keyf(c.k("attention.head_count"), "%d is not a multiple of attention.head_count_kv %d (query heads share key/value heads in groups)", h.heads, kv)
		return
	}
	h.kvHeads = make([]uint64, h.nAll)
	for i := range h.kvHeads {
		h.kvHeads[i] = kv
	}
	h.recurrent = make([]bool, h.nAll)
}

// experts reads the mixture-of-experts sizes (and refuses them on dense architectures, where Ollama's qwen35
// graph would switch to experts the file does not have).
func (c *checker) experts(h *hparams) {
	count, present, ok := c.u32(c.k("expert_count"), h.moe, 0, maxExperts)
	if !ok {
		return
	}
	used, usedPresent, okU := c.u32(c.k("expert_used_count"), h.moe, 0, maxExperts)
	if !okU {
		return
	}
	if !h.moe {
		if (present && count != 0) || (usedPresent && used != 0) {
			c.keyf(c.k("expert_count"), "%d experts (%d used), but %s is a dense architecture", count, used, c.arch)
		}
		return
	}
	switch {
	case count == 0:
		c.keyf(c.k("expert_count"), "0, want at least 1 expert for %s", c.arch)
		return
	case used == 0 || used > count:
		c.keyf(c.k("expert_used_count"), "%d, want 1..expert_count %d", used, count)
		return
	}
	for _, suffix := range []string{"expert_group_count", "expert_group_used_count"} {
		if g, present, ok := c.u32(c.k(suffix), false, 0, maxExperts); ok && present && g > 1 {
			c.keyf(c.k(suffix), "%d: grouped expert routing is not part of %s", g, c.arch)
		}
	}
	c.boolean(c.k("norm_top_k_prob"))
	h.experts, h.used = count, used
	ffExp, present, ok := c.u32(c.k("expert_feed_forward_length"), false, 1, maxDim)
	if !ok {
		return
	}
	if !present {
		ffExp = h.ff / used // llama.cpp's fallback
		if ffExp == 0 {
			c.keyf(c.k("expert_feed_forward_length"), "missing, and feed_forward_length / expert_used_count is 0")
			return
		}
	}
	h.ffExp = ffExp
	if c.arch == "qwen35moe" {
		shared, present, ok := c.u32(c.k("expert_shared_feed_forward_length"), false, 1, maxDim)
		if !ok {
			return
		}
		if !present {
			if h.ff == 0 {
				c.keyf(c.k("expert_shared_feed_forward_length"), "missing, and so is feed_forward_length")
				return
			}
			shared = h.ff
		}
		h.ffShared = shared
	}
}

// linearAttention reads Qwen3.5's gated-delta-net sizes and decides which layers are recurrent.
func (c *checker) linearAttention(h *hparams) {
	start := len(c.problems)
	h.ssmConv, _, _ = c.u32(c.k("ssm.conv_kernel"), true, 2, maxConv)
	h.ssmState, _, _ = c.u32(c.k("ssm.state_size"), true, 1, maxDim)
	h.ssmGroups, _, _ = c.u32(c.k("ssm.group_count"), true, 1, maxDim)
	h.ssmVHeads, _, _ = c.u32(c.k("ssm.time_step_rank"), true, 1, maxDim)
	inner, _, okInner := c.u32(c.k("ssm.inner_size"), true, 1, math.MaxUint32)
	c.boolean(c.k("ssm.v_head_reordered"))
	if len(c.problems) > start {
		return
	}
	if okInner && inner != h.ssmState*h.ssmVHeads {
		// Ollama's engine derives the value head size as inner_size / time_step_rank and requires it to equal
		// the key head size (state_size); llama.cpp uses state_size for both.
		c.keyf(c.k("ssm.inner_size"), "%d, want ssm.state_size × ssm.time_step_rank = %d × %d = %d", inner, h.ssmState, h.ssmVHeads, h.ssmState*h.ssmVHeads)
		return
	}
	if h.ssmState > maxState || h.ssmState*h.ssmVHeads > maxWidth*h.embd {
		// Plausibility: the recurrent state of a layer is state_size² × time_step_rank values per sequence.
		c.keyf(c.k("ssm.state_size"), "%d × ssm.time_step_rank %d is implausibly large (want state_size ≤ %d and inner_size ≤ %d× embedding_length %d)",
			h.ssmState, h.ssmVHeads, maxState, maxWidth, h.embd)
		return
	}
	if h.ssmVHeads%h.ssmGroups != 0 {
		c.keyf(c.k("ssm.time_step_rank"), "%d value heads is not a multiple of ssm.group_count %d key heads", h.ssmVHeads, h.ssmGroups)
		return
	}

	// attention.head_count_kv: a scalar, or (Ollama's layout) one value per layer, 0 on recurrent layers.
	key := c.k("attention.head_count_kv")
	v, ok := c.kv[key]
	if !ok {
		c.keyf(key, "missing")
		return
	}
	var perLayer []uint64
	switch x := v.V.(type) {
	case uint32:
		if x == 0 || h.heads%uint64(x) != 0 {
			c.keyf(key, "%d, want a divisor of attention.head_count %d", x, h.heads)
			return
		}
	case gguf.Array:
		switch vals := x.Values.(type) {
		case []uint32:
			for _, n := range vals {
				perLayer = append(perLayer, uint64(n))
			}
		case []int32:
			for i, n := range vals {
				if n < 0 {
					c.keyf(key, "layer %d has %d heads", i, n)
					return
				}
				perLayer = append(perLayer, uint64(n))
			}
		default:
			c.keyf(key, "is an array of %s, want uint32", x.Elem)
			return
		}
		if len(perLayer) != h.nAll {
			c.keyf(key, "has %d values, want one per layer (block_count %d)", len(perLayer), h.nAll)
			return
		}
		for i, n := range perLayer {
			if n != 0 && h.heads%n != 0 {
				c.keyf(key, "layer %d: %d, want a divisor of attention.head_count %d", i, n, h.heads)
				return
			}
		}
	default:
		c.keyf(key, "is a %s, want a uint32", typeName(v))
		return
	}

	// The layer pattern. Ollama's engine takes it from a per-layer head_count_kv that mixes zero and non-zero
	// values, else from full_attention_interval (default min(4, block_count)); llama.cpp from
	// full_attention_interval (default 4), its MTP layers never recurrent.
	interval, present, ok := c.u32(c.k("full_attention_interval"), false, 1, maxLayers)
	if !ok {
		return
	}
	if !present {
		if h.nAll < 4 {
			c.keyf(c.k("full_attention_interval"), "missing with block_count %d < 4 (the engines' defaults differ)", h.nAll)
			return
		}
		interval = 4
	}
	if interval < 2 || interval > uint64(h.nAll) {
		c.keyf(c.k("full_attention_interval"), "%d, want 2..block_count %d (a mix of recurrent and full-attention layers)", interval, h.nAll)
		return
	}
	byInterval := make([]bool, h.nAll)
	for i := range byInterval {
		byInterval[i] = (uint64(i)+1)%interval != 0
	}
	h.recurrent = byInterval
	if perLayer != nil {
		zero, nonzero := false, false
		for _, n := range perLayer {
			zero, nonzero = zero || n == 0, nonzero || n != 0
		}
		if !nonzero {
			c.keyf(key, "every layer has 0 key/value heads")
			return
		}
		if zero {
			byArray := make([]bool, h.nAll)
			for i, n := range perLayer {
				byArray[i] = n == 0
			}
			for i := 0; i < h.n; i++ {
				if byArray[i] != byInterval[i] && present {
					c.keyf(key, "layer %d is %s by its head count but %s by full_attention_interval %d", i, kind(byArray[i]), kind(byInterval[i]), interval)
					return
				}
			}
			h.recurrent = byArray
		}
	}
	if x, ok := c.kv[c.k("attention.recurrent_layers")]; ok {
		if a, isArr := x.V.(gguf.Array); !isArr || a.Len() != h.nAll {
			c.keyf(c.k("attention.recurrent_layers"), "want one value per layer (block_count %d)", h.nAll)
			return
		} else if !samePattern(a, h.recurrent[:h.n]) {
			c.keyf(c.k("attention.recurrent_layers"), "disagrees with the layer pattern of head_count_kv/full_attention_interval, which Ollama's engine uses")
			return
		}
	}
	mixedFull, mixedRec := false, false
	for i := 0; i < h.n; i++ {
		mixedRec, mixedFull = mixedRec || h.recurrent[i], mixedFull || !h.recurrent[i]
	}
	if !mixedFull || !mixedRec {
		c.keyf(c.k("full_attention_interval"), "layers 0..%d are not a mix of recurrent and full-attention layers", h.n-1)
		return
	}
	h.kvHeads = make([]uint64, h.nAll)
	for i := range h.kvHeads {
		switch {
		case perLayer != nil && perLayer[i] != 0:
			h.kvHeads[i] = perLayer[i]
		case perLayer != nil:
			// A recurrent layer, or an MTP layer of an array that leaves it 0: take the first non-zero count.
			for _, n := range perLayer {
				if n != 0 {
					h.kvHeads[i] = n
					break
				}
			}
		default:
			h.kvHeads[i] = uint64(v.V.(uint32))
		}
	}
}

func kind(recurrent bool) string {
	if recurrent {
		return "recurrent"
	}
	return "full-attention"
}

// samePattern compares a per-layer flag array (any integer or bool elements) with the trunk's pattern.
func samePattern(a gguf.Array, rec []bool) bool {
	get := func(i int) (bool, bool) {
		switch v := a.Values.(type) {
		case []bool:
			return v[i], true
		case []uint8:
			return v[i] != 0, true
		case []int8:
			return v[i] != 0, true
		case []uint32:
			return v[i] != 0, true
		case []int32:
			return v[i] != 0, true
		}
		return false, false
	}
	for i, r := range rec {
		v, ok := get(i)
		if !ok || v != r {
			return false
		}
	}
	return true
}
