package plan

import (
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// QuantizationVersion is the value llama-quantize writes to general.quantization_version
// (GGML_QNT_VERSION, ggml/include/ggml.h:219 at llama.cpp 34af94cd).
const QuantizationVersion uint32 = 2

// Metadata keys llama-quantize sets on its output (src/llama-quant.cpp, llama_model_quantize_impl).
const (
	KeyQuantizationVersion = "general.quantization_version"
	KeyFileType            = "general.file_type"
)

// maxLayers bounds block_count as llama.cpp does (LLAMA_MAX_LAYERS, src/llama-hparams.h).
const maxLayers = 512

// TensorDesc describes one input tensor.
type TensorDesc struct {
	Name  string
	Type  gguf.Type
	Shape []uint64 // ggml ne order: Shape[0] is the row length
}

// ModelInfo holds the hyperparameters the type rules read (llama_hparams at load time).
type ModelInfo struct {
	BlockCount  int // <arch>.block_count as written (hparams.n_layer_all, MTP/nextn layers included)
	HeadCount   int // <arch>.attention.head_count of layer 0
	HeadCountKV int // <arch>.attention.head_count_kv of layer 0 (defaults to HeadCount when absent)
	ExpertCount int // <arch>.expert_count, 0 for dense models
}

// gqa is llama_hparams::n_gqa(0): heads per KV head, 0 without KV heads.
func (m ModelInfo) gqa() int {
	if m.HeadCountKV == 0 {
		return 0
	}
	return m.HeadCount / m.HeadCountKV
}

// TensorTypeRule is one --tensor-type REGEX=TYPE override. The first rule whose pattern matches anywhere in a
// tensor name decides that tensor's type (before the shape fallback).
type TensorTypeRule struct {
	Pattern string // regular expression (Go RE2 syntax), lower-cased as llama-quantize does
	Type    gguf.Type
	re      *regexp.Regexp
}

// Overrides are llama-quantize's per-tensor options.
type Overrides struct {
	Pure            bool             // --pure: no mixture rules, every quantizable tensor gets the base type
	OutputType      *gguf.Type       // --output-tensor-type
	TokenEmbdType   *gguf.Type       // --token-embedding-type
	TensorTypes     []TensorTypeRule // --tensor-type, in command-line order
	AllowRequantize bool             // --allow-requantize
	// HasImatrix says an importance matrix will be used (llama-quantize's has_imatrix: --imatrix with at
	// least one entry). It changes a few rules: IQ3_XXS keeps IQ3_XXS attn_v and ffn_down, IQ4_NL/IQ4_XS drop
	// the Q5_K bump of the first ffn_down layers, and Q4_0/Q5_0 raise the first eighth of ffn_down to
	// Q4_1/Q5_1.
	HasImatrix bool
}

// Entry is one tensor of the output file.
type Entry struct {
	Name     string    `json:"name"`
	From     gguf.Type `json:"-"`
	To       gguf.Type `json:"-"`
	FromName string    `json:"from"`
	ToName   string    `json:"to"`
	Shape    []uint64  `json:"shape"`
	InBytes  int64     `json:"in_bytes"`
	Bytes    int64     `json:"bytes"`
	Fallback string    `json:"fallback,omitempty"` // why the chosen type was replaced because of the row length
	Note     string    `json:"note,omitempty"`     // why the tensor is kept, or which override chose its type
	// NeedsImatrix is true when the output type cannot be made without an importance matrix
	// (tensor_requires_imatrix: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, and Q2_K in a Q2_K_S file).
	NeedsImatrix bool `json:"needs_imatrix,omitempty"`
}

// Convert reports whether the tensor's data changes (dequantize and/or quantize); otherwise it is copied.
func (e Entry) Convert() bool { return e.From != e.To }

// Plan is the per-tensor outcome of a quantization, in output-file order.
type Plan struct {
	FileType   gguf.FileType `json:"-"`
	FileName   string        `json:"file_type"`
	Entries    []Entry       `json:"tensors"`
	InBytes    int64         `json:"in_bytes"`
	OutBytes   int64         `json:"out_bytes"`
	Elements   int64         `json:"elements"`
	Converted  int           `json:"converted"`  // entries whose type changes
	NFallback  int           `json:"n_fallback"` // llama-quantize's "N of M tensor(s) required fallback quantization"
	Requantize bool          `json:"requantize"` // some converted input is already quantized
	// NeedsImatrix is the number of converted tensors whose output type needs an importance matrix.
	NeedsImatrix int `json:"needs_imatrix,omitempty"`
}

// FirstNeedingImatrix returns the first converted entry whose type needs an importance matrix.
func (p Plan) FirstNeedingImatrix() (Entry, bool) {
	for _, e := range p.Entries {
		if e.Convert() && e.NeedsImatrix {
			return e, true
		}
	}
	return Entry{}, false
}

// BitsPerWeight is the output size in bits per element, as llama-quantize prints it ("quant size … BPW").
func (p Plan) BitsPerWeight() float64 {
	if p.Elements == 0 {
		return 0
	}
	return float64(p.OutBytes) * 8 / float64(p.Elements)
}

// KV is a metadata key with a uint32 value.
type KV struct {
	Key   string
	Value uint32
}

// MetadataKVs returns the keys llama-quantize sets, in the order it appends them after the input's keys (each
// is removed first if present): general.quantization_version = 2, then general.file_type.
func (p Plan) MetadataKVs() []KV {
	return []KV{{KeyQuantizationVersion, QuantizationVersion}, {KeyFileType, FileTypeValue(p.FileType)}}
}

// FileTypeValue is the general.file_type value llama-quantize writes for ftype: the llama_ftype itself
// (gguf_set_val_u32(ctx, "general.file_type", ftype)), also for the F32/F16/BF16 outputs.
func FileTypeValue(ftype gguf.FileType) uint32 { return uint32(ftype) }

// UnsupportedError reports a valid request this package has no plan or kernel for.
type UnsupportedError struct{ What string }

func (e *UnsupportedError) Error() string { return "quantize: unsupported " + e.What }

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *UnsupportedError) InputError() bool { return true }

