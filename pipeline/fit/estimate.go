package fit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"regexp"
	"slices"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Engine names the runtime whose memory is estimated; the engines differ in compute-buffer reservation,
// flash-attention default, recurrent checkpoints and process overhead (see doc.go).
type Engine string

// The engines phonellm runs models with.
const (
	// LlamaCpp is llama.cpp's llama-server, which the Acurast processor app starts on the phone.
	LlamaCpp Engine = "llama.cpp"
	// GoEngine is Ollama's Go engine as driven by runtime/goengine (phonellm serve).
	GoEngine Engine = "goengine"
)

// Options say how the model will be run (read by Estimate) and, for the stage [Run], which model and phones to
// check.
type Options struct {
	// Stage inputs (Run only).
	Model        string        // GGUF file to check; or
	Config       string        // a Hugging Face config.json, sized at FileType without weights
	FileType     gguf.FileType // file type for Config; 0 = Q4_K_M (all-F32 cannot be asked for), BF16 = as converted
	Phone        string        // profile name; "" = 16gb
	ProfilesFile string        // extra/overriding profiles (JSON), merged by name
	All          bool          // also a table over every profile

	Ctx            int    // context tokens per slot; 0 = 4096 (or the training context when smaller)
	Parallel       int    // slots (concurrent sequences); 0 = 1
	KVType         string // K and V cache type: "f16" (default), "q8_0", "q4_0", "f32"
	UBatch         int    // physical batch (tokens per forward pass); 0 = 512, at most Ctx×Parallel
	Engine         Engine // "" = LlamaCpp
	FlashAttention string // "on", "off", "" = engine default (llama.cpp: auto = on for CPU; goengine: off)
	// Checkpoints is the number of recurrent-state checkpoints per slot for hybrid models; 0 = engine default
	// (llama.cpp 2: the --ctx-checkpoints phonellm's runtime plan passes, upstream's default is 8 or 32; goengine
	// 24, all reserved at load), <0 = none.
	Checkpoints int
	// Overhead is the resident memory of the process besides the model (code, runtime, tokenizer, host app);
	// 0 = engine default plus the metadata held in memory.
	Overhead int64
}

// Validate checks o.
func (o Options) Validate() error {
	switch {
	case o.Ctx < 0 || o.Ctx > 1<<24:
		return fmt.Errorf("fit: context %d out of range [0, %d]", o.Ctx, 1<<24)
	case o.Parallel < 0 || o.Parallel > 256:
		return fmt.Errorf("fit: parallel %d out of range [0, 256]", o.Parallel)
	case o.UBatch < 0 || o.UBatch > 1<<16:
		return fmt.Errorf("fit: ubatch %d out of range [0, %d]", o.UBatch, 1<<16)
	case o.Overhead < 0:
		return fmt.Errorf("fit: negative overhead %d", o.Overhead)
	}
	if _, err := kvType(o.KVType); err != nil {
		return err
	}
	switch o.Engine {
	case "", LlamaCpp, GoEngine:
	default:
		return fmt.Errorf("fit: unknown engine %q (want %s or %s)", o.Engine, LlamaCpp, GoEngine)
	}
	switch o.FlashAttention {
	case "", "on", "off", "auto":
	default:
		return fmt.Errorf("fit: flash attention %q: want on, off or auto", o.FlashAttention)
	}
	return nil
}

func kvType(s string) (gguf.Type, error) {
	switch s {
	case "", "f16":
		return gguf.TypeF16, nil
	case "q8_0":
		return gguf.TypeQ8_0, nil
	case "q4_0":
		return gguf.TypeQ4_0, nil
	case "f32":
		return gguf.TypeF32, nil
	}
	return 0, fmt.Errorf("fit: kv cache type %q: want f16, q8_0, q4_0 or f32", s)
}

// GoEngineFlashAttention is whether phonellm serve (the goengine) runs flash attention by default, and so
// whether fit counts its buffers for "auto": no. Ollama v0.24.0's CPU flash-attention kernel is slower than
// its plain attention (a 2,000-token prompt on one thread: 449–456 tok/s plain, 222–239 with flash attention;
// issue 13), the opposite of llama.cpp's (413 → 645 tok/s on the same file), so neither serve nor its autotune
// turns it on; --flash-attn does, and fit --flash-attn on counts it.
const GoEngineFlashAttention = false

