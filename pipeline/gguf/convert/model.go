package convert

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// Model is a checkpoint ready to be written as GGUF: the metadata and the plan of output tensors in upstream's
// order. It holds no tensor data; tensors are read on demand through [Tensor.ReadRows].
type Model struct {
	Arch       string  // GGUF architecture ("qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe")
	HFArch     string  // config.json architectures[0]
	Dir        string  // checkpoint directory
	Name       string  // general.name
	OutType    OutType // resolved output type (never auto)
	BlockCount int     // written block_count
	MTP        bool    // the MTP block is part of the output
	KVs        []gguf.KV
	Tensors    []Tensor
	Dropped    []string // checkpoint tensors deliberately not converted (vision tower, MTP, rotary caches)

	closer     io.Closer
	blockElems int64 // Options.BlockElems
}

// Close releases the checkpoint files opened by Load (not an Options.Source).
func (m *Model) Close() error {
	if m.closer == nil {
		return nil
	}
	c := m.closer
	m.closer = nil
	return c.Close()
}

// Tensor returns the output tensor with the given GGUF name.
func (m *Model) Tensor(name string) (*Tensor, bool) {
	for i := range m.Tensors {
		if m.Tensors[i].Name == name {
			return &m.Tensors[i], true
		}
	}
	return nil, false
}

// KV returns the value of a metadata key.
func (m *Model) KV(key string) (gguf.Value, bool) {
	for _, kv := range m.KVs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return gguf.Value{}, false
}

// srcTensor is a checkpoint tensor with the shard it lives in (for ordering and messages).
type srcTensor struct {
	pipeline.TensorInfo
	file string
}

func (s srcTensor) where() string {
	if s.file != "" {
		return fmt.Sprintf("%s: tensor %q", s.file, s.Name)
	}
	return fmt.Sprintf("tensor %q", s.Name)
}

// Load reads config.json, the tokenizer files and the safetensors headers of the checkpoint in dir (o.Model
// is ignored) and plans the conversion. No tensor data is read.
func Load(dir string, o Options) (*Model, error) {
	o.Model = dir
	if _, err := ParseOutType(string(o.OutType)); err != nil {
		return nil, err
	}
	h, err := loadHParams(dir)
	if err != nil {
		return nil, err
	}
	hfArch, err := h.architecture()
	if err != nil {
		return nil, err
	}
	spec := archFor(hfArch)
	if spec == nil {
		return nil, &UnsupportedError{File: h.file, What: fmt.Sprintf("architecture %q (architectures[0]); supported: %s",
			hfArch, strings.Join(supportedArchitectures(), ", "))}
	}
	if fileExists(filepath.Join(dir, "tokenizer.model")) && (spec.name == "qwen2" || spec.name == "qwen3") {
		// Qwen2Model.set_vocab (inherited by Qwen3Model) tries SentencePiece first.
		return nil, &UnsupportedError{File: filepath.Join(dir, "tokenizer.model"), What: "SentencePiece tokenizer (only tokenizer.json byte-level BPE is converted)"}
	}

	b := &builder{h: h, spec: spec, dir: dir, keepMTP: o.KeepMTP, names: map[string]bool{}}
	var ckpt *checkpoint.Checkpoint
	src := o.Source
	fileOf := map[string]string{}
	if src == nil || hasSafetensors(dir) {
		c, err := checkpoint.Open(dir)
		if err != nil {
			if src == nil {
				return nil, fmt.Errorf("convert: %w", err)
			}
		} else {
			ckpt = c
			for _, t := range c.Tensors() {
				fileOf[t.Name] = c.File(t.Name)
			}
			if src == nil {
				src = c
			}
		}
	}
	m, err := b.build(src, fileOf, o)
	if err == nil && !o.partial {
		err = m.check(h)
	}
	if err != nil {
		if ckpt != nil {
			ckpt.Close()
		}
		return nil, err
	}
	if ckpt != nil {
		m.closer = ckpt
	}
	m.blockElems = o.BlockElems
	return m, nil
}

func hasSafetensors(dir string) bool {
	return fileExists(filepath.Join(dir, safetensors.SingleFileName)) || fileExists(filepath.Join(dir, safetensors.IndexFileName))
}

