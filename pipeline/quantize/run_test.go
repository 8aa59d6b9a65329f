package quantize

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize/kquant"
)

// writeF16Model writes a small qwen3-layout GGUF with F16 matrices and F32 norms.
func writeF16Model(t testing.TB, path string, layers int, embd, ff, vocab uint64) {
	t.Helper()
	w := gguf.NewWriter()
	w.SetKV("general.architecture", gguf.String("qwen3"))
	w.SetKV("general.name", gguf.String("tiny"))
	w.SetKV("qwen3.block_count", gguf.Uint32(uint32(layers)))
	w.SetKV("qwen3.attention.head_count", gguf.Uint32(4))
	w.SetKV("qwen3.attention.head_count_kv", gguf.Uint32(2))
	w.SetKV("qwen3.context_length", gguf.Uint32(4096))
	w.SetKV("qwen3.embedding_length", gguf.Uint32(uint32(embd)))
	w.SetKV("qwen3.feed_forward_length", gguf.Uint32(uint32(ff)))
	w.SetKV("qwen3.rope.freq_base", gguf.Float32(1e6))
	w.SetKV("qwen3.attention.layer_norm_rms_epsilon", gguf.Float32(1e-6))
	w.SetKV("general.file_type", gguf.Uint32(1))
	setTestVocab(w, vocab) // a complete model: package modelcheck validates what quantize reads and writes
	var defs []testTensor
	defs = append(defs, testTensor{"token_embd.weight", gguf.TypeF16, []uint64{embd, vocab}}, testTensor{"output_norm.weight", gguf.TypeF32, []uint64{embd}})
	for i := 0; i < layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		defs = append(defs,
			testTensor{p + "attn_norm.weight", gguf.TypeF32, []uint64{embd}},
			testTensor{p + "attn_q.weight", gguf.TypeF16, []uint64{embd, embd}},
			testTensor{p + "attn_k.weight", gguf.TypeF16, []uint64{embd, embd / 2}},
			testTensor{p + "attn_v.weight", gguf.TypeF16, []uint64{embd, embd / 2}},
			testTensor{p + "attn_output.weight", gguf.TypeF16, []uint64{embd, embd}},
			testTensor{p + "ffn_gate.weight", gguf.TypeF16, []uint64{embd, ff}},
			testTensor{p + "ffn_up.weight", gguf.TypeF16, []uint64{embd, ff}},
			testTensor{p + "ffn_down.weight", gguf.TypeF16, []uint64{ff, embd}},
			testTensor{p + "ffn_norm.weight", gguf.TypeF32, []uint64{embd}},
			testTensor{p + "attn_q_norm.weight", gguf.TypeF32, []uint64{embd / 4}},
			testTensor{p + "attn_k_norm.weight", gguf.TypeF32, []uint64{embd / 4}},
		)
	}
	writeRandomTensors(t, w, path, defs, 1, 2)
}

