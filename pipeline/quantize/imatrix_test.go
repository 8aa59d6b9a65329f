package quantize

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/quantize/kquant"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// writeMoEModel writes a small qwen3moe GGUF (F16 matrices, F32 norms and router) with 3-D expert tensors.
func writeMoEModel(t testing.TB, path string, layers int, embd, ff, experts, vocab uint64) {
	t.Helper()
	w := gguf.NewWriter()
	w.SetKV("general.architecture", gguf.String("qwen3moe"))
	w.SetKV("qwen3moe.block_count", gguf.Uint32(uint32(layers)))
	w.SetKV("qwen3moe.attention.head_count", gguf.Uint32(4))
	w.SetKV("qwen3moe.attention.head_count_kv", gguf.Uint32(2))
	w.SetKV("qwen3moe.expert_count", gguf.Uint32(uint32(experts)))
	w.SetKV("qwen3moe.expert_used_count", gguf.Uint32(2))
	w.SetKV("qwen3moe.context_length", gguf.Uint32(4096))
	w.SetKV("qwen3moe.embedding_length", gguf.Uint32(uint32(embd)))
	w.SetKV("qwen3moe.expert_feed_forward_length", gguf.Uint32(uint32(ff)))
	w.SetKV("qwen3moe.rope.freq_base", gguf.Float32(1e6))
	w.SetKV("qwen3moe.attention.layer_norm_rms_epsilon", gguf.Float32(1e-6))
	w.SetKV("general.file_type", gguf.Uint32(1))
	setTestVocab(w, vocab) // a complete model: package modelcheck validates what quantize reads and writes
	defs := []testTensor{{"token_embd.weight", gguf.TypeF16, []uint64{embd, vocab}}, {"output.weight", gguf.TypeF16, []uint64{embd, vocab}},
		{"output_norm.weight", gguf.TypeF32, []uint64{embd}}}
	for i := range layers {
		p := fmt.Sprintf("blk.%d.", i)
		defs = append(defs,
			testTensor{p + "attn_norm.weight", gguf.TypeF32, []uint64{embd}},
			testTensor{p + "attn_q.weight", gguf.TypeF16, []uint64{embd, embd}},
			testTensor{p + "attn_k.weight", gguf.TypeF16, []uint64{embd, embd / 2}},
			testTensor{p + "attn_v.weight", gguf.TypeF16, []uint64{embd, embd / 2}},
			testTensor{p + "attn_output.weight", gguf.TypeF16, []uint64{embd, embd}},
			testTensor{p + "attn_q_norm.weight", gguf.TypeF32, []uint64{embd / 4}},
			testTensor{p + "attn_k_norm.weight", gguf.TypeF32, []uint64{embd / 4}},
			testTensor{p + "ffn_norm.weight", gguf.TypeF32, []uint64{embd}},
			testTensor{p + "ffn_gate_inp.weight", gguf.TypeF32, []uint64{embd, experts}},
			testTensor{p + "ffn_gate_exps.weight", gguf.TypeF16, []uint64{embd, ff, experts}},
			testTensor{p + "ffn_up_exps.weight", gguf.TypeF16, []uint64{embd, ff, experts}},
			testTensor{p + "ffn_down_exps.weight", gguf.TypeF16, []uint64{ff, embd, experts}},
		)
	}
	writeRandomTensors(t, w, path, defs, 3, 4)
}