// maxBlocks bounds layer counts read from config.json (real models have at most a few hundred).
const maxBlocks = 1 << 16

// builder plans one conversion.
type builder struct {
	h       *hparams
	spec    *archSpec
	dir     string
	keepMTP bool

	src      pipeline.TensorSource
	byName   map[string]srcTensor
	outType  OutType
	nLayers  int64 // num_hidden_layers
	nMTP     int64 // MTP layers written (0 unless kept)
	blocks   int64 // written block_count
	lin      linearDims
	rope     map[string]any // TextModel.rope_parameters
	nExperts int64

	out     []Tensor
	names   map[string]bool
	dropped []string
	experts map[int64]map[string]srcTensor // per-expert tensors waiting to be stacked, by block
}

func (b *builder) build(src pipeline.TensorSource, fileOf map[string]string, o Options) (*Model, error) {
	b.src = src
	list := src.Tensors()
	b.byName = make(map[string]srcTensor, len(list))
	order := make([]srcTensor, 0, len(list))
	for _, t := range list {
		st := srcTensor{TensorInfo: t, file: fileOf[t.Name]}
		if _, dup := b.byName[t.Name]; dup {
			return nil, &UnsupportedError{File: st.where(), What: "duplicate tensor name"}
		}
		b.byName[t.Name] = st
		order = append(order, st)
	}
	// Upstream processing order: shards in file-name order, tensors by name within a shard
	// (gguf-py SafetensorsLocal sorts by name).
	sort.SliceStable(order, func(i, j int) bool {
		fi, fj := filepath.Base(order[i].file), filepath.Base(order[j].file)
		if fi != fj {
			return fi < fj
		}
		return order[i].Name < order[j].Name
	})

	n, err := b.h.findUint("n_layers", "num_hidden_layers", "n_layer", "num_layers")
	if err != nil {
		return nil, err
	}
	b.nLayers = int64(n)
	if b.nLayers > maxBlocks {
		return nil, b.h.errf("num_hidden_layers", "%d layers, more than %d", n, maxBlocks)
	}
	b.h.applyDefaults(b.spec.defaults)
	if b.rope, err = b.ropeParameters(); err != nil {
		return nil, err
	}
	if err := b.spec.setup(b); err != nil {
		return nil, err
	}
	if b.nMTP > maxBlocks {
		return nil, b.h.errf("mtp_num_hidden_layers", "%d layers, more than %d", b.nMTP, maxBlocks)
	}
	b.blocks = b.nLayers + b.nMTP

	// Filter first (index_tensors), then guess the output type from what is left, then process.
	type item struct {
		st   srcTensor
		name string
	}
	var items []item
	for _, st := range order {
		name, keep := b.filter(st.Name)
		if !keep {
			b.dropped = append(b.dropped, st.Name)
			continue
		}
		items = append(items, item{st, name})
	}
	b.outType = o.OutType
	if b.outType == "" || b.outType == OutAuto {
		b.outType = OutF16
		for _, it := range items {
			if len(it.st.Shape) < 2 {
				continue
			}
			if it.st.DType == pipeline.BF16 {
				b.outType = OutBF16
				break
			}
			if it.st.DType == pipeline.F16 {
				break
			}
		}
	}
	for _, it := range items {
		if err := b.process(it.st, it.name); err != nil {
			return nil, err
		}
	}
	if err := b.leftoverExperts(); err != nil {
		return nil, err
	}
	if len(b.out) == 0 {
		return nil, errNoTensors
	}
	if b.nMTP > 0 {
		if _, ok := b.names[fmt.Sprintf("blk.%d.nextn.eh_proj.weight", b.nLayers)]; !ok {
			return nil, &ConfigError{File: b.h.file, Field: b.h.field("mtp_num_hidden_layers"),
				Msg: "MTP kept but the checkpoint has no mtp.* tensors; the GGUF would not load (convert without KeepMTP)"}
		}
	}

	kvs, err := b.kvs(o.name())
	if err != nil {
		return nil, err
	}
	var embedRows int64
	if te, ok := b.byNameOut("token_embd.weight"); ok && len(te.Shape) == 2 {
		embedRows = int64(te.Shape[1])
	}
	tok, err := loadTokenizer(b.dir, b.h, embedRows)
	if err != nil {
		return nil, err
	}
	kvs = append(kvs, tok.kvs()...)

	return &Model{
		Arch: b.spec.name, HFArch: b.spec.hfArch, Dir: b.dir, Name: o.name(), OutType: b.outType,
		BlockCount: int(b.blocks), MTP: b.nMTP > 0, KVs: kvs, Tensors: b.out, Dropped: b.dropped,
	}, nil
}

