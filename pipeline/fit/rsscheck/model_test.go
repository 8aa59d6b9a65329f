package rsscheck

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// modelSpec is a model to generate: a config.json (sized by fit.ShapeFromConfig, so the file has exactly the
// converter's tensor layout) and the tensors to write in F32 rather than Q4_0.
type modelSpec struct {
	name   string
	config string
	f32    []string
}

// The full-context models: a 131072-token vocabulary whose tied embedding is F32 (64 MiB, loaded twice by the
// goengine: as in a real model the weights hold most of the memory, and reading a row per token or one output
// row per pass costs nothing) around a light attention (2 heads of 32, one KV head), so filling 8192 tokens of
// context takes about a CPU-second while the scores, masks and KV cache still grow to tens of MiB. qwen35Fill is
// the hybrid: three gated-delta-net layers and one attention layer, with the recurrent state and the 24
// checkpoints per slot.
const (
	qwen3Fill = `{"architectures":["Qwen3ForCausalLM"],"vocab_size":131072,"hidden_size":256,"intermediate_size":256,
"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":32,"max_position_embeddings":8192,
"tie_word_embeddings":true}`
	qwen35Fill = `{"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5","tie_word_embeddings":true,
"text_config":{"model_type":"qwen3_5_text","vocab_size":131072,"hidden_size":128,"intermediate_size":128,"num_hidden_layers":4,
"num_attention_heads":2,"num_key_value_heads":1,"head_dim":32,"linear_conv_kernel_dim":4,"linear_key_head_dim":32,
"linear_value_head_dim":32,"linear_num_key_heads":2,"linear_num_value_heads":2,"full_attention_interval":4,
"max_position_embeddings":8192,"tie_word_embeddings":true,
"rope_parameters":{"rope_theta":10000000,"partial_rotary_factor":0.25,"mrope_section":[2,1,1]}}}`
)

// writeModel writes spec as a GGUF: 2-D weights in Q4_0 (random quants, small scales) unless spec.f32 names them
// (zeros), norms 1, ssm_a −1, other 1-D tensors 0, and a byte-level BPE vocabulary of the config's size.
func writeModel(t testing.TB, dir string, spec modelSpec, cfg []byte) string {
	t.Helper()
	s, err := fit.ShapeFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	arch := s.Arch
	w := gguf.NewWriter()
	set := func(k string, v gguf.Value) {
		if err := w.SetKV(k, v); err != nil {
			t.Fatal(err)
		}
	}
	set("general.architecture", gguf.String(arch))
	set("general.name", gguf.String(spec.name))
	set("general.alignment", gguf.Uint32(32))
	set("general.file_type", gguf.Uint32(uint32(gguf.FileTypeQ4_0)))
	for k, v := range s.KV {
		if !strings.HasPrefix(k, arch+".") || k == arch+".vocab_size" {
			continue
		}
		set(k, gguf.Uint32(v.(uint32)))
	}
	set(arch+".attention.layer_norm_rms_epsilon", gguf.Float32(1e-6))
	set(arch+".rope.freq_base", gguf.Float32(1e6))
	if arch == "qwen35" {
		hd, _ := s.KV[arch+".attention.key_length"].(uint32)
		set(arch+".rope.dimension_count", gguf.Uint32(hd/4))
		// M-RoPE sections cover the rotary pairs (hd/8): Qwen3.5's 11+11+10 for head_dim 256, else a like split.
		pairs := int32(hd / 8)
		third := pairs / 3
		sections := []int32{pairs - 2*third, third, third, 0}
		if pairs == 32 {
			sections = []int32{11, 11, 10, 0}
		}
		set(arch+".rope.dimension_sections", gguf.Int32s(sections))
	}
	vocab := 0
	for _, tn := range s.Tensors {
		if tn.Name == "token_embd.weight" {
			vocab = int(tn.Shape[1])
		}
	}
	tokens, types, merges := vocabOf(vocab)
	set("tokenizer.ggml.model", gguf.String("gpt2"))
	set("tokenizer.ggml.pre", gguf.String("qwen2"))
	set("tokenizer.ggml.tokens", gguf.Strings(tokens))
	set("tokenizer.ggml.token_type", gguf.Int32s(types))
	set("tokenizer.ggml.merges", gguf.Strings(merges))
	set("tokenizer.ggml.bos_token_id", gguf.Uint32(uint32(vocab-3)))
	set("tokenizer.ggml.eos_token_id", gguf.Uint32(uint32(vocab-1)))
	set("tokenizer.ggml.add_bos_token", gguf.Bool(false))

	typeOf := func(name string, dims int) gguf.Type {
		if dims >= 2 && !strings.Contains(name, "ssm_conv1d") && !slices.Contains(spec.f32, name) {
			return gguf.TypeQ4_0
		}
		return gguf.TypeF32
	}
	for _, tn := range s.Tensors {
		if err := w.AddTensor(tn.Name, typeOf(tn.Name, len(tn.Shape)), tn.Shape); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, spec.name+".gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := w.WriteHeader(bw); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 18*4096)
	for {
		ti, ok := w.NextTensor()
		if !ok {
			break
		}
		size := int(ti.Size())
		switch ti.Type {
		case gguf.TypeQ4_0:
			for done := 0; done < size; {
				n := min(len(buf), size-done)
				for b := 0; b < n; b += 18 {
					binary.LittleEndian.PutUint16(buf[b:], 0x2000) // scale 2^-7
					for j := 2; j < 18; j += 8 {
						binary.LittleEndian.PutUint64(buf[b+j:], rng.Uint64())
					}
				}
				if err := w.WriteTensorPart(ti.Name, buf[:n], done+n == size); err != nil {
					t.Fatal(err)
				}
				done += n
			}
		default:
			v := float32(0)
			switch {
			case strings.HasSuffix(ti.Name, "norm.weight"):
				v = 1
			case strings.HasSuffix(ti.Name, "ssm_a"):
				v = -1
			case strings.Contains(ti.Name, "ssm_conv1d"):
				v = 0.1
			}
			data := make([]byte, size)
			for i := 0; i < size; i += 4 {
				binary.LittleEndian.PutUint32(data[i:], math.Float32bits(v))
			}
			if err := w.WriteTensor(ti.Name, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// vocabOf is a byte-level BPE vocabulary of n entries: the 256 GPT-2 byte symbols, filler tokens, and
// <|endoftext|>, <|im_start|>, <|im_end|> last.
func vocabOf(n int) (tokens []string, types []int32, merges []string) {
	k := 0
	for b := range 256 {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			tokens = append(tokens, string(rune(b)))
		} else {
			tokens = append(tokens, string(rune(256+k)))
			k++
		}
		types = append(types, 1)
	}
	merges = []string{"h e", "l l"}
	tokens = append(tokens, "he", "ll")
	types = append(types, 1, 1)
	for i := 0; len(tokens) < n-3; i++ {
		tokens = append(tokens, fmt.Sprintf("tok%d", i))
		types = append(types, 1)
	}
	for _, sp := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, sp)
		types = append(types, 3)
	}
	return tokens, types, merges
}
