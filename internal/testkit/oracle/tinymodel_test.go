package oracle

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

// A hand-written minimal GGUF v3 writer for a tiny random-weight qwen3 model, so the oracle tests need no
// other package. Layout per ggml/include/gguf.h; what llama.cpp needs to load qwen3 is listed in
// shared/reference/gguf-quant-convert.md §10.2.

// GGUF value types (gguf.h GGUF_TYPE_*).
const (
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
)

const ggmlTypeF32 = 0 // ggml.h GGML_TYPE_F32

const ggufAlignment = 32 // GGUF_DEFAULT_ALIGNMENT

type tinyConfig struct {
	Vocab     int // fixed at 260 by the tokenizer below
	Embd      int
	Layers    int
	Heads     int
	HeadsKV   int
	HeadDim   int
	FF        int
	Ctx       int
	Seed      uint64
	Tied      bool   // omit output.weight
	Template  string // tokenizer.chat_template; empty omits it
	Arch      string // general.architecture: "qwen3" (default) or "qwen35"
	SkipMerge bool   // write no tokenizer.ggml.merges (llama.cpp must reject the file)

	// qwen35 only: gated delta-net (linear attention) sizes; every 4th layer is full attention.
	SSMConv     int // ssm.conv_kernel
	SSMState    int // ssm.state_size (key and value head dim)
	SSMGroups   int // ssm.group_count (key heads)
	SSMVHeads   int // ssm.time_step_rank (value heads)
	RopeDims    int // rope.dimension_count (partial rotary)
	RopeSection [4]int32
}

func tinyQwen35Config() tinyConfig {
	c := defaultTinyConfig()
	c.Arch = "qwen35"
	c.Layers = 4
	c.SSMConv, c.SSMState, c.SSMGroups, c.SSMVHeads = 4, 16, 2, 4
	c.RopeDims = 8
	c.RopeSection = [4]int32{2, 1, 1, 0}
	return c
}

func (c tinyConfig) arch() string {
	if c.Arch == "" {
		return "qwen3"
	}
	return c.Arch
}

// recurrent reports whether layer i of a qwen35 model is a linear-attention layer
// (llama.cpp qwen35.cpp: (i+1) % full_attention_interval != 0, interval 4).
func (c tinyConfig) recurrent(i int) bool { return c.arch() == "qwen35" && (i+1)%4 != 0 }

func defaultTinyConfig() tinyConfig {
	return tinyConfig{
		Vocab: 260, Embd: 64, Layers: 2, Heads: 4, HeadsKV: 2, HeadDim: 16, FF: 128, Ctx: 512, Seed: 1,
		Template: chatMLTemplate,
	}
}

const chatMLTemplate = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + " +
	"'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// Token ids of the tiny vocabulary: 0..255 byte tokens (GPT-2 byte-to-unicode order by byte value),
// 256 = "Ġt" (the one merge "Ġ t"), then three control tokens.
const (
	tokMergedSpaceT = 256
	tokEndOfText    = 257
	tokImStart      = 258
	tokImEnd        = 259
)

func tinyVocab() (tokens []string, types []int32, merges []string) {
	bu := bytelevel.Rune
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(bu[b]))
		types = append(types, 1)
	}
	sp := string(bu[' '])
	tokens = append(tokens, sp+"t")
	types = append(types, 1)
	merges = []string{sp + " t"}
	for _, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, s)
		types = append(types, 3) // CONTROL
	}
	return tokens, types, merges
}

type tinyTensor struct {
	name string
	ne   []uint64 // ggml order: ne[0] is the row length
	data []float32
}

func (t tinyTensor) size() uint64 { return uint64(len(t.data)) * 4 }

type kvWriter struct {
	w   *bufio.Writer
	n   int
	err error
}

func (k *kvWriter) raw(v any) {
	if k.err == nil {
		k.err = binary.Write(k.w, binary.LittleEndian, v)
	}
}

func (k *kvWriter) str(s string) {
	k.raw(uint64(len(s)))
	if k.err == nil {
		_, k.err = k.w.WriteString(s)
	}
}

func (k *kvWriter) key(name string, typ uint32) {
	k.n++
	k.str(name)
	k.raw(typ)
}

func (k *kvWriter) u32(name string, v uint32)  { k.key(name, ggufUint32); k.raw(v) }
func (k *kvWriter) f32(name string, v float32) { k.key(name, ggufFloat32); k.raw(v) }
func (k *kvWriter) boolean(name string, v bool) {
	k.key(name, ggufBool)
	var b uint8
	if v {
		b = 1
	}
	k.raw(b)
}
func (k *kvWriter) s(name, v string) { k.key(name, ggufString); k.str(v) }
func (k *kvWriter) strs(name string, v []string) {
	k.key(name, ggufArray)
	k.raw(uint32(ggufString))
	k.raw(uint64(len(v)))
	for _, s := range v {
		k.str(s)
	}
}
func (k *kvWriter) i32s(name string, v []int32) {
	k.key(name, ggufArray)
	k.raw(uint32(ggufInt32))
	k.raw(uint64(len(v)))
	k.raw(v)
}