// RequantizeError reports an already quantized tensor that would be quantized again without AllowRequantize
// (llama-quantize: "requantizing from type %s is disabled").
type RequantizeError struct {
	Tensor   string
	From, To gguf.Type
}

func (e *RequantizeError) Error() string {
	return fmt.Sprintf("quantize: tensor %q is already %s; re-quantizing it to %s loses quality and needs --allow-requantize",
		e.Tensor, e.From, e.To)
}

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *RequantizeError) InputError() bool { return true }

// targetTypes are the types the kquant kernels (plus float conversion) can write, in ggml id order.
var targetTypes = []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0,
	gguf.TypeQ5_1, gguf.TypeQ8_0, gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K,
	gguf.TypeIQ2_XXS, gguf.TypeIQ2_XS, gguf.TypeIQ3_XXS, gguf.TypeIQ1_S, gguf.TypeIQ4_NL, gguf.TypeIQ3_S,
	gguf.TypeIQ2_S, gguf.TypeIQ4_XS, gguf.TypeIQ1_M, gguf.TypeBF16, gguf.TypeTQ1_0, gguf.TypeTQ2_0}

// TargetTypes lists the tensor types a plan may assign (and overrides may name).
func TargetTypes() []gguf.Type { return append([]gguf.Type(nil), targetTypes...) }

func isTarget(t gguf.Type) bool { return slices.Contains(targetTypes, t) }