// imatrixFor writes an importance matrix with an entry for every matrix of the GGUF at model (lognormal-ish
// positive values, per expert for 3-D tensors, one idle expert), minus the names in skip, with sizes changed
// for the names in wrong, and returns its path.
func imatrixFor(t testing.TB, model string, skip, wrong map[string]bool) string {
	t.Helper()
	f, err := gguf.OpenFile(model)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	m := &imatrix.Matrix{Datasets: []string{"calib.jsonl"}, ChunkCount: 7, ChunkSize: 512}
	for _, ti := range f.Tensors {
		if len(ti.Shape) < 2 || skip[ti.Name] || strings.Contains(ti.Name, "norm") {
			continue
		}
		cols, mats := int(ti.Shape[0]), 1
		if len(ti.Shape) > 2 {
			mats = int(ti.Shape[2])
		}
		if wrong[ti.Name] {
			cols /= 2
		}
		e := imatrix.Entry{Name: ti.Name, Cols: cols, Sums: make([]float32, cols*mats), Counts: make([]float64, mats)}
		for i := range e.Sums {
			e.Sums[i] = float32(math.Exp(2*rng.NormFloat64())) * 3584
		}
		for i := range e.Counts {
			e.Counts[i] = 3584
		}
		if mats > 1 {
			e.Counts[1] = 0 // an expert no token reached: importance 1
		}
		m.Entries = append(m.Entries, e)
	}
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Name < m.Entries[j].Name })
	path := filepath.Join(t.TempDir(), "test.imatrix.gguf")
	if _, _, err := imatrix.WriteFile(path, m, imatrix.FormatGGUF); err != nil {
		t.Fatal(err)
	}
	return path
}

func runQ(t testing.TB, in string, o Options) (Result, error) {
	t.Helper()
	src, err := OpenGGUF(in)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	o.Source = src
	return Run(context.Background(), o, nil)
}

// TestImatrixQuantizationIsTheKernels: every quantized tensor of a file made with an importance matrix equals
// the weighted kernel applied to the decoded input with that tensor's importance values (for the expert stacks,
// each expert's rows with its own slice), for several file types, dense and MoE; the quantize.imatrix.* keys
// follow llama-quantize's (after general.file_type, file / dataset / entries / chunks), and without the
// importance matrix the bytes differ.
func TestImatrixQuantizationIsTheKernels(t *testing.T) {
	dir := t.TempDir()
	dense := filepath.Join(dir, "dense-F16.gguf")
	writeF16Model(t, dense, 2, 256, 512, 300)
	moe := filepath.Join(dir, "moe-F16.gguf")
	writeMoEModel(t, moe, 2, 256, 256, 4, 300)
	for _, c := range []struct {
		model string
		ft    gguf.FileType
	}{
		{dense, gguf.FileTypeQ4_K_M}, {dense, gguf.FileTypeIQ2_XXS}, {dense, gguf.FileTypeQ4_0}, {moe, gguf.FileTypeIQ3_XXS},
		{moe, gguf.FileTypeQ5_K_M},
	} {
		t.Run(fmt.Sprintf("%s-%s", filepath.Base(c.model), c.ft), func(t *testing.T) {
			imPath := imatrixFor(t, c.model, nil, nil)
			im, err := imatrix.Load(imPath)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			out := filepath.Join(t.TempDir(), "out.gguf")
			res, err := runQ(t, c.model, Options{FileType: c.ft, Out: out, Imatrix: im, ImatrixName: "m.imatrix.gguf", Threads: 3})
			if err != nil {
				t.Fatal(err)
			}
			u := res.Imatrix
			if u == nil || u.Used == 0 || len(u.Missing) != 0 || u.Entries != im.Len() || u.SHA256 != im.SHA256 {
				t.Fatalf("imatrix use %+v", u)
			}
			inF, _ := gguf.OpenFile(c.model)
			defer inF.Close()
			outF, err := gguf.OpenFile(out)
			if err != nil {
				t.Fatal(err)
			}
			defer outF.Close()
			keys := []string{}
			for _, kv := range outF.KVs[len(outF.KVs)-7:] {
				keys = append(keys, kv.Key)
			}
			want := []string{"general.quantization_version", "general.file_type", KeyImatrixFile, KeyImatrixDataset,
				KeyImatrixEntries, KeyImatrixChunks, KeyImatrixSHA256}
			if strings.Join(keys, " ") != strings.Join(want, " ") {
				t.Errorf("last keys %v, want %v", keys, want)
			}
			if outF.String(KeyImatrixFile) != "m.imatrix.gguf" || outF.String(KeyImatrixDataset) != "calib.jsonl" {
				t.Errorf("imatrix keys: %q %q", outF.String(KeyImatrixFile), outF.String(KeyImatrixDataset))
			}
			if n, _ := outF.Uint(KeyImatrixEntries); int(n) != im.Len() {
				t.Errorf("entries_count %d", n)
			}
			if n, _ := outF.Uint(KeyImatrixChunks); n != 7 {
				t.Errorf("chunks_count %d", n)
			}
			checked := 0
			for _, e := range res.Plan.Entries {
				if !e.Convert() || !e.To.Quantized() {
					continue
				}
				vec, _ := im.Vector(e.Name)
				if vec == nil {
					t.Fatalf("%s: no importance values", e.Name)
				}
				ti, _ := inF.Tensor(e.Name)
				r, _ := inF.TensorReader(e.Name)
				raw := make([]byte, r.Size())
				r.ReadAt(raw, 0)
				vals := make([]float32, ti.NumElements())
				half.DecodeF16LE(vals, raw)
				f, _ := kquant.ForType(uint32(e.To))
				ne0 := int(e.Shape[0])
				perExpert := len(vals)
				if len(e.Shape) > 2 {
					perExpert = ne0 * int(e.Shape[1])
				}
				want := make([]byte, 0, e.Bytes)
				for x := 0; x*perExpert < len(vals); x++ {
					part := make([]byte, f.RowBytes(perExpert))
					f.QuantizeWeighted(part, vals[x*perExpert:(x+1)*perExpert], vec[x*ne0:(x+1)*ne0])
					want = append(want, part...)
				}
				gr, _ := outF.TensorReader(e.Name)
				got := make([]byte, gr.Size())
				gr.ReadAt(got, 0)
				if !bytes.Equal(got, want) {
					t.Errorf("%s (%s): bytes differ from the weighted kernel", e.Name, e.To)
				}
				checked++
			}
			if checked == 0 {
				t.Fatal("nothing checked")
			}
			if c.ft == gguf.FileTypeQ4_K_M {
				plain := filepath.Join(t.TempDir(), "plain.gguf")
				if _, err := runQ(t, c.model, Options{FileType: c.ft, Out: plain}); err != nil {
					t.Fatal(err)
				}
				a, b := tensorData(t, out), tensorData(t, plain)
				if bytes.Equal(a["blk.0.attn_q.weight"], b["blk.0.attn_q.weight"]) {
					t.Error("the importance matrix changed nothing")
				}
			}
		})
	}
}