func tinyTensors(c tinyConfig) []tinyTensor {
	rng := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(1 + 0.1*rng.NormFloat64())
		}
		return v
	}
	mat := func(name string, cols, rows int, std float64) tinyTensor {
		return tinyTensor{name, []uint64{uint64(cols), uint64(rows)}, normal(cols*rows, std)}
	}
	vec := func(name string, n int) tinyTensor {
		return tinyTensor{name, []uint64{uint64(n)}, ones(n)}
	}
	q := c.Heads * c.HeadDim
	kv := c.HeadsKV * c.HeadDim
	qwen35 := c.arch() == "qwen35"
	qOut := q
	if qwen35 {
		qOut = 2 * q // query and output gate interleaved per head
	}
	ts := []tinyTensor{mat("token_embd.weight", c.Embd, c.Vocab, 1)}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts, vec(p+"attn_norm.weight", c.Embd))
		if c.recurrent(i) {
			keyDim := c.SSMState * c.SSMGroups
			valDim := c.SSMState * c.SSMVHeads
			conv := 2*keyDim + valDim
			a := make([]float32, c.SSMVHeads)
			for j := range a {
				a[j] = float32(-math.Exp(0.5 * rng.NormFloat64())) // -exp(A_log)
			}
			ts = append(ts,
				mat(p+"attn_qkv.weight", c.Embd, conv, 0.15),
				mat(p+"attn_gate.weight", c.Embd, valDim, 0.15),
				mat(p+"ssm_conv1d.weight", c.SSMConv, conv, 0.3),
				tinyTensor{p + "ssm_dt.bias", []uint64{uint64(c.SSMVHeads)}, normal(c.SSMVHeads, 0.5)},
				tinyTensor{p + "ssm_a", []uint64{uint64(c.SSMVHeads)}, a},
				mat(p+"ssm_beta.weight", c.Embd, c.SSMVHeads, 0.15),
				mat(p+"ssm_alpha.weight", c.Embd, c.SSMVHeads, 0.15),
				vec(p+"ssm_norm.weight", c.SSMState),
				mat(p+"ssm_out.weight", valDim, c.Embd, 0.15),
			)
		} else {
			ts = append(ts,
				mat(p+"attn_q.weight", c.Embd, qOut, 0.15),
				mat(p+"attn_k.weight", c.Embd, kv, 0.15),
				mat(p+"attn_v.weight", c.Embd, kv, 0.15),
				mat(p+"attn_output.weight", q, c.Embd, 0.15),
				vec(p+"attn_q_norm.weight", c.HeadDim),
				vec(p+"attn_k_norm.weight", c.HeadDim),
			)
		}
		if qwen35 {
			ts = append(ts, vec(p+"post_attention_norm.weight", c.Embd))
		} else {
			ts = append(ts, vec(p+"ffn_norm.weight", c.Embd))
		}
		ts = append(ts,
			mat(p+"ffn_gate.weight", c.Embd, c.FF, 0.15),
			mat(p+"ffn_up.weight", c.Embd, c.FF, 0.15),
			mat(p+"ffn_down.weight", c.FF, c.Embd, 0.1),
		)
	}
	ts = append(ts, vec("output_norm.weight", c.Embd))
	if !c.Tied {
		ts = append(ts, mat("output.weight", c.Embd, c.Vocab, 0.3))
	}
	return ts
}

// writeTinyQwen3 writes the model to dir/name and returns its path.
func writeTinyQwen3(t testing.TB, dir, name string, c tinyConfig) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := writeTinyGGUF(path, c); err != nil {
		t.Fatalf("write tiny gguf %s: %v", path, err)
	}
	return path
}