// Engine defaults (doc.go explains each).
const (
	cachePadding        = 256       // KV cells are padded to 256 (ollama CacheConfig; llama.cpp n_ctx pad)
	llamaCppOverhead    = 200 << 20 // llama.cpp + Acurast processor app (Node runtime) resident besides the model
	goEngineOverhead    = 16 << 20  // Go runtime, ggml and the engine without a model (measured, rsscheck)
	llamaCppCheckpoints = 2         // --ctx-checkpoints of the phone runtime plan (upstream default 8, newer 32)
	goEngineCheckpoints = 24        // ollama kvcache.DefaultCheckpointCount, reserved at load for every slot
	goEngineTokenBytes  = 95        // per vocabulary entry: Ollama's tokenizer and the engine's own (measured)
	goEngineMergeBytes  = 95        // per BPE merge: both tokenizers' merge tables (measured)
	// Memory a goengine prompt pass holds outside the graph besides its masks (batch inputs, logits, the
	// collector's own), on top of what the engine holds after loading (calibrated with the masks, rsscheck).
	goEnginePassBytes = 3 << 20
	deltaNetChunk     = 64 // chunk length of the chunked gated-delta-net scan (llama.cpp, ollama)
)

// Breakdown is the estimated resident memory of one process serving the model, by part, in bytes.
type Breakdown struct {
	Model          string `json:"model"`
	Arch           string `json:"architecture"`
	Engine         Engine `json:"engine"`
	Ctx            int    `json:"ctx"`
	Parallel       int    `json:"parallel"`
	UBatch         int    `json:"ubatch"`
	KVType         string `json:"kv_type"`
	FlashAttention bool   `json:"flash_attention"`

	AttentionLayers int   `json:"attention_layers"` // layers with a KV cache
	RecurrentLayers int   `json:"recurrent_layers"` // linear-attention layers with a fixed state
	KVCells         int64 `json:"kv_cells"`         // Ctx × Parallel rounded up to 256
	KVBytesPerCell  int64 `json:"kv_bytes_per_cell"`
	StateBytes      int64 `json:"state_bytes_per_slot"` // recurrent state of one sequence, all layers

	Weights     int64 `json:"weights"`     // tensor data, loaded or mapped (all experts of a MoE)
	KVCache     int64 `json:"kv_cache"`    // K and V of the attention layers
	Recurrent   int64 `json:"recurrent"`   // conv and delta-net state, Parallel slots
	Checkpoints int64 `json:"checkpoints"` // saved recurrent states for prefix reuse
	Compute     int64 `json:"compute"`     // graph intermediates of the largest batch, and the CPU work buffer
	Inputs      int64 `json:"inputs"`      // per-pass host buffers outside the graph (goengine: attention masks)
	Repack      int64 `json:"repack"`      // goengine: the load-time copy of the largest repacked matrix, beyond Compute+Inputs
	Output      int64 `json:"output"`      // logits buffer
	Overhead    int64 `json:"overhead"`    // process, runtime, tokenizer
	Total       int64 `json:"total"`

	ActiveWeights int64    `json:"active_weights"` // bytes read per decoded token (MoE: used experts only)
	Notes         []string `json:"notes,omitempty"`
}

// Estimate predicts the resident memory of serving the GGUF file f with o, from its metadata and tensor infos
// only.
func Estimate(f *gguf.File, o Options) (Breakdown, error) {
	if f == nil {
		return Breakdown{}, errors.New("fit: no model")
	}
	return EstimateShape(ShapeOf(f), o)
}

// hparams are the values the estimate reads.
type hparams struct {
	nLayer, nextn      int
	embd, vocab        int64
	ff, ffExp, ffShexp int64
	experts, used      int64
	recurrent          []bool  // per layer
	headKV             []int64 // per layer KV heads (0 on recurrent layers)
	head               []int64
	keyLen, valLen     int64
	convK, ssmS, ssmG  int64
	ssmR, ssmInner     int64
	trainCtx           int64
}

