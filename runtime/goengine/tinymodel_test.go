package goengine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ollama/ollama/fs/ggml"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

// tinyChatTemplate is a small Qwen-style Jinja template written into the
// test GGUFs (the real Qwen templates are longer but use the same features).
const tinyChatTemplate = `{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}`

// tinyVocab is a GPT-2 byte-level BPE vocabulary: the 256 byte symbols
// (id = byte value), a few merges, then Qwen's special tokens.
func tinyVocab() (tokens []string, types []int32, merges []string) {
	for b := range 256 {
		tokens = append(tokens, string(bytelevel.Rune[b]))
		types = append(types, 1)
	}
	for _, m := range [][2]string{{"h", "e"}, {"l", "l"}, {"Ġ", "w"}, {"o", "r"}, {"i", "s"}, {"Ġ", "t"}, {"Ġt", "he"}} {
		merges = append(merges, m[0]+" "+m[1])
		tokens = append(tokens, m[0]+m[1])
		types = append(types, 1)
	}
	for _, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, s)
		types = append(types, 3)
	}
	for _, s := range []string{"<think>", "</think>"} {
		tokens = append(tokens, s)
		types = append(types, 4)
	}
	return tokens, types, merges
}

type tinySpec struct {
	arch    string // qwen2, qwen3, qwen35
	layers  int
	f16     bool
	mtp     bool // add nextn_predict_layers (must be rejected)
	f16Conv bool // write ssm_conv1d in F16 (must be rejected)
	// Dimensions; zero means the tiny defaults (64 wide, 4 heads of 16).
	embd, heads, kvHeads, headDim, ff int
	seed                              uint64
	// vocab, when set, edits the vocabulary before it is written (hostile files).
	vocab func(tokens []string, types []int32, merges []string) ([]string, []int32, []string)
}