func writeTinyGGUF(path string, c tinyConfig) (err error) {
	arch := c.arch()
	tokens, types, merges := tinyVocab()
	if len(tokens) != c.Vocab {
		return fmt.Errorf("vocab has %d tokens, config wants %d", len(tokens), c.Vocab)
	}
	ts := tinyTensors(c)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	w := bufio.NewWriter(f)

	// KVs are written to a buffer first because the header needs their count.
	kvFile, err := os.CreateTemp(filepath.Dir(path), ".kv-*")
	if err != nil {
		return err
	}
	defer os.Remove(kvFile.Name())
	defer kvFile.Close()
	kb := bufio.NewWriter(kvFile)
	k := &kvWriter{w: kb}
	k.s("general.architecture", arch)
	k.s("general.name", "tiny-"+arch)
	k.u32("general.alignment", ggufAlignment)
	k.u32("general.file_type", 0) // LLAMA_FTYPE_ALL_F32
	k.u32(arch+".context_length", uint32(c.Ctx))
	k.u32(arch+".embedding_length", uint32(c.Embd))
	k.u32(arch+".block_count", uint32(c.Layers))
	k.u32(arch+".feed_forward_length", uint32(c.FF))
	k.u32(arch+".attention.head_count", uint32(c.Heads))
	k.u32(arch+".attention.head_count_kv", uint32(c.HeadsKV))
	k.u32(arch+".attention.key_length", uint32(c.HeadDim))
	k.u32(arch+".attention.value_length", uint32(c.HeadDim))
	k.f32(arch+".attention.layer_norm_rms_epsilon", 1e-6)
	k.f32(arch+".rope.freq_base", 1e6)
	pre := "qwen2"
	if arch == "qwen35" {
		pre = "qwen35"
		k.i32s(arch+".rope.dimension_sections", c.RopeSection[:])
		k.u32(arch+".rope.dimension_count", uint32(c.RopeDims))
		k.u32(arch+".ssm.conv_kernel", uint32(c.SSMConv))
		k.u32(arch+".ssm.state_size", uint32(c.SSMState))
		k.u32(arch+".ssm.group_count", uint32(c.SSMGroups))
		k.u32(arch+".ssm.time_step_rank", uint32(c.SSMVHeads))
		k.u32(arch+".ssm.inner_size", uint32(c.SSMState*c.SSMVHeads))
		k.u32(arch+".full_attention_interval", 4)
	}
	k.s("tokenizer.ggml.model", "gpt2")
	k.s("tokenizer.ggml.pre", pre)
	k.strs("tokenizer.ggml.tokens", tokens)
	k.i32s("tokenizer.ggml.token_type", types)
	if !c.SkipMerge {
		k.strs("tokenizer.ggml.merges", merges)
	}
	k.u32("tokenizer.ggml.bos_token_id", tokEndOfText)
	k.u32("tokenizer.ggml.eos_token_id", tokImEnd)
	k.u32("tokenizer.ggml.padding_token_id", tokEndOfText)
	k.boolean("tokenizer.ggml.add_bos_token", false)
	if c.Template != "" {
		k.s("tokenizer.chat_template", c.Template)
	}
	if k.err != nil {
		return k.err
	}
	if err := kb.Flush(); err != nil {
		return err
	}

	h := &kvWriter{w: w}
	h.raw([4]byte{'G', 'G', 'U', 'F'})
	h.raw(uint32(3))
	h.raw(uint64(len(ts)))
	h.raw(uint64(k.n))
	if h.err != nil {
		return h.err
	}
	if _, err := kvFile.Seek(0, 0); err != nil {
		return err
	}
	if _, err := w.ReadFrom(kvFile); err != nil {
		return err
	}
	pos := uint64(24)
	if st, err := kvFile.Stat(); err == nil {
		pos += uint64(st.Size())
	} else {
		return err
	}
	var off uint64
	for _, t := range ts {
		h.str(t.name)
		h.raw(uint32(len(t.ne)))
		h.raw(t.ne)
		h.raw(uint32(ggmlTypeF32))
		h.raw(off)
		pos += 8 + uint64(len(t.name)) + 4 + 8*uint64(len(t.ne)) + 4 + 8
		off += alignUp(t.size())
	}
	pad := make([]byte, alignUp(pos)-pos)
	h.raw(pad)
	for _, t := range ts {
		h.raw(t.data)
		h.raw(make([]byte, alignUp(t.size())-t.size()))
	}
	if h.err != nil {
		return h.err
	}
	return w.Flush()
}

func alignUp(n uint64) uint64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }

// TestTinyGGUFHeader checks the writer's own framing so a broken writer is reported as such, not as an
// oracle failure.
func TestTinyGGUFHeader(t *testing.T) {
	path := writeTinyQwen3(t, t.TempDir(), "tiny.gguf", defaultTinyConfig())
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:4]) != "GGUF" || binary.LittleEndian.Uint32(b[4:]) != 3 {
		t.Fatalf("bad magic/version % x", b[:8])
	}
	c := defaultTinyConfig()
	wantTensors := 1 + 11*c.Layers + 2
	if got := binary.LittleEndian.Uint64(b[8:]); got != uint64(wantTensors) {
		t.Fatalf("tensor count %d, want %d", got, wantTensors)
	}
	var params int
	for _, ts := range tinyTensors(c) {
		params += len(ts.data)
	}
	if len(b) < params*4 || len(b)%ggufAlignment != 0 {
		t.Fatalf("file size %d for %d params (must be >= %d and a multiple of %d)", len(b), params, params*4, ggufAlignment)
	}
	q35 := tinyQwen35Config()
	var names []string
	for _, ts := range tinyTensors(q35) {
		names = append(names, ts.name)
	}
	for _, want := range []string{"blk.0.attn_qkv.weight", "blk.0.ssm_a", "blk.2.ssm_dt.bias", "blk.3.attn_q.weight",
		"blk.3.post_attention_norm.weight"} {
		if !slices.Contains(names, want) {
			t.Errorf("qwen35 tensors lack %s", want)
		}
	}
	for _, unwanted := range []string{"blk.3.attn_qkv.weight", "blk.0.attn_q.weight", "blk.0.ffn_norm.weight"} {
		if slices.Contains(names, unwanted) {
			t.Errorf("qwen35 tensors have %s", unwanted)
		}
	}
}