func targetNames() string {
	names := make([]string, len(targetTypes))
	for i, t := range targetTypes {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// ParseTargetType parses a ggml type name case-insensitively ("q8_0", "Q6_K") for --output-tensor-type,
// --token-embedding-type and --tensor-type; the error lists the valid names.
func ParseTargetType(name string) (gguf.Type, error) {
	t, err := gguf.ParseType(name)
	if err != nil || !isTarget(t) {
		return 0, fmt.Errorf("quantize: unknown or unsupported tensor type %q (valid: %s)", name, targetNames())
	}
	return t, nil
}

// ParseTensorTypeRule parses a --tensor-type argument "REGEX=TYPE" as llama-quantize does
// (tools/quantize/quantize.cpp parse_tensor_type): split at the first '=', both sides non-empty, the pattern
// lower-cased, the type any name of TargetTypes in any case. The pattern is compiled with Go's regexp
// (RE2); llama.cpp uses std::regex (ECMAScript), which agrees on ordinary patterns but also has
// look-ahead and back-references, which RE2 rejects.
func ParseTensorTypeRule(s string) (TensorTypeRule, error) {
	pat, typ, ok := strings.Cut(s, "=")
	if !ok {
		return TensorTypeRule{}, fmt.Errorf("quantize: malformed tensor type rule %q: want REGEX=TYPE", s)
	}
	if pat == "" {
		return TensorTypeRule{}, fmt.Errorf("quantize: tensor type rule %q: missing tensor name pattern", s)
	}
	if typ == "" {
		return TensorTypeRule{}, fmt.Errorf("quantize: tensor type rule %q: missing tensor type", s)
	}
	t, err := gguf.ParseType(typ)
	if err != nil || !isTarget(t) {
		return TensorTypeRule{}, fmt.Errorf("quantize: tensor type rule %q: unknown or unsupported tensor type %q (valid: %s)",
			s, typ, targetNames())
	}
	r := TensorTypeRule{Pattern: strings.ToLower(pat), Type: t}
	if r.re, err = regexp.Compile(r.Pattern); err != nil {
		return TensorTypeRule{}, fmt.Errorf("quantize: tensor type rule %q: bad pattern: %w", s, err)
	}
	return r, nil
}

// String formats the rule as it is written on the command line.
func (r TensorTypeRule) String() string { return r.Pattern + "=" + r.Type.String() }

// defaultTypes is llama_ftype_get_default_type (src/llama-quant.cpp) for the file types phonellm writes.
var defaultTypes = map[gguf.FileType]gguf.Type{
	gguf.FileTypeAllF32: gguf.TypeF32, gguf.FileTypeF16: gguf.TypeF16, gguf.FileTypeBF16: gguf.TypeBF16,
	gguf.FileTypeQ4_0: gguf.TypeQ4_0, gguf.FileTypeQ4_1: gguf.TypeQ4_1, gguf.FileTypeQ5_0: gguf.TypeQ5_0,
	gguf.FileTypeQ5_1: gguf.TypeQ5_1, gguf.FileTypeQ8_0: gguf.TypeQ8_0, gguf.FileTypeQ2_K: gguf.TypeQ2_K,
	gguf.FileTypeQ3_K_S: gguf.TypeQ3_K, gguf.FileTypeQ3_K_M: gguf.TypeQ3_K, gguf.FileTypeQ3_K_L: gguf.TypeQ3_K,
	gguf.FileTypeQ4_K_S: gguf.TypeQ4_K, gguf.FileTypeQ4_K_M: gguf.TypeQ4_K, gguf.FileTypeQ5_K_S: gguf.TypeQ5_K,
	gguf.FileTypeQ5_K_M: gguf.TypeQ5_K, gguf.FileTypeQ6_K: gguf.TypeQ6_K, gguf.FileTypeIQ4_NL: gguf.TypeIQ4_NL,
	gguf.FileTypeIQ4_XS: gguf.TypeIQ4_XS,
	gguf.FileTypeQ2_K_S: gguf.TypeQ2_K, gguf.FileTypeIQ3_XS: gguf.TypeIQ3_S, gguf.FileTypeIQ2_XXS: gguf.TypeIQ2_XXS,
	gguf.FileTypeIQ2_XS: gguf.TypeIQ2_XS, gguf.FileTypeIQ2_S: gguf.TypeIQ2_XS, gguf.FileTypeIQ2_M: gguf.TypeIQ2_S,
	gguf.FileTypeIQ3_XXS: gguf.TypeIQ3_XXS, gguf.FileTypeIQ1_S: gguf.TypeIQ1_S, gguf.FileTypeIQ1_M: gguf.TypeIQ1_M,
	gguf.FileTypeIQ3_S: gguf.TypeIQ3_S, gguf.FileTypeIQ3_M: gguf.TypeIQ3_S, gguf.FileTypeTQ1_0: gguf.TypeTQ1_0,
	gguf.FileTypeTQ2_0: gguf.TypeTQ2_0,
}

// RequiresImatrix reports whether llama-quantize refuses a file type without an importance matrix: whether
// its plan gives some quantized tensor a type tensor_requires_imatrix names (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS and Q2_K_S for the Qwen layouts). Make records it per tensor (Entry.NeedsImatrix).
func RequiresImatrix(ftype gguf.FileType) bool {
	switch ftype {
	case gguf.FileTypeIQ1_S, gguf.FileTypeIQ1_M, gguf.FileTypeIQ2_XXS, gguf.FileTypeIQ2_XS, gguf.FileTypeIQ2_S,
		gguf.FileTypeIQ2_M, gguf.FileTypeIQ3_XXS, gguf.FileTypeIQ3_XS, gguf.FileTypeQ2_K_S:
		return true
	}
	return false
}

// DefaultType is the base tensor type of a file type (Q4_K for Q4_K_M), false for file types without a plan.
func DefaultType(ftype gguf.FileType) (gguf.Type, bool) {
	t, ok := defaultTypes[ftype]
	return t, ok
}

// Architectures lists the architectures Make accepts.
func Architectures() []string { return []string{"qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe"} }

// in is one tensor while planning.
type in struct {
	TensorDesc
	layer int   // block number by weight_name_comparer (-1 outside blocks)
	ndims int   // ggml_n_dims
	ne0   int64 // row length
	rows  int64 // product of ne[1:]
}

// Make decides the output type of every tensor as llama-quantize does for ftype, and returns the tensors in
// output-file order. It does not read tensor data. Errors: *UnsupportedError for an architecture, file type or
// input type without support, *RequantizeError for quantized input without AllowRequantize, and plain errors
// naming the tensor for inconsistent input.
func Make(arch string, info ModelInfo, tensors []TensorDesc, ftype gguf.FileType, ov Overrides) (Plan, error) {
	if !slices.Contains(Architectures(), arch) {
		return Plan{}, &UnsupportedError{What: fmt.Sprintf("architecture %q (type plans exist for %s)",
			arch, strings.Join(Architectures(), ", "))}
	}
	def, ok := defaultTypes[ftype]
	if !ok {
		return Plan{}, &UnsupportedError{What: fmt.Sprintf("file type %s", ftype)}
	}
	if info.BlockCount <= 0 || info.BlockCount > maxLayers {
		return Plan{}, fmt.Errorf("quantize: block_count %d out of range [1, %d]", info.BlockCount, maxLayers)
	}
	if info.HeadCount < 0 || info.HeadCountKV < 0 || info.ExpertCount < 0 {
		return Plan{}, fmt.Errorf("quantize: negative head or expert count in %+v", info)
	}
	if err := checkOverrides(&ov); err != nil {
		return Plan{}, err
	}
	list, err := sortedInputs(tensors)
	if err != nil {
		return Plan{}, err
	}

	s := &planState{info: info, ftype: ftype, def: def, ov: &ov, tied: true,
		nLayer: info.BlockCount, is70B: arch == "qwen2" && info.BlockCount == 80}
	for _, t := range list { // init_quantize_state_counters
		c := categoryOf(t.Name)
		if c.isAttnV() {
			s.nAttnV++
		}
		if c == catOutput {
			s.tied = false
		}
	}

	p := Plan{FileType: ftype, FileName: ftype.String(), Entries: make([]Entry, 0, len(list))}
	for _, t := range list {
		e, err := s.entry(t)
		if err != nil {
			return Plan{}, err
		}
		p.Entries = append(p.Entries, e)
		p.InBytes += e.InBytes
		p.OutBytes += e.Bytes
		p.Elements += t.ne0 * t.rows
		if e.Convert() {
			p.Converted++
			if e.From.Quantized() {
				p.Requantize = true
			}
			if e.NeedsImatrix {
				p.NeedsImatrix++
			}
		}
	}
	p.NFallback = s.nFallback
	return p, nil
}

func checkOverrides(ov *Overrides) error {
	for _, p := range []struct {
		t    *gguf.Type
		flag string
	}{{ov.OutputType, "--output-tensor-type"}, {ov.TokenEmbdType, "--token-embedding-type"}} {
		if p.t != nil && !isTarget(*p.t) {
			return &UnsupportedError{What: fmt.Sprintf("%s %s (valid: %s)", p.flag, *p.t, targetNames())}
		}
	}
	rules := make([]TensorTypeRule, len(ov.TensorTypes))
	for i, r := range ov.TensorTypes {
		if !isTarget(r.Type) {
			return &UnsupportedError{What: fmt.Sprintf("--tensor-type %s (valid types: %s)", r, targetNames())}
		}
		if r.re == nil {
			re, err := regexp.Compile(r.Pattern)
			if err != nil {
				return fmt.Errorf("quantize: --tensor-type %s: bad pattern: %w", r, err)
			}
			r.re = re
		}
		rules[i] = r
	}
	ov.TensorTypes = rules // a copy: the caller's slice is not modified
	return nil
}

// sortedInputs validates the tensors and orders them as llama_model_loader::weights_map does
// (weight_name_comparer, src/llama-model-loader.h): by block number, tensors outside blocks (-1) first, then by
// name byte order. llama-quantize processes and writes the tensors in this order.
func sortedInputs(tensors []TensorDesc) ([]in, error) {
	list := make([]in, len(tensors))
	seen := make(map[string]struct{}, len(tensors))
	for i, t := range tensors {
		if _, dup := seen[t.Name]; dup {
			return nil, fmt.Errorf("quantize: tensor %q appears twice", t.Name)
		}
		seen[t.Name] = struct{}{}
		if !t.Type.Known() {
			return nil, &UnsupportedError{What: fmt.Sprintf("type %s of tensor %q", t.Type, t.Name)}
		}
		if len(t.Shape) == 0 || len(t.Shape) > 4 {
			return nil, fmt.Errorf("quantize: tensor %q has %d dimensions, want 1 to 4", t.Name, len(t.Shape))
		}
		var n uint64 = 1
		for _, d := range t.Shape {
			if d == 0 {
				return nil, fmt.Errorf("quantize: tensor %q has an empty dimension in shape %v", t.Name, t.Shape)
			}
			hi, lo := bits.Mul64(n, d)
			if hi != 0 || lo > math.MaxInt64 {
				return nil, fmt.Errorf("quantize: tensor %q: shape %v overflows", t.Name, t.Shape)
			}
			n = lo
		}
		layer, found, err := blockNumber(t.Name)
		if err != nil {
			return nil, err
		}
		if !found {
			layer = -1
		}
		x := in{TensorDesc: t, layer: layer, ndims: nDims(t.Shape), ne0: int64(t.Shape[0])}
		x.rows = int64(n) / x.ne0
		if _, err := t.Type.RowBytes(x.ne0); err != nil {
			return nil, fmt.Errorf("quantize: tensor %q: %w", t.Name, err)
		}
		list[i] = x
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].layer != list[j].layer {
			return list[i].layer < list[j].layer
		}
		return list[i].Name < list[j].Name
	})
	return list, nil
}

