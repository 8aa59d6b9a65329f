package tinygguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Spec says what to write. Zero values are the tiny defaults.
type Spec struct {
	Arch   string // qwen2, qwen3 (default) or qwen35 (every 4th layer full attention, the others gated delta-net)
	Layers int    // block_count (default 2)
	// Dimensions (defaults: 64 wide, 4 heads of 16, 2 KV heads, feed-forward 128).
	Embd, Heads, KVHeads, HeadDim, FF int
	Ctx                               int    // context_length (default 8192)
	Seed                              uint64 // weights
	F16                               bool   // 2-D weights in F16 (1-D tensors and ssm_conv1d stay F32, as llama.cpp's converter writes them)
	F16Conv                           bool   // ssm_conv1d in F16 too (a file engines must reject)
	MTP                               bool   // nextn_predict_layers = 1 (a file engines must reject)
	Output                            bool   // a separate output.weight (default: tied to token_embd)
	Vocab                             *Vocab // default DefaultVocab()
	NoMerges                          bool   // no tokenizer.ggml.merges (llama.cpp must reject the file)
	Pre                               string // tokenizer.ggml.pre (default qwen2)
	Template                          string // tokenizer.chat_template; empty writes none
}

// qwen35 linear-attention sizes (the tiny Qwen3.5 shape).
const (
	ssmState  = 16 // head k/v dim
	ssmGroups = 2  // k heads
	ssmVHeads = 4  // v heads
	ssmConv   = 4
)

func or(v, d int) uint64 {
	if v == 0 {
		return uint64(d)
	}
	return uint64(v)
}