func (s Shape) hparams() (hparams, error) {
	var h hparams
	bad := func(what string) error {
		return &FormatError{Model: s.Name, Msg: what}
	}
	if s.Arch == "" {
		return h, bad("no general.architecture")
	}
	nl, ok := s.uintKV("block_count")
	if !ok || nl == 0 || nl > 512 {
		return h, bad(fmt.Sprintf("%s.block_count missing or out of range [1, 512]", s.Arch))
	}
	h.nLayer = int(nl)
	if n, ok := s.uintKV("nextn_predict_layers"); ok && n < nl {
		h.nextn = int(n)
	}
	get := func(k string, def int64) int64 {
		if v, ok := s.uintKV(k); ok {
			return int64(min(v, 1<<40))
		}
		return def
	}
	h.embd = get("embedding_length", 0)
	if h.embd == 0 {
		return h, bad(s.Arch + ".embedding_length missing or out of range")
	}
	if t, ok := s.tensor("token_embd.weight"); ok && len(t.Shape) == 2 && t.Shape[1] <= 1<<40 {
		h.vocab = int64(t.Shape[1])
	} else if v := get("vocab_size", 0); v > 0 {
		h.vocab = v
	} else if toks, ok := s.KV["tokenizer.ggml.tokens"].([]string); ok {
		h.vocab = int64(len(toks))
	}
	h.ff = get("feed_forward_length", 0)
	h.experts = get("expert_count", 0)
	h.used = get("expert_used_count", 0)
	h.ffExp = get("expert_feed_forward_length", h.ff)
	h.ffShexp = get("expert_shared_feed_forward_length", 0)
	h.trainCtx = get("context_length", 0)
	for _, c := range []struct {
		name string
		v    int64
		max  int64
	}{{"embedding_length", h.embd, 1 << 20}, {"feed_forward_length", h.ff, 1 << 24},
		{"expert_count", h.experts, 1 << 16}, {"expert_used_count", h.used, 1 << 16},
		{"expert_feed_forward_length", h.ffExp, 1 << 24}, {"expert_shared_feed_forward_length", h.ffShexp, 1 << 24},
		{"vocabulary size", h.vocab, 1 << 24}} {
		if c.v > c.max {
			return h, bad(fmt.Sprintf("%s %d above %d", c.name, c.v, c.max))
		}
	}
	h.head = make([]int64, h.nLayer)
	h.headKV = make([]int64, h.nLayer)
	h.recurrent = make([]bool, h.nLayer)
	for il := range h.nLayer {
		hc, _ := s.layerKV("attention.head_count", il)
		hk, ok := s.layerKV("attention.head_count_kv", il)
		if !ok {
			hk = hc
		}
		if hc > 1<<16 || hk > 1<<16 {
			return h, bad(fmt.Sprintf("head counts of layer %d out of range", il))
		}
		h.head[il], h.headKV[il] = int64(hc), int64(hk)
	}
	if h.head[0] == 0 {
		return h, bad(s.Arch + ".attention.head_count missing")
	}
	h.keyLen = get("attention.key_length", h.embd/h.head[0])
	h.valLen = get("attention.value_length", h.embd/h.head[0])
	if h.keyLen > 1<<16 || h.valLen > 1<<16 {
		return h, bad("attention key/value length above 65536")
	}

	switch s.Arch {
	case "qwen35", "qwen35moe", "qwen3next":
		h.convK = get("ssm.conv_kernel", 0)
		h.ssmS = get("ssm.state_size", 0)
		h.ssmG = get("ssm.group_count", 0)
		h.ssmR = get("ssm.time_step_rank", 0)
		h.ssmInner = get("ssm.inner_size", 0)
		if h.convK == 0 || h.ssmS == 0 || h.ssmG == 0 || h.ssmR == 0 || h.ssmInner == 0 || h.ssmInner%h.ssmR != 0 ||
			h.convK > 1<<10 || h.ssmS > 1<<16 || h.ssmG > 1<<16 || h.ssmR > 1<<16 || h.ssmInner > 1<<24 {
			return h, bad(s.Arch + ".ssm.* (conv_kernel, state_size, group_count, time_step_rank, inner_size) missing or inconsistent")
		}
		if s.isArray("attention.head_count_kv") { // Ollama layout: 0 KV heads on recurrent layers
			for il := range h.nLayer {
				h.recurrent[il] = h.headKV[il] == 0
			}
		} else {
			interval := int(get("full_attention_interval", 4))
			if interval == 0 {
				return h, bad(s.Arch + ".full_attention_interval is 0")
			}
			for il := range h.nLayer { // llama.cpp src/models/qwen35.cpp: recurrent iff i < n_layer && (i+1) % interval != 0
				h.recurrent[il] = il < h.nLayer-h.nextn && (il+1)%interval != 0
			}
		}
		for il, r := range h.recurrent {
			if r {
				h.headKV[il] = 0
			}
		}
	}
	return h, nil
}