// nDims is ggml_n_dims: trailing dimensions of size 1 do not count, and a tensor has at least one.
func nDims(shape []uint64) int {
	for i := len(shape) - 1; i >= 1; i-- {
		if shape[i] > 1 {
			return i + 1
		}
	}
	return 1
}

// blockNumber reads the layer number as sscanf(name, "blk.%d.", &n) does: "blk." then optional white space,
// an optional sign and decimal digits (what follows is not checked). found is false without digits.
func blockNumber(name string) (n int, found bool, err error) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false, nil
	}
	i := 0
	for i < len(rest) && strings.IndexByte(" \t\n\v\f\r", rest[i]) >= 0 {
		i++
	}
	start := i
	if i < len(rest) && (rest[i] == '+' || rest[i] == '-') {
		i++
	}
	digits := i
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == digits {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(rest[start:i], 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("quantize: tensor %q: block number out of range", name)
	}
	return int(v), true, nil
}

// category is tensor_category (src/llama-quant.cpp tensor_get_category): the first matching test wins.
type category int

const (
	catOther category = iota
	catOutput
	catTokenEmbd
	catAttnQKV
	catAttnKVB
	catAttnV
	catAttnK
	catAttnQ
	catAttnOutput
	catFFNUp
	catFFNGate
	catFFNDown
)