// multimodalPrefixes and multimodalParts are TextModel.filter_tensors' rules for tensors of other modalities.
var (
	multimodalPrefixes = []string{"mlp", "vit.", "vpm.", "siglip2.", "conformer.", "merger.", "resampler.",
		"sound_encoder.", "sound_projection.", "speech_embeddings."}
	multimodalParts = []string{"visual.", "vision.", "audio.", "talker.", "vision_", "audio_", "sam_model",
		"token2wav.", "code2wav.", "projector.", "pre_mm_projector_norm", "image_newline", "view_seperator",
		"patch_embed", "patch_embedding", "patch_merger.", "model.connector."}
	// unusedSuffixes are skipped by ModelBase.prepare_tensors.
	unusedSuffixes = []string{".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq"}
)

func (b *builder) byNameOut(name string) (*Tensor, bool) {
	for i := range b.out {
		if b.out[i].Name == name {
			return &b.out[i], true
		}
	}
	return nil, false
}

// filter applies TextModel/ModelBase.filter_tensors (and the Qwen3.5 MTP remapping) to a checkpoint name.
func (b *builder) filter(name string) (string, bool) {
	for _, p := range multimodalPrefixes {
		if strings.HasPrefix(name, p) {
			return "", false
		}
	}
	for _, p := range multimodalParts {
		if strings.Contains(name, p) {
			return "", false
		}
	}
	for _, s := range unusedSuffixes {
		if strings.HasSuffix(name, s) {
			return "", false
		}
	}
	if strings.HasSuffix(name, "e_score_correction_bias") {
		name = strings.ReplaceAll(name, "e_score_correction_bias", "e_score_correction.bias")
	}
	name = strings.ReplaceAll(name, "language_model.", "")
	if b.spec.qwen35 {
		return b.filterMTP(name)
	}
	return name, true
}