// FormatError reports model metadata the estimate cannot use.
type FormatError struct {
	Model string
	Msg   string
}

func (e *FormatError) Error() string { return fmt.Sprintf("fit: %s: %s", e.Model, e.Msg) }

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *FormatError) InputError() bool { return true }

// UnsupportedError reports a valid input the estimate does not handle.
type UnsupportedError struct{ What string }

func (e *UnsupportedError) Error() string { return "fit: unsupported " + e.What }

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *UnsupportedError) InputError() bool { return true }

// bytesOf is the size of n elements of type t (n a multiple of the block size; rounded up otherwise).
func bytesOf(t gguf.Type, n int64) int64 {
	bs := t.BlockSize()
	return (n + bs - 1) / bs * t.BlockBytes()
}

// EstimateShape is [Estimate] for a shape (from a GGUF file or from a config.json).
func EstimateShape(s Shape, o Options) (Breakdown, error) {
	if err := o.Validate(); err != nil {
		return Breakdown{}, err
	}
	h, err := s.hparams()
	if err != nil {
		return Breakdown{}, err
	}
	if o.Engine == "" {
		o.Engine = LlamaCpp
	}
	if o.Parallel == 0 {
		o.Parallel = 1
	}
	if o.Ctx == 0 {
		o.Ctx = 4096
		if h.trainCtx > 0 && h.trainCtx < 4096 {
			o.Ctx = int(h.trainCtx)
		}
	}
	if o.KVType == "" {
		o.KVType = "f16"
	}
	if o.UBatch == 0 {
		o.UBatch = 512
	}
	o.UBatch = min(o.UBatch, o.Ctx*o.Parallel)
	auto := o.FlashAttention == "" || o.FlashAttention == "auto"
	fa := o.FlashAttention == "on" || auto && (o.Engine == LlamaCpp || o.Engine == GoEngine && GoEngineFlashAttention)
	kt, _ := kvType(o.KVType)

	b := Breakdown{Model: s.Name, Arch: s.Arch, Engine: o.Engine, Ctx: o.Ctx, Parallel: o.Parallel,
		UBatch: o.UBatch, KVType: o.KVType, FlashAttention: fa}
	if h.trainCtx > 0 && int64(o.Ctx) > h.trainCtx {
		b.Notes = append(b.Notes, fmt.Sprintf("context %d exceeds the training context %d", o.Ctx, h.trainCtx))
	}
	if h.nextn > 0 {
		b.Notes = append(b.Notes, fmt.Sprintf("the file carries %d MTP (nextn) layer(s), counted as attention layers; "+
			"the goengine rejects such files", h.nextn))
	}
	if kt.Quantized() && (h.keyLen%kt.BlockSize() != 0 || h.valLen%kt.BlockSize() != 0) {
		return Breakdown{}, &UnsupportedError{What: fmt.Sprintf("kv cache type %s for head sizes %d/%d (not a multiple of %d)",
			o.KVType, h.keyLen, h.valLen, kt.BlockSize())}
	}

	if b.Weights, err = s.WeightBytes(); err != nil {
		return Breakdown{}, err
	}
	b.ActiveWeights = activeWeights(s, h, b.Weights)
	if _, untied := s.tensor("output.weight"); !untied && o.Engine == GoEngine {
		// Ollama's ggml backend creates output.weight as a second copy of token_embd for tied embeddings
		// (ml/backend/ggml/ggml.go New: createTensor(..., target: "output.weight")); llama.cpp shares it.
		if t, ok := s.tensor("token_embd.weight"); ok {
			n, err := tensorBytes(t)
			if err != nil {
				return Breakdown{}, err
			}
			b.Weights += n
			b.Notes = append(b.Notes, "goengine loads the tied token_embd twice (as output.weight too)")
		}
	}

	// KV cache: only layers with KV heads (llama.cpp's hybrid memory filters the recurrent ones out).
	b.KVCells = roundUp(int64(o.Ctx)*int64(o.Parallel), cachePadding)
	for il := range h.nLayer {
		if h.recurrent[il] {
			b.RecurrentLayers++
			continue
		}
		if h.headKV[il] == 0 {
			continue
		}
		b.AttentionLayers++
		b.KVBytesPerCell += bytesOf(kt, h.headKV[il]*h.keyLen) + bytesOf(kt, h.headKV[il]*h.valLen)
	}
	var ok bool
	if b.KVCache, ok = mul(b.KVCells, b.KVBytesPerCell); !ok {
		return Breakdown{}, fmt.Errorf("fit: %s: KV cache size overflows", s.Name)
	}

	// Recurrent state per sequence and layer, F32 in both engines: conv state (conv_kernel-1) × channels with
	// channels = inner + 2·groups·state, and the delta-net state head_v_dim × state_size per value head
	// (ollama qwen3next/model.go; llama.cpp hparams n_embd_r / n_embd_s).
	if b.RecurrentLayers > 0 {
		channels := h.ssmInner + 2*h.ssmG*h.ssmS // ≤ 2^33 by the hparams bounds
		headV := h.ssmInner / h.ssmR
		conv := (h.convK - 1) * channels // ≤ 2^43
		delta, ok1 := mul(headV*h.ssmS, h.ssmR)
		perLayer, ok2 := mul(4, conv+delta)
		state, ok3 := mul(perLayer, int64(b.RecurrentLayers))
		rec, ok4 := mul(state, int64(o.Parallel))
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return Breakdown{}, fmt.Errorf("fit: %s: recurrent state size overflows", s.Name)
		}
		b.StateBytes, b.Recurrent = state, rec
		n := o.Checkpoints
		if n == 0 {
			n = llamaCppCheckpoints
			if o.Engine == GoEngine {
				n = goEngineCheckpoints
			}
		}
		if n > 0 {
			if b.Checkpoints, ok = mul(b.Recurrent, int64(n)); !ok {
				return Breakdown{}, fmt.Errorf("fit: %s: checkpoint size overflows", s.Name)
			}
		}
	}

	c := compute(h, o, fa, o.Engine == LlamaCpp, b.KVCells)
	if c < 0 || c > 1<<62 {
		return Breakdown{}, fmt.Errorf("fit: %s: compute buffer estimate out of range", s.Name)
	}
	b.Compute = int64(c)
	// Logits kept for sampling: one F32 row per sequence (llama.cpp output_reserve(n_seq_max); the goengine
	// copies the rows of the batch outputs).
	b.Output = 4 * h.vocab * int64(o.Parallel)
	b.Overhead = o.Overhead
	if b.Overhead == 0 {
		switch o.Engine {
		case LlamaCpp:
			b.Overhead = llamaCppOverhead + 2*s.HeaderBytes
		case GoEngine:
			tables := goEngineTokenBytes*h.vocab + goEngineMergeBytes*min(arrayLen(s.KV["tokenizer.ggml.merges"]), 1<<30)
			b.Overhead = goEngineOverhead + tables
		}
	}
	if o.Engine == GoEngine {
		// Ollama's causal cache builds each pass's mask (ubatch × n_kv float32) as a Go slice and copies it into a
		// ggml input buffer of its own (kvcache/causal.go buildMask, ml/backend/ggml Context.FromFloats).
		// runtime/goengine collects the Go heap and returns it and the C buffers to the system after every prompt
		// pass, so no more than one pass's masks are ever held. What a pass adds outside the graph's buffers is
		// calibrated as a whole, not part by part: twice the mask plus 3 MiB is within a few MiB of the measured
		// peak from 1024 to 8192 cells, flash attention on and off (rsscheck). The C copy is written in full; the
		// Go slice is fresh zeroed memory of which only the masked cells are written, and the non-flash path
		// holds somewhat more than the graph's scores (ggml-cpu's work buffers), which the total absorbs.
		mask := int64(o.UBatch) * b.KVCells * 4
		b.Inputs = 2*mask + goEnginePassBytes
		// runtime/goengine/internal/repack copies each matrix it rearranges into a Go scratch buffer as large as
		// the largest one; the engine returns it to the system when loading ends, so it is a load-time peak that
		// counts only beyond what a pass later adds.
		b.Repack = max(0, RepackScratch(s)-b.Compute-b.Inputs)
	}
	parts := []int64{b.Weights, b.KVCache, b.Recurrent, b.Checkpoints, b.Compute, b.Inputs, b.Repack, b.Output, b.Overhead}
	for _, p := range parts {
		if p < 0 || b.Total > math.MaxInt64-p {
			return Breakdown{}, fmt.Errorf("fit: %s: memory total overflows", s.Name)
		}
		b.Total += p
	}
	return b, nil
}