func TestRunMatchesKernelsAndThreads(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in-F16.gguf")
	writeF16Model(t, in, 4, 256, 512, 1200)
	var outs [][]byte
	for _, threads := range []int{1, 3} {
		src, err := OpenGGUF(in)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, fmt.Sprintf("out-%d.gguf", threads))
		res, err := Run(context.Background(), Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: out, Threads: threads}, nil)
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Artifacts[0].SHA256 == "" || res.BitsPerWeight < 4 || res.BitsPerWeight > 7 {
			t.Errorf("result %+v", res)
		}
		if n, sum, err := fsx.HashFile(out); err != nil || sum != res.Artifacts[0].SHA256 || n != res.Artifacts[0].Size {
			t.Fatalf("artifact %+v, file has %d bytes sha256 %s (%v)", res.Artifacts[0], n, sum, err)
		}
		b, _ := os.ReadFile(out)
		outs = append(outs, b)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("output differs between 1 and 3 threads")
	}
	// Every tensor equals the kernel applied to the decoded input, independently of the chunking.
	inF, _ := gguf.OpenFile(in)
	defer inF.Close()
	outF, err := gguf.Open(bytes.NewReader(outs[0]), int64(len(outs[0])), "out")
	if err != nil {
		t.Fatal(err)
	}
	if ft, _ := outF.Uint("general.file_type"); ft != 15 {
		t.Errorf("general.file_type = %d", ft)
	}
	last := outF.KVs[len(outF.KVs)-1].Key
	if last != "general.file_type" || outF.KVs[len(outF.KVs)-2].Key != "general.quantization_version" {
		t.Errorf("metadata order: last keys %q", last)
	}
	seenQ6 := false
	for _, ot := range outF.Tensors {
		it, _ := inF.Tensor(ot.Name)
		r, _ := inF.TensorReader(ot.Name)
		raw, _ := io.ReadAll(r)
		vals := make([]float32, it.NumElements())
		if it.Type == gguf.TypeF16 {
			half.DecodeF16LE(vals, raw)
		} else {
			half.DecodeF32LE(vals, raw)
		}
		var want []byte
		switch ot.Type {
		case gguf.TypeF32:
			want = raw
		default:
			f, ok := kquant.ForType(uint32(ot.Type))
			if !ok {
				t.Fatalf("%s: type %s", ot.Name, ot.Type)
			}
			want = make([]byte, ot.Size())
			f.Quantize(want, vals)
		}
		r2, _ := outF.TensorReader(ot.Name)
		got, _ := io.ReadAll(r2)
		if !bytes.Equal(got, want) {
			t.Errorf("tensor %s (%s) differs from the kernel output", ot.Name, ot.Type)
		}
		seenQ6 = seenQ6 || ot.Type == gguf.TypeQ6_K
	}
	if !seenQ6 {
		t.Error("Q4_K_M plan produced no Q6_K tensor")
	}
}

func TestRunTruncatedInputLeavesNoOutput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.gguf")
	writeF16Model(t, in, 1, 256, 256, 300)
	b, _ := os.ReadFile(in)
	os.WriteFile(in, b[:len(b)-1000], 0o644)
	_, err := OpenGGUF(in)
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated input: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("stray files: %v", entries)
	}
}

func TestRunCancelLeavesNoOutput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.gguf")
	writeF16Model(t, in, 2, 256, 512, 600)
	src, _ := OpenGGUF(in)
	defer src.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(dir, "out.gguf")
	if _, err := Run(ctx, Options{Source: src, FileType: gguf.FileTypeQ8_0, Out: out}, nil); err == nil {
		t.Fatal("cancelled run succeeded")
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("output exists after cancel")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("stray files: %v", entries)
	}
}

// testTensor is one tensor of a generated test model.
type testTensor struct {
	name  string
	typ   gguf.Type
	shape []uint64
}

// setTestVocab gives a generated test model a vocabulary of n plain tokens.
func setTestVocab(w *gguf.Writer, n uint64) {
	tokens, types := make([]string, n), make([]int32, n)
	for i := range tokens {
		tokens[i], types[i] = fmt.Sprintf("t%d", i), 1
	}
	w.SetKV("tokenizer.ggml.model", gguf.String("gpt2"))
	w.SetKV("tokenizer.ggml.tokens", gguf.Strings(tokens))
	w.SetKV("tokenizer.ggml.token_type", gguf.Int32s(types))
	w.SetKV("tokenizer.ggml.merges", gguf.Strings([]string{}))
}

// writeRandomTensors adds defs to w and writes the file at path with N(0, 0.05²) values from a PCG seeded with
// (seed1, seed2), F16 or F32 as each tensor's type says.
func writeRandomTensors(t testing.TB, w *gguf.Writer, path string, defs []testTensor, seed1, seed2 uint64) {
	t.Helper()
	for _, d := range defs {
		if err := w.AddTensor(d.name, d.typ, d.shape); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := w.WriteHeader(f); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed1, seed2))
	for _, ti := range w.Tensors() {
		vals := make([]float32, ti.NumElements())
		for i := range vals {
			vals[i] = float32(rng.NormFloat64() * 0.05)
		}
		buf := make([]byte, ti.Size())
		if ti.Type == gguf.TypeF16 {
			half.EncodeF16LE(buf, vals)
		} else {
			half.EncodeF32LE(buf, vals)
		}
		if err := w.WriteTensor(ti.Name, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
}