// Write writes the model to path (GGUF v3, alignment 32).
func Write(path string, s Spec) error {
	if s.Arch == "" {
		s.Arch = "qwen3"
	}
	if s.Layers == 0 {
		s.Layers = 2
	}
	voc := DefaultVocab()
	if s.Vocab != nil {
		voc = *s.Vocab
	}
	pre := s.Pre
	if pre == "" {
		pre = "qwen2"
	}
	embd, heads, kvH, hd, ff := or(s.Embd, 64), or(s.Heads, 4), or(s.KVHeads, 2), or(s.HeadDim, 16), or(s.FF, 128)
	vocab := uint64(len(voc.Tokens))
	w := gguf.NewWriter()
	var err error
	set := func(k string, v gguf.Value) {
		if err == nil {
			err = w.SetKV(k, v)
		}
	}
	a := s.Arch + "."
	set("general.architecture", gguf.String(s.Arch))
	set("general.name", gguf.String("tiny-"+s.Arch))
	set("general.alignment", gguf.Uint32(32))
	fileType := uint32(0) // LLAMA_FTYPE_ALL_F32
	if s.F16 {
		fileType = 1
	}
	set("general.file_type", gguf.Uint32(fileType))
	set(a+"block_count", gguf.Uint32(uint32(s.Layers)))
	set(a+"context_length", gguf.Uint32(uint32(or(s.Ctx, 8192))))
	set(a+"embedding_length", gguf.Uint32(uint32(embd)))
	set(a+"feed_forward_length", gguf.Uint32(uint32(ff)))
	set(a+"attention.head_count", gguf.Uint32(uint32(heads)))
	set(a+"attention.head_count_kv", gguf.Uint32(uint32(kvH)))
	set(a+"attention.key_length", gguf.Uint32(uint32(hd)))
	set(a+"attention.value_length", gguf.Uint32(uint32(hd)))
	set(a+"attention.layer_norm_rms_epsilon", gguf.Float32(1e-6))
	set(a+"rope.freq_base", gguf.Float32(1e6))
	if s.Arch == "qwen35" {
		set(a+"full_attention_interval", gguf.Uint32(4))
		set(a+"ssm.conv_kernel", gguf.Uint32(ssmConv))
		set(a+"ssm.state_size", gguf.Uint32(ssmState))
		set(a+"ssm.group_count", gguf.Uint32(ssmGroups))
		set(a+"ssm.time_step_rank", gguf.Uint32(ssmVHeads))
		set(a+"ssm.inner_size", gguf.Uint32(ssmState*ssmVHeads))
		set(a+"rope.dimension_count", gguf.Uint32(8))
		set(a+"rope.dimension_sections", gguf.Int32s([]int32{2, 1, 1, 0}))
	}
	if s.MTP {
		set(a+"nextn_predict_layers", gguf.Uint32(1))
	}
	set("tokenizer.ggml.model", gguf.String("gpt2"))
	set("tokenizer.ggml.pre", gguf.String(pre))
	set("tokenizer.ggml.tokens", gguf.Strings(voc.Tokens))
	set("tokenizer.ggml.token_type", gguf.Int32s(voc.Types))
	if !s.NoMerges {
		set("tokenizer.ggml.merges", gguf.Strings(voc.Merges))
	}
	for key, text := range map[string]string{"bos": "<|endoftext|>", "eos": "<|im_end|>", "padding": "<|endoftext|>"} {
		if id := voc.ID(text); id >= 0 {
			set("tokenizer.ggml."+key+"_token_id", gguf.Uint32(uint32(id)))
		}
	}
	set("tokenizer.ggml.add_bos_token", gguf.Bool(false))
	if s.Template != "" {
		set("tokenizer.chat_template", gguf.String(s.Template))
	}
	if err != nil {
		return fmt.Errorf("tinygguf: %w", err)
	}

	// Tensors with their values, drawn in this order from one stream per seed.
	rng := rand.New(rand.NewPCG(s.Seed, 7))
	type tensor struct {
		name string
		typ  gguf.Type
		vals []float32
	}
	var ts []tensor
	add := func(name string, norm bool, shape ...uint64) {
		n := uint64(1)
		for _, d := range shape {
			n *= d
		}
		vals := make([]float32, n)
		for i := range vals {
			if norm {
				vals[i] = 1 + 0.1*float32(rng.NormFloat64())
			} else {
				vals[i] = 0.3 * float32(rng.NormFloat64())
			}
		}
		typ := gguf.TypeF32
		if s.F16 && len(shape) > 1 && (s.F16Conv || !strings.Contains(name, "ssm_conv1d")) {
			typ = gguf.TypeF16
		}
		if err == nil {
			err = w.AddTensor(name, typ, shape)
		}
		ts = append(ts, tensor{name, typ, vals})
	}
	addVals := func(name string, vals []float32) {
		if err == nil {
			err = w.AddTensor(name, gguf.TypeF32, []uint64{uint64(len(vals))})
		}
		ts = append(ts, tensor{name, gguf.TypeF32, vals})
	}
	add("token_embd.weight", false, embd, vocab)
	add("output_norm.weight", true, embd)
	for i := range s.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", true, embd)
		add(p+"ffn_gate.weight", false, embd, ff)
		add(p+"ffn_up.weight", false, embd, ff)
		add(p+"ffn_down.weight", false, ff, embd)
		if s.Arch == "qwen35" {
			add(p+"post_attention_norm.weight", true, embd)
		} else {
			add(p+"ffn_norm.weight", true, embd)
		}
		if s.Arch != "qwen35" || (i+1)%4 == 0 { // full attention
			qOut := heads * hd
			if s.Arch == "qwen35" {
				qOut *= 2 // query and output gate interleaved per head
			}
			add(p+"attn_q.weight", false, embd, qOut)
			add(p+"attn_k.weight", false, embd, kvH*hd)
			add(p+"attn_v.weight", false, embd, kvH*hd)
			add(p+"attn_output.weight", false, heads*hd, embd)
			if s.Arch == "qwen2" {
				add(p+"attn_q.bias", false, heads*hd)
				add(p+"attn_k.bias", false, kvH*hd)
				add(p+"attn_v.bias", false, kvH*hd)
			} else {
				add(p+"attn_q_norm.weight", true, hd)
				add(p+"attn_k_norm.weight", true, hd)
			}
			continue
		}
		convDim := uint64(2*ssmState*ssmGroups + ssmState*ssmVHeads)
		add(p+"attn_qkv.weight", false, embd, convDim)
		add(p+"attn_gate.weight", false, embd, ssmState*ssmVHeads)
		add(p+"ssm_conv1d.weight", false, ssmConv, convDim)
		add(p+"ssm_dt.bias", false, ssmVHeads)
		aLog := make([]float32, ssmVHeads)
		for j := range aLog {
			aLog[j] = -float32(math.Exp(rng.Float64() - 0.5))
		}
		addVals(p+"ssm_a", aLog)
		add(p+"ssm_beta.weight", false, embd, ssmVHeads)
		add(p+"ssm_alpha.weight", false, embd, ssmVHeads)
		add(p+"ssm_norm.weight", true, ssmState)
		add(p+"ssm_out.weight", false, ssmState*ssmVHeads, embd)
	}
	if s.Output {
		add("output.weight", false, embd, vocab)
	}
	if err != nil {
		return fmt.Errorf("tinygguf: %w", err)
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	err = w.WriteHeader(bw)
	for _, t := range ts {
		if err != nil {
			break
		}
		err = w.WriteTensor(t.name, encode(t.typ, t.vals))
	}
	if err == nil {
		err = w.Finish()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("tinygguf: write %s: %w", path, err)
	}
	return nil
}

func encode(typ gguf.Type, vals []float32) []byte {
	if typ == gguf.TypeF16 {
		b := make([]byte, 2*len(vals))
		half.EncodeF16LE(b, vals)
		return b
	}
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}