// arrayLen is the length of a metadata array (a typed slice in Shape.KV), or 0.
func arrayLen(v any) int64 {
	if r := reflect.ValueOf(v); r.Kind() == reflect.Slice {
		return int64(r.Len())
	}
	return 0
}

// repackMatrix and repackTypes mirror runtime/goengine/internal/repack: the weights it rearranges for
// ggml-cpu's GEMM kernels (Q6_K is tagged in place, not copied) — 2-D, rows in groups of 8.
var (
	repackMatrix = regexp.MustCompile(`^(blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|attn_qkv|attn_gate|ffn_gate|ffn_up|ffn_down|ffn_gate_shexp|ffn_up_shexp|ffn_down_shexp|ssm_out)|output)\.weight$`)
	repackTypes  = []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ4_K, gguf.TypeIQ4_NL}
)

// RepackScratch is the size of the largest matrix the goengine repacks at load through a scratch copy (the tied
// embedding counts as output.weight, the copy the engine makes of it): the memory loading holds beyond the
// loaded model for a moment.
func RepackScratch(s Shape) int64 {
	_, untied := s.tensor("output.weight")
	var largest int64
	for _, t := range s.Tensors {
		name := t.Name
		if name == "token_embd.weight" && !untied {
			name = "output.weight"
		}
		if len(t.Shape) != 2 || t.Shape[1]%8 != 0 || !slices.Contains(repackTypes, t.Type) || !repackMatrix.MatchString(name) {
			continue
		}
		if n, err := tensorBytes(t); err == nil {
			largest = max(largest, n)
		}
	}
	return largest
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// mul multiplies non-negative a and b, reporting false on overflow.
func mul(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if a < 0 || b < 0 || hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// activeWeights is the tensor data read per decoded token: everything except the unused experts.
func activeWeights(s Shape, h hparams, total int64) int64 {
	if h.experts == 0 || h.used == 0 || h.used >= h.experts {
		return total
	}
	var exps int64
	for _, t := range s.Tensors {
		if n := len(t.Name); n > len("_exps.weight") && slices.Contains([]string{"ffn_gate_exps.weight",
			"ffn_up_exps.weight", "ffn_down_exps.weight"}, suffixAfterBlock(t.Name)) {
			sz, err := tensorBytes(t)
			if err == nil {
				exps += sz
			}
		}
	}
	return total - exps + exps/h.experts*h.used
}

func suffixAfterBlock(name string) string {
	dots := 0
	for i := range len(name) {
		if name[i] == '.' {
			dots++
			if dots == 2 {
				return name[i+1:]
			}
		}
	}
	return name
}