func categoryOf(name string) category {
	switch {
	case name == "output.weight":
		return catOutput
	case name == "token_embd.weight" || name == "per_layer_token_embd.weight":
		return catTokenEmbd
	case strings.Contains(name, "attn_qkv.weight"):
		return catAttnQKV
	case strings.Contains(name, "attn_kv_b.weight"):
		return catAttnKVB
	case strings.Contains(name, "attn_v.weight"):
		return catAttnV
	case strings.Contains(name, "attn_k.weight"):
		return catAttnK
	case strings.Contains(name, "attn_q.weight"):
		return catAttnQ
	case strings.Contains(name, "attn_output.weight"):
		return catAttnOutput
	case strings.Contains(name, "ffn_up"): // also ffn_up_exps, ffn_up_shexp
		return catFFNUp
	case strings.Contains(name, "ffn_gate"): // also ffn_gate_exps, ffn_gate_shexp, ffn_gate_inp_shexp
		return catFFNGate
	case strings.Contains(name, "ffn_down"):
		return catFFNDown
	}
	return catOther
}

// isAttnV is category_is_attn_v: attn_v, the fused attn_qkv (Qwen3.5 gated delta net) and attn_kv_b share the
// attn_v rules and one counter.
func (c category) isAttnV() bool { return c == catAttnV || c == catAttnQKV || c == catAttnKVB }