// TestImatrixBadInput: an importance matrix of another model is refused before anything is written, with a
// one-line input error naming the tensor; a missing entry is a warning where llama-quantize goes on, an error
// where the type needs one; a type that needs an importance matrix is refused without one (and a dry run
// only says so); names longer than llama-quantize stores are cut to 127 bytes.
func TestImatrixBadInput(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m-F16.gguf")
	writeF16Model(t, model, 2, 256, 512, 300)
	load := func(path string) *imatrix.Importance {
		im, err := imatrix.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { im.Close() })
		return im
	}
	noOutput := func(out string) {
		t.Helper()
		if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 0 {
			t.Errorf("files left after a refused run: %v", ents)
		}
	}
	out := filepath.Join(t.TempDir(), "out.gguf")

	// Wrong length: refused, naming the tensor.
	im := load(imatrixFor(t, model, nil, map[string]bool{"blk.1.ffn_down.weight": true}))
	_, err := runQ(t, model, Options{FileType: gguf.FileTypeQ4_K_M, Out: out, Imatrix: im})
	var me *ImatrixMismatchError
	if !errors.As(err, &me) || me.Tensor != "blk.1.ffn_down.weight" || !pipeline.IsInputError(err) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("wrong length: %v", err)
	}
	noOutput(out)
	// token_embd of the wrong length: llama-quantize goes on without it.
	rep := &notes{}
	im = load(imatrixFor(t, model, nil, map[string]bool{"token_embd.weight": true}))
	src, _ := OpenGGUF(model)
	res, err := Run(context.Background(), Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: out, Imatrix: im}, rep)
	src.Close()
	if err != nil || len(res.Imatrix.Missing) != 1 || !rep.has("token_embd.weight") {
		t.Fatalf("token_embd of the wrong length: %v %+v %v", err, res.Imatrix, rep.msgs)
	}
	os.Remove(out)
	// Missing entries: a warning for Q4_K_M, an error for IQ2_XXS.
	im = load(imatrixFor(t, model, map[string]bool{"blk.0.attn_q.weight": true}, nil))
	rep = &notes{}
	src, _ = OpenGGUF(model)
	res, err = Run(context.Background(), Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: out, Imatrix: im}, rep)
	src.Close()
	if err != nil || len(res.Imatrix.Missing) != 1 || res.Imatrix.Missing[0] != "blk.0.attn_q.weight" || !rep.has("blk.0.attn_q.weight") {
		t.Fatalf("missing entry: %v %+v %v", err, res.Imatrix, rep.msgs)
	}
	os.Remove(out)
	_, err = runQ(t, model, Options{FileType: gguf.FileTypeIQ2_XXS, Out: out, Imatrix: im})
	if !errors.As(err, &me) || me.Tensor != "blk.0.attn_q.weight" || me.Got != 0 || !pipeline.IsInputError(err) {
		t.Fatalf("missing entry for IQ2_XXS: %v", err)
	}
	noOutput(out)
	// No importance matrix for a type that needs one.
	var re *ImatrixRequiredError
	if _, err := runQ(t, model, Options{FileType: gguf.FileTypeIQ1_M, Out: out}); !errors.As(err, &re) || !pipeline.IsInputError(err) {
		t.Fatalf("IQ1_M without an imatrix: %v", err)
	}
	if _, err := runQ(t, model, Options{FileType: gguf.FileTypeQ8_0, Out: out,
		Overrides: plan.Overrides{TokenEmbdType: ptr(gguf.TypeIQ2_XS)}}); !errors.As(err, &re) || re.Tensor != "token_embd.weight" {
		t.Fatalf("IQ2_XS embedding without an imatrix: %v (ggml would abort)", err)
	}
	noOutput(out)
	res, err = runQ(t, model, Options{FileType: gguf.FileTypeIQ1_M, DryRun: true})
	if err != nil || !res.NeedsImatrix {
		t.Fatalf("dry run: %v, needs %v", err, res.NeedsImatrix)
	}
	// Long names are cut as llama-quantize cuts them.
	im = load(imatrixFor(t, model, nil, nil))
	long := strings.Repeat("x", 200)
	if _, err := runQ(t, model, Options{FileType: gguf.FileTypeQ4_0, Out: out, Imatrix: im, ImatrixName: long}); err != nil {
		t.Fatal(err)
	}
	f, _ := gguf.OpenFile(out)
	if got := f.String(KeyImatrixFile); got != long[:127] {
		t.Errorf("quantize.imatrix.file has %d bytes, want 127", len(got))
	}
	f.Close()
}