// writeTinyGGUF writes a random-weight model of spec to dir and returns its
// path. Shapes follow llama.cpp's converter layout (GGUF dimension order).
func writeTinyGGUF(t testing.TB, dir string, spec tinySpec) string {
	t.Helper()
	or := func(v, d int) uint64 {
		if v == 0 {
			return uint64(d)
		}
		return uint64(v)
	}
	embd, heads, kvH, hd, ff := or(spec.embd, 64), or(spec.heads, 4), or(spec.kvHeads, 2), or(spec.headDim, 16), or(spec.ff, 128)
	const (
		ctxLen = 8192
		// qwen35 linear attention
		ssmS = 16 // state size = head k/v dim
		ssmG = 2  // k heads
		ssmR = 4  // v heads
		conv = 4
	)
	if spec.layers == 0 {
		spec.layers = 2
	}
	tokens, types, merges := tinyVocab()
	vocab := len(tokens)
	if spec.vocab != nil {
		tokens, types, merges = spec.vocab(tokens, types, merges)
	}
	eos := uint32(vocab - 3) // <|im_end|>
	kv := ggml.KV{
		"general.architecture":             spec.arch,
		"general.name":                     "tiny-" + spec.arch,
		"block_count":                      uint32(spec.layers),
		"context_length":                   uint32(ctxLen),
		"embedding_length":                 uint32(embd),
		"feed_forward_length":              uint32(ff),
		"attention.head_count":             uint32(heads),
		"attention.head_count_kv":          uint32(kvH),
		"attention.key_length":             uint32(hd),
		"attention.value_length":           uint32(hd),
		"attention.layer_norm_rms_epsilon": float32(1e-6),
		"rope.freq_base":                   float32(1e6),
		"tokenizer.ggml.model":             "gpt2",
		"tokenizer.ggml.pre":               "qwen2",
		"tokenizer.ggml.tokens":            tokens,
		"tokenizer.ggml.token_type":        types,
		"tokenizer.ggml.merges":            merges,
		"tokenizer.ggml.bos_token_id":      uint32(vocab - 5),
		"tokenizer.ggml.eos_token_id":      eos,
		"tokenizer.ggml.padding_token_id":  uint32(vocab - 5),
		"tokenizer.ggml.add_bos_token":     false,
		"tokenizer.chat_template":          tinyChatTemplate,
		"general.file_type":                uint32(0),
		"general.alignment":                uint32(32),
	}
	if spec.f16 {
		kv["general.file_type"] = uint32(1)
	}
	if spec.arch == "qwen35" {
		kv["full_attention_interval"] = uint32(4)
		kv["ssm.conv_kernel"] = uint32(conv)
		kv["ssm.state_size"] = uint32(ssmS)
		kv["ssm.group_count"] = uint32(ssmG)
		kv["ssm.time_step_rank"] = uint32(ssmR)
		kv["ssm.inner_size"] = uint32(ssmS * ssmR)
		kv["rope.dimension_count"] = uint32(8)
		kv["rope.dimension_sections"] = []int32{2, 1, 1, 0}
	}
	if spec.mtp {
		kv["nextn_predict_layers"] = uint32(1)
	}

	rng := rand.New(rand.NewPCG(spec.seed, 7))
	var ts []*ggml.Tensor
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
		// llama.cpp's converter keeps 1-D tensors and ssm_conv1d in F32.
		f16 := spec.f16 && len(shape) > 1 && (spec.f16Conv || !strings.Contains(name, "ssm_conv1d"))
		ts = append(ts, tensorOf(name, vals, f16, shape))
	}
	addVals := func(name string, vals []float32, shape ...uint64) {
		ts = append(ts, tensorOf(name, vals, false, shape))
	}
	add("token_embd.weight", false, embd, uint64(vocab))
	add("output_norm.weight", true, embd)
	for i := range spec.layers {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", true, embd)
		add(p+"ffn_gate.weight", false, embd, ff)
		add(p+"ffn_up.weight", false, embd, ff)
		add(p+"ffn_down.weight", false, ff, embd)
		if spec.arch == "qwen35" {
			add(p+"post_attention_norm.weight", true, embd)
		} else {
			add(p+"ffn_norm.weight", true, embd)
		}
		full := spec.arch != "qwen35" || (i+1)%4 == 0
		if full {
			qOut := heads * hd
			if spec.arch == "qwen35" {
				qOut *= 2 // query and output gate interleaved per head
			}
			add(p+"attn_q.weight", false, embd, qOut)
			add(p+"attn_k.weight", false, embd, kvH*hd)
			add(p+"attn_v.weight", false, embd, kvH*hd)
			add(p+"attn_output.weight", false, heads*hd, embd)
			switch spec.arch {
			case "qwen2":
				add(p+"attn_q.bias", false, heads*hd)
				add(p+"attn_k.bias", false, kvH*hd)
				add(p+"attn_v.bias", false, kvH*hd)
			default:
				add(p+"attn_q_norm.weight", true, hd)
				add(p+"attn_k_norm.weight", true, hd)
			}
			continue
		}
		convDim := uint64(2*ssmS*ssmG + ssmS*ssmR)
		add(p+"attn_qkv.weight", false, embd, convDim)
		add(p+"attn_gate.weight", false, embd, ssmS*ssmR)
		add(p+"ssm_conv1d.weight", false, conv, convDim)
		add(p+"ssm_dt.bias", false, ssmR)
		a := make([]float32, ssmR)
		for j := range a {
			a[j] = -float32(math.Exp(rng.Float64() - 0.5))
		}
		addVals(p+"ssm_a", a, ssmR)
		add(p+"ssm_beta.weight", false, embd, ssmR)
		add(p+"ssm_alpha.weight", false, embd, ssmR)
		add(p+"ssm_norm.weight", true, ssmS)
		add(p+"ssm_out.weight", false, ssmS*ssmR, embd)
	}

	path := filepath.Join(dir, fmt.Sprintf("tiny-%s-%d.gguf", spec.arch, spec.seed))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := ggml.WriteGGUF(f, kv, ts); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return path
}

func tensorOf(name string, vals []float32, f16 bool, shape []uint64) *ggml.Tensor {
	var buf []byte
	kind := uint32(0)
	if f16 {
		kind = 1
		buf = make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(buf[2*i:], toHalf(v))
		}
	} else {
		buf = make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
	}
	return &ggml.Tensor{Name: name, Kind: kind, Shape: shape, WriterTo: bytes.NewReader(buf)}
}

// toHalf converts to IEEE binary16, rounding to nearest even (normal range
// only; test weights are small).
func toHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := b & 0x7fffff
	if exp <= 0 {
		return sign
	}
	if exp >= 31 {
		return sign | 0x7c00
	}
	h := uint32(exp)<<10 | mant>>13
	rest := mant & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}