// excludedSubstrings are the name tests of tensor_allows_quantization (src/llama-quant.cpp) that apply by
// substring; position_embd.weight and token_types.weight are compared whole.
var excludedSubstrings = []string{
	"_norm.weight",
	"ffn_gate_inp.weight", // MoE router
	"altup", "laurel",
	"per_layer_model_proj",
	"ssm_conv1d", "shortconv.conv.weight",
	"time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight",
	"time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
	"time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
	"time_mix_lerp_fused.weight",
	"attn_rel_b.weight",
	".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger",
}

// keepReason returns why tensor_allows_quantization refuses a tensor, or "" when it may be quantized.
func keepReason(t in) string {
	if t.ndims < 2 {
		return "kept: 1-D"
	}
	// Upstream tests name.rfind("weight") == name.size() - 6, which is also true for any 5-byte name
	// (npos == size_t(-1)); mirrored so that such a tensor is treated the same.
	if !strings.HasSuffix(t.Name, "weight") && len(t.Name) != 5 {
		return "kept: not a weight"
	}
	if t.Name == "position_embd.weight" || t.Name == "token_types.weight" {
		return "kept: excluded (" + t.Name + ")"
	}
	for _, s := range excludedSubstrings {
		if strings.Contains(t.Name, s) {
			return "kept: excluded (" + s + ")"
		}
	}
	return ""
}

// planState is quantize_state_impl: the counters the rules advance in tensor order.
type planState struct {
	info   ModelInfo
	ftype  gguf.FileType
	def    gguf.Type
	ov     *Overrides
	tied   bool // no output.weight: token_embd gets the output rule
	is70B  bool // LLM_TYPE_70B (qwen2 with 80 layers)
	nLayer int  // n_ffn_down = n_ffn_gate = n_ffn_up = n_layer_all

	nAttnV, iAttnV    int
	iDown, iGate, iUp int
	nFallback         int
}