func ptr[T any](v T) *T { return &v }

// notes is a Reporter that keeps the notes.
type notes struct {
	pipeline.Reporter
	msgs []string
}

func (n *notes) Begin(string, int64)             {}
func (n *notes) Add(int64)                       {}
func (n *notes) End(string, error)               {}
func (n *notes) Note(_ pipeline.Level, m string) { n.msgs = append(n.msgs, m) }
func (n *notes) has(s string) bool {
	for _, m := range n.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// TestTernaryTypesWarnAboutServing: TQ1_0/TQ2_0 files are valid llama.cpp models, but Ollama's engine has no
// ternary types, so quantize says so (and does not for the other types).
func TestTernaryTypesWarnAboutServing(t *testing.T) {
	in := filepath.Join(t.TempDir(), "dense-F16.gguf")
	writeF16Model(t, in, 1, 256, 512, 300)
	for _, c := range []struct {
		ft   gguf.FileType
		warn bool
	}{{gguf.FileTypeTQ1_0, true}, {gguf.FileTypeTQ2_0, true}, {gguf.FileTypeQ4_K_M, false}, {gguf.FileTypeIQ4_XS, false}} {
		src, err := OpenGGUF(in)
		if err != nil {
			t.Fatal(err)
		}
		rep := &notes{}
		_, err = Run(context.Background(), Options{Source: src, FileType: c.ft, DryRun: true}, rep)
		src.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.ft, err)
		}
		if got := rep.has("cannot serve them"); got != c.warn {
			t.Errorf("%s: serving warning %v, want %v (notes %q)", c.ft, got, c.warn, rep.msgs)
		}
	}
}