// blockID is the first purely decimal component of a name (prepare_tensors), or -1.
func blockID(name string) int64 {
	for _, part := range strings.Split(name, ".") {
		if part == "" {
			continue
		}
		if n, err := strconv.ParseInt(part, 10, 64); err == nil && n >= 0 && isDigits(part) {
			return n
		}
	}
	return -1
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// process runs the modify_tensors chain of the architecture on one checkpoint tensor and plans its outputs.
func (b *builder) process(st srcTensor, name string) error {
	if !st.DType.Float() {
		return &UnsupportedError{File: st.where(), What: fmt.Sprintf("dtype %s (supported: F32, F16, BF16)", st.DType)}
	}
	if len(st.Shape) == 0 {
		return &UnsupportedError{File: st.where(), What: "scalar tensor"}
	}
	for _, d := range st.Shape {
		if d <= 0 {
			return &UnsupportedError{File: st.where(), What: fmt.Sprintf("empty dimension in shape %v", st.Shape)}
		}
	}
	t := &pending{name: name, bid: blockID(name), st: st, shape: append([]int64(nil), st.Shape...)}
	t.plan = plan{rowLen: st.RowLen(), segs: []segment{{src: st.Name, rows: st.Rows()}}}
	t.sources = []string{st.Name}
	if b.spec.qwen35 {
		if err := b.reorderV(t); err != nil {
			return err
		}
	}
	if b.spec.next {
		if err := b.nextModify(t); err != nil {
			return err
		}
	}
	if b.spec.moe {
		done, err := b.moeModify(t)
		if err != nil || done {
			return err
		}
	}
	return b.emit(t)
}

// pending is a tensor on its way through the modify chain.
type pending struct {
	name      string // current (HF-style) name
	bid       int64
	st        srcTensor
	shape     []int64 // current PyTorch-order shape
	plan      plan
	sources   []string
	transform string
}

func (t *pending) addTransform(s string) {
	if t.transform == "" {
		t.transform = s
	} else {
		t.transform += "," + s
	}
}

// emit maps the name and appends the output tensor.
func (b *builder) emit(t *pending) error {
	gname, ok := b.mapName(t.name)
	if !ok {
		return &UnsupportedError{File: t.st.where(), What: fmt.Sprintf("tensor %q for %s (cannot map it to a GGUF name)", t.name, b.spec.name)}
	}
	if len(t.shape) > gguf.MaxDims {
		return &UnsupportedError{File: t.st.where(), What: fmt.Sprintf("%d-D shape %v", len(t.shape), t.shape)}
	}
	if b.names[gname] {
		return &UnsupportedError{File: t.st.where(), What: fmt.Sprintf("second tensor for GGUF name %q", gname)}
	}
	rowLen := t.shape[len(t.shape)-1]
	rows := int64(1)
	for _, d := range t.shape[:len(t.shape)-1] {
		rows *= d
	}
	if t.plan.rowLen != rowLen || t.plan.rows() != rows {
		return fmt.Errorf("convert: internal error: %s: plan of %d×%d for shape %v", gname, t.plan.rows(), t.plan.rowLen, t.shape)
	}
	for _, s := range t.plan.segs {
		src := b.byName[s.src]
		if src.RowLen() != rowLen {
			return fmt.Errorf("convert: internal error: %s: source %q rows of %d, want %d", gname, s.src, src.RowLen(), rowLen)
		}
	}
	ne := make([]uint64, len(t.shape))
	for i, d := range t.shape {
		ne[len(t.shape)-1-i] = uint64(d)
	}
	b.names[gname] = true
	b.out = append(b.out, Tensor{
		Name: gname, Shape: ne, Type: b.tensorType(gname, len(t.shape)), Sources: t.sources,
		Transform: t.transform, plan: t.plan, src: b.src,
	})
	return nil
}

// tensorType is the per-tensor output type of ModelBase.prepare_tensors for an F32/F16/BF16 conversion.
func (b *builder) tensorType(name string, nDims int) gguf.Type {
	if nDims <= 1 || strings.HasSuffix(name, "_norm.weight") {
		return gguf.TypeF32
	}
	if rest, ok := strings.CutPrefix(name, "blk."); ok {
		if i := strings.IndexByte(rest, '.'); i > 0 && isDigits(rest[:i]) {
			switch rest[i+1:] {
			case "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight":
				return gguf.TypeF32
			}
		}
	}
	if !strings.HasSuffix(name, ".weight") {
		return gguf.TypeF32
	}
	return b.outType.Type()
}

// mapName maps an HF-style name (after filtering and renames) to its GGUF name, as TensorNameMap.get_name
// with try_suffixes (".weight", ".bias") does: exact match first, then the name without the suffix.
func (b *builder) mapName(name string) (string, bool) {
	if rest, ok := strings.CutPrefix(name, "model.layers."); ok {
		i := strings.IndexByte(rest, '.')
		if i <= 0 || !isDigits(rest[:i]) {
			return "", false
		}
		bid, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil || bid >= b.blocks {
			return "", false
		}
		key := rest[i+1:]
		prefix := "blk." + rest[:i] + "."
		if g, ok := b.spec.layer[key]; ok {
			return prefix + g, true
		}
		for _, suf := range []string{".weight", ".bias"} {
			if base, ok := strings.CutSuffix(key, suf); ok {
				if g, ok := b.spec.layer[base]; ok {
					return prefix + g + suf, true
				}
			}
		}
		return "", false
	}
	for _, suf := range []string{".weight", ".bias"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if g, ok := topLevel[base]; ok {
				return g + suf, true
			}
		}
	}
	return "", false
}

// topLevel maps the tensors outside blocks (shared by every Qwen architecture).
var topLevel = map[string]string{
	"model.embed_tokens": "token_embd",
	"lm_head":            "output",
	"model.norm":         "output_norm",
}

// srcErr wraps an error about a checkpoint tensor.
func srcErr(st srcTensor, format string, args ...any) error {
	return &UnsupportedError{File: st.where(), What: fmt.Sprintf(format, args...)}
}

var errNoTensors = errors.New("convert: the checkpoint has no tensors to convert")