// entry decides one tensor (llama_tensor_get_type) and sizes it.
func (s *planState) entry(t in) (Entry, error) {
	to, fallback, note, err := s.targetType(t)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Name: t.Name, From: t.Type, To: to, FromName: t.Type.String(), ToName: to.String(),
		Shape: append([]uint64(nil), t.Shape...), Fallback: fallback, Note: note}
	e.NeedsImatrix = keepReason(t) == "" && requiresImatrix(t.Name, to, s.ftype)
	rb, err := t.Type.RowBytes(t.ne0)
	if err != nil {
		return Entry{}, fmt.Errorf("quantize: tensor %q: %w", t.Name, err)
	}
	if e.InBytes, err = mulSize(rb, t.rows, t.Name); err != nil {
		return Entry{}, err
	}
	if !e.Convert() {
		e.Bytes = e.InBytes
		return e, nil
	}
	if !isTarget(to) {
		return Entry{}, &UnsupportedError{What: fmt.Sprintf("output type %s for tensor %q", to, t.Name)}
	}
	switch {
	case t.Type == gguf.TypeF32 || t.Type == gguf.TypeF16 || t.Type == gguf.TypeBF16:
	case t.Type.Quantized() && isTarget(t.Type):
		if !s.ov.AllowRequantize {
			return Entry{}, &RequantizeError{Tensor: t.Name, From: t.Type, To: to}
		}
	default:
		return Entry{}, &UnsupportedError{What: fmt.Sprintf("conversion of tensor %q from %s to %s",
			t.Name, t.Type, to)}
	}
	ob, err := to.RowBytes(t.ne0)
	if err != nil { // only reachable through --output-tensor-type / --token-embedding-type, which skip the fallback
		return Entry{}, fmt.Errorf("quantize: tensor %q (%s): %w", t.Name, note, err)
	}
	if e.Bytes, err = mulSize(ob, t.rows, t.Name); err != nil {
		return Entry{}, err
	}
	return e, nil
}

func mulSize(rowBytes, rows int64, name string) (int64, error) {
	hi, lo := bits.Mul64(uint64(rowBytes), uint64(rows))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("quantize: tensor %q: size overflows", name)
	}
	return int64(lo), nil
}

// targetType is the outer llama_tensor_get_type: exclusions, the two direct overrides, --tensor-type rules,
// the mixture rules (unless --pure) and the shape fallback.
func (s *planState) targetType(t in) (to gguf.Type, fallback, note string, err error) {
	if why := keepReason(t); why != "" {
		return t.Type, "", why, nil
	}
	cat := categoryOf(t.Name)
	if s.ov.TokenEmbdType != nil && cat == catTokenEmbd {
		return *s.ov.TokenEmbdType, "", "--token-embedding-type", nil
	}
	if s.ov.OutputType != nil && cat == catOutput {
		return *s.ov.OutputType, "", "--output-tensor-type", nil
	}
	to = s.def
	if !s.def.Quantized() { // F32, F16, BF16 files: every quantizable tensor gets the base type
		return to, "", "", nil
	}
	manual := false
	for _, r := range s.ov.TensorTypes {
		if r.re.MatchString(t.Name) {
			to, manual, note = r.Type, true, "--tensor-type "+r.String()
			break
		}
	}
	if !manual && !s.ov.Pure {
		if to, err = s.mixture(t, cat); err != nil {
			return 0, "", "", err
		}
		outRule := cat == catOutput || s.tied && cat == catTokenEmbd
		if bs := s.def.BlockSize(); outRule && s.ov.OutputType == nil && t.ne0%bs != 0 {
			note = fmt.Sprintf("output rule: row %d not a multiple of %s block %d: Q8_0", t.ne0, s.def, bs)
		}
	}
	to, fallback, err = s.fallback(t, to)
	return to, fallback, note, err
}
