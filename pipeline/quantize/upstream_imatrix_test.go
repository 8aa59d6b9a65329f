package quantize

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// The tests in this file run llama.cpp's own code on phonellm's importance matrices: common_imatrix_load
// (libllama-common) and llama_model_quantize (libllama) of the llama.cpp release node-llama-cpp ships, driven
// by testdata/llamacpp/imatrix_oracle.cpp, which is compiled here with g++ against the headers of that
// release (node-llama-cpp's llama/gitRelease.bundle). They are the "llama-quantize reads phonellm's imatrix"
// half of issue 16's round trip; format_test.go in pipeline/imatrix has the other half (files written from
// the format description, read by phonellm).

var upstreamImatrix struct {
	once sync.Once
	bin  string
	err  error
	miss string // what is not installed
}

// imatrixOracle returns the path of the compiled oracle, building it once per test binary, or skips the test
// (fails with PHONELLM_REQUIRE_ORACLE=1) when node-llama-cpp, git or g++ is not installed.
func imatrixOracle(t *testing.T) string {
	t.Helper()
	u := &upstreamImatrix
	u.once.Do(func() {
		root := oracle.Dir()
		bundle := filepath.Join(root, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")
		bins := filepath.Join(root, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
		// The versioned names (libllama.v0.5.0.so) follow the release node-llama-cpp ships.
		var libs []string
		for _, pattern := range []string{"libllama-common.so", "libllama.v*.so", "libggml.v*.so", "libggml-base.so"} {
			m, _ := filepath.Glob(filepath.Join(bins, pattern))
			if len(m) != 1 {
				u.miss = fmt.Sprintf("llama.cpp from node-llama-cpp not installed (%s in %s; run %s)", pattern, bins, oracle.SetupCommand)
				return
			}
			libs = append(libs, m[0])
		}
		if _, err := os.Stat(bundle); err != nil {
			u.miss = fmt.Sprintf("llama.cpp sources from node-llama-cpp not installed (%s; run %s)", bundle, oracle.SetupCommand)
			return
		}
		for _, tool := range []string{"git", "g++"} {
			if _, err := exec.LookPath(tool); err != nil {
				u.miss = tool + " not installed (Debian: apt-get install git g++)"
				return
			}
		}
		src, err := filepath.Abs(filepath.Join("testdata", "llamacpp", "imatrix_oracle.cpp"))
		if err != nil {
			u.err = err
			return
		}
		dir, err := os.MkdirTemp("", "phonellm-imatrix-oracle-")
		if err != nil {
			u.err = err
			return
		}
		run := func(name string, args ...string) error {
			cmd := exec.Command(name, args...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
			}
			return nil
		}
		// Only the headers are needed: clone without a checkout and export those folders.
		if u.err = run("git", "clone", "-q", "--no-checkout", bundle, "src"); u.err != nil {
			return
		}
		archive := filepath.Join(dir, "headers.tar")
		if u.err = run("git", "-C", "src", "archive", "-o", archive, "HEAD", "include", "ggml/include", "common/imatrix-loader.h"); u.err != nil {
			return
		}
		if u.err = run("tar", "-xf", archive); u.err != nil {
			return
		}
		os.RemoveAll(filepath.Join(dir, "src"))
		u.bin = filepath.Join(dir, "imatrix_oracle")
		args := []string{"-std=c++17", "-O1", "-Iinclude", "-Iggml/include", "-Icommon", src, "-o", u.bin}
		args = append(args, libs...)
		u.err = run("g++", append(args, "-Wl,-rpath,"+bins)...)
	})
	if u.miss != "" {
		oracle.Unavailable(t, u.miss)
	}
	if u.err != nil {
		t.Fatalf("building the llama.cpp imatrix oracle: %v", u.err)
	}
	return u.bin
}

// upstreamLoad is what llama-quantize takes from an imatrix file, as the oracle prints it.
type upstreamLoad struct {
	legacy, hasMeta       bool
	chunkCount, chunkSize int
	datasets              []string
	counts                map[string][]int64
	values                map[string][]uint32 // float32 bits
	names                 []string
}

func runUpstreamLoad(t *testing.T, bin, file string) upstreamLoad {
	t.Helper()
	cmd := exec.Command(bin, "load", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.cpp cannot load %s: %v\n%s", file, err, stderr.String())
	}
	u := upstreamLoad{counts: map[string][]int64{}, values: map[string][]uint32{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<26)
	var cur string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		num := func(s string) int64 {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("oracle output %q: %v", sc.Text(), err)
			}
			return v
		}
		switch f[0] {
		case "meta":
			u.legacy, u.hasMeta = f[1] == "1", f[2] == "1"
			u.chunkCount, u.chunkSize = int(num(f[3])), int(num(f[4]))
		case "dataset":
			u.datasets = append(u.datasets, strings.TrimPrefix(sc.Text(), "dataset "))
		case "entry":
			cur = f[1]
			u.names = append(u.names, cur)
			for _, c := range f[3:] {
				u.counts[cur] = append(u.counts[cur], num(c))
			}
		case "values":
			for _, h := range f[1:] {
				v, err := strconv.ParseUint(h, 16, 32)
				if err != nil {
					t.Fatal(err)
				}
				u.values[cur] = append(u.values[cur], uint32(v))
			}
		}
	}
	return u
}

// expertFixture is an importance matrix with dense entries and an expert stack in which one expert saw no
// token, sums spread over many orders of magnitude.
func expertFixture() *imatrix.Matrix {
	rng := rand.New(rand.NewPCG(16, 1))
	m := &imatrix.Matrix{Datasets: []string{"prompts.jsonl", "extra.txt"}, ChunkCount: 9, ChunkSize: 512}
	add := func(name string, cols int, counts ...float64) {
		e := imatrix.Entry{Name: name, Cols: cols, Sums: make([]float32, cols*len(counts)), Counts: counts}
		for i := range e.Sums {
			if counts[i/cols] > 0 {
				e.Sums[i] = float32(math.Exp(3*rng.NormFloat64())) * float32(counts[i/cols])
			}
		}
		m.Entries = append(m.Entries, e)
	}
	add("blk.0.attn_output.weight", 512, 4608)
	add("blk.0.attn_q.weight", 256, 4608)
	add("blk.0.ffn_down_exps.weight", 128, 1731, 0, 95, 2782)
	add("blk.0.ffn_gate_exps.weight", 256, 1731, 0, 95, 2782)
	add("blk.1.ffn_down.weight", 768, 7)
	return m
}

// TestUpstreamLoadsOurImatrix: llama.cpp's common_imatrix_load reads the GGUF and the legacy .dat importance
// matrices phonellm writes (with an expert stack, one expert unseen), and the per-column values llama-quantize
// derives from them are bit for bit the ones phonellm's Load gives the kernels; the metadata (datasets, chunk
// count and size, legacy or not) reads the same. What llama.cpp read, written back with the gguf calls of
// llama-imatrix's save_imatrix, is our GGUF file byte for byte.
func TestUpstreamLoadsOurImatrix(t *testing.T) {
	bin := imatrixOracle(t)
	m := expertFixture()
	for _, format := range []imatrix.Format{imatrix.FormatGGUF, imatrix.FormatDat} {
		t.Run(string(format), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fixture.imatrix."+string(format))
			if _, _, err := imatrix.WriteFile(path, m, format); err != nil {
				t.Fatal(err)
			}
			if format == imatrix.FormatGGUF {
				// llama-imatrix's writer, given what llama.cpp read from our file, writes our file again.
				again := filepath.Join(t.TempDir(), "rewritten.imatrix.gguf")
				if out, err := exec.Command(bin, "rewrite", path, again).CombinedOutput(); err != nil {
					t.Fatalf("rewrite: %v\n%s", err, out)
				}
				a, _ := os.ReadFile(path)
				b, _ := os.ReadFile(again)
				if !bytes.Equal(a, b) {
					t.Errorf("llama-imatrix's gguf calls write %d bytes that differ from ours (%d bytes)", len(b), len(a))
				}
			}
			up := runUpstreamLoad(t, bin, path)
			im, err := imatrix.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			if up.legacy != im.Legacy || (!up.legacy && !up.hasMeta) {
				t.Errorf("llama.cpp: legacy %v, metadata %v; phonellm: legacy %v", up.legacy, up.hasMeta, im.Legacy)
			}
			if up.chunkCount != im.Chunks || fmt.Sprint(up.datasets) != fmt.Sprint(im.Datasets) {
				t.Errorf("llama.cpp: %d chunks, datasets %q; phonellm: %d, %q", up.chunkCount, up.datasets, im.Chunks, im.Datasets)
			}
			if format == imatrix.FormatGGUF && up.chunkSize != m.ChunkSize {
				t.Errorf("llama.cpp reads chunk size %d, want %d", up.chunkSize, m.ChunkSize)
			}
			if fmt.Sprint(up.names) != fmt.Sprint(im.Names()) {
				t.Fatalf("entries: llama.cpp %q, phonellm %q", up.names, im.Names())
			}
			for _, name := range up.names {
				v, err := im.Vector(name)
				if err != nil {
					t.Fatal(err)
				}
				want := up.values[name]
				if len(v) != len(want) {
					t.Fatalf("%s: %d values, llama.cpp has %d", name, len(v), len(want))
				}
				bad := 0
				for i, x := range v {
					if math.Float32bits(x) != want[i] {
						if bad++; bad <= 3 {
							t.Errorf("%s[%d]: phonellm %g, llama-quantize %g", name, i, x, math.Float32frombits(want[i]))
						}
					}
				}
				if format == imatrix.FormatGGUF {
					e := m.Entry(name)
					for j, c := range up.counts[name] {
						if float64(c) != e.Counts[j] {
							t.Errorf("%s: count %d read as %d, written %g", name, j, c, e.Counts[j])
						}
					}
				}
			}
		})
	}
}

// TestUpstreamQuantizeWithOurImatrix: llama.cpp's llama_model_quantize, given an importance matrix phonellm
// wrote (read by llama.cpp's loader as llama-quantize reads it), makes the same file phonellm's quantize makes
// with it — every tensor of the same type with the same bytes, and the same quantize.imatrix.* values — for a
// dense and a mixture-of-experts model (per-expert importance slices, one expert unseen), over file types that
// use the weighted K-quant, legacy, IQ4, lattice (IQ1/IQ2/IQ3) and ternary kernels. (Each case costs seconds
// of llama.cpp's single-threaded quantizer, so the list is a sample; the kernels themselves are checked
// against ggml's goldens in kquant, the per-tensor types of every file type in plan.)
func TestUpstreamQuantizeWithOurImatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp's quantizer")
	}
	bin := imatrixOracle(t)
	cases := map[string][]gguf.FileType{
		"qwen3":    {gguf.FileTypeQ4_K_M, gguf.FileTypeIQ4_XS, gguf.FileTypeIQ2_XXS, gguf.FileTypeQ2_K_S, gguf.FileTypeIQ1_M, gguf.FileTypeIQ3_M, gguf.FileTypeTQ2_0, gguf.FileTypeQ4_0},
		"qwen3moe": {gguf.FileTypeQ5_K_S, gguf.FileTypeIQ3_S},
	}
	for _, preset := range []string{"qwen3", "qwen3moe"} {
		t.Run(preset, func(t *testing.T) {
			spec, _ := tinymodel.Preset(preset)
			tmp := t.TempDir()
			hf := filepath.Join(tmp, "hf")
			if err := tinymodel.Generate(hf, spec); err != nil {
				t.Fatal(err)
			}
			f16 := filepath.Join(tmp, "F16.gguf")
			if _, err := convert.Run(context.Background(), convert.Options{Model: hf, Out: f16, OutType: convert.OutF16}, pipeline.Discard); err != nil {
				t.Fatal(err)
			}
			imPath := imatrixFor(t, f16, nil, nil)
			im, err := imatrix.Load(imPath)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			for _, ft := range cases[preset] {
				t.Run(ft.String(), func(t *testing.T) {
					ours := filepath.Join(tmp, "ours-"+ft.String()+".gguf")
					if _, err := runQ(t, f16, Options{FileType: ft, Out: ours, Imatrix: im, ImatrixName: imPath}); err != nil {
						t.Fatal(err)
					}
					theirs := filepath.Join(tmp, "llamacpp-"+ft.String()+".gguf")
					cmd := exec.Command(bin, "quantize", f16, theirs, strconv.Itoa(int(ft)), imPath)
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("llama_model_quantize: %v\n%s", err, tail(out))
					}
					compareQuantized(t, ours, theirs, bin)
				})
			}
		})
	}
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// kernelChanged returns the tensor types whose quantizer in node-llama-cpp's llama.cpp release differs from the
// one phonellm implements (llama.cpp 34af94cd, whose ggml output is pinned in kquant's golden vectors), so that
// byte equality with that release cannot be asked of them. IQ1_M is the one: quantize_row_iq1_m_impl was
// rewritten after 34af94cd (its split search keeps prefix sums per half block and reassociates the sums), which
// changes the chosen grid points in some blocks. The divergence is checked here rather than assumed: the
// release's ggml_quantize_chunk is run on a golden case it is known to disagree on, and once a release agrees
// with the goldens again, IQ1_M is compared byte for byte like every other type.
func kernelChanged(t *testing.T, bin string) map[gguf.Type]bool {
	t.Helper()
	kernelCheck.once.Do(func() {
		kernelCheck.changed = map[gguf.Type]bool{}
		golden := filepath.Join("kquant", "testdata", "ggml-golden-imatrix")
		in := filepath.Join(golden, "inputs", "shifted__im_lognormal.f32")
		w := filepath.Join(golden, "inputs", "shifted__im_lognormal.imatrix.f32")
		want, err := os.ReadFile(filepath.Join(golden, "iq1_m", "shifted__im_lognormal.bin"))
		if err != nil {
			kernelCheck.err = err
			return
		}
		out := filepath.Join(t.TempDir(), "iq1_m.bin")
		cmd := exec.Command(bin, "chunk", strconv.Itoa(int(gguf.TypeIQ1_M)), "4", "512", in, w, out)
		if raw, err := cmd.CombinedOutput(); err != nil {
			kernelCheck.err = fmt.Errorf("ggml_quantize_chunk: %v\n%s", err, raw)
			return
		}
		got, err := os.ReadFile(out)
		if err != nil {
			kernelCheck.err = err
			return
		}
		kernelCheck.changed[gguf.TypeIQ1_M] = !bytes.Equal(got, want)
	})
	if kernelCheck.err != nil {
		t.Fatal(kernelCheck.err)
	}
	return kernelCheck.changed
}

var kernelCheck struct {
	once    sync.Once
	changed map[gguf.Type]bool
	err     error
}

// compareQuantized checks that two GGUFs hold the same tensors (name, type, shape, and bytes unless the type's
// kernel changed upstream) and the same quantize.imatrix.* values.
func compareQuantized(t *testing.T, ours, theirs, bin string) {
	t.Helper()
	a, err := gguf.OpenFile(ours)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := gguf.OpenFile(theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(a.Tensors) != len(b.Tensors) {
		t.Errorf("%d tensors, llama.cpp wrote %d", len(a.Tensors), len(b.Tensors))
	}
	da, db := tensorData(t, ours), tensorData(t, theirs)
	skipped := 0
	for _, tb := range b.Tensors {
		ta, ok := a.Tensor(tb.Name)
		switch {
		case !ok:
			t.Errorf("%s: missing in ours", tb.Name)
		case ta.Type != tb.Type || fmt.Sprint(ta.Shape) != fmt.Sprint(tb.Shape):
			t.Errorf("%s: ours %s %v, llama.cpp %s %v", tb.Name, ta.Type, ta.Shape, tb.Type, tb.Shape)
		case tb.Type == gguf.TypeIQ1_M && kernelChanged(t, bin)[tb.Type]: // asked only when needed: the probe takes seconds
			skipped++
		case !bytes.Equal(da[tb.Name], db[tb.Name]):
			t.Errorf("%s (%s): bytes differ from llama.cpp's", tb.Name, tb.Type)
		}
	}
	for _, key := range []string{"quantize.imatrix.file", "quantize.imatrix.dataset", "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"} {
		va, oka := a.KV(key)
		vb, okb := b.KV(key)
		if oka != okb || fmt.Sprint(va) != fmt.Sprint(vb) {
			t.Errorf("%s: ours %v (%v), llama.cpp %v (%v)", key, va, oka, vb, okb)
		}
	}
	if !t.Failed() {
		t.Logf("%d tensors identical to llama.cpp's, %d of a type whose kernel the release changed: same type and shape", len(b.Tensors)-skipped, skipped)
	}
}

// TestUpstreamRefusesTheSameTypes: without an importance matrix, llama.cpp's llama_model_quantize refuses
// exactly the low-bit file types phonellm's quantize refuses (with ImatrixRequiredError, an input error), and
// the ones both accept come out byte for byte the same.
func TestUpstreamRefusesTheSameTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp's quantizer")
	}
	bin := imatrixOracle(t)
	spec, _ := tinymodel.Preset("qwen3")
	tmp := t.TempDir()
	hf := filepath.Join(tmp, "hf")
	if err := tinymodel.Generate(hf, spec); err != nil {
		t.Fatal(err)
	}
	f16 := filepath.Join(tmp, "F16.gguf")
	if _, err := convert.Run(context.Background(), convert.Options{Model: hf, Out: f16, OutType: convert.OutF16}, pipeline.Discard); err != nil {
		t.Fatal(err)
	}
	for _, ft := range []gguf.FileType{gguf.FileTypeIQ1_S, gguf.FileTypeIQ1_M, gguf.FileTypeIQ2_XXS, gguf.FileTypeIQ2_XS,
		gguf.FileTypeIQ2_S, gguf.FileTypeIQ2_M, gguf.FileTypeIQ3_XXS, gguf.FileTypeIQ3_XS, gguf.FileTypeQ2_K_S,
		gguf.FileTypeIQ3_S, gguf.FileTypeIQ3_M, gguf.FileTypeTQ1_0, gguf.FileTypeTQ2_0, gguf.FileTypeQ2_K} {
		t.Run(ft.String(), func(t *testing.T) {
			ours := filepath.Join(tmp, "ours-"+ft.String()+".gguf")
			_, err := runQ(t, f16, Options{FileType: ft, Out: ours})
			var req *ImatrixRequiredError
			weRefuse := errors.As(err, &req)
			if err != nil && !weRefuse {
				t.Fatal(err)
			}
			if weRefuse && !pipeline.IsInputError(err) {
				t.Errorf("refusal is not an input error: %v", err)
			}
			theirs := filepath.Join(tmp, "llamacpp-"+ft.String()+".gguf")
			out, upErr := exec.Command(bin, "quantize", f16, theirs, strconv.Itoa(int(ft))).CombinedOutput()
			theyRefuse := upErr != nil
			if theyRefuse && !bytes.Contains(out, []byte("requires an importance matrix")) {
				t.Fatalf("llama_model_quantize failed for another reason: %v\n%s", upErr, tail(out))
			}
			if weRefuse != theyRefuse {
				t.Fatalf("phonellm refuses: %v (%v); llama.cpp refuses: %v", weRefuse, err, theyRefuse)
			}
			if weRefuse != plan.RequiresImatrix(ft) {
				t.Errorf("plan.RequiresImatrix(%s) = %v, but the plan is refused: %v", ft, plan.RequiresImatrix(ft), weRefuse)
			}
			if weRefuse {
				if _, err := os.Stat(ours); err == nil {
					t.Errorf("refused, yet %s was written", ours)
				}
				return
			}
			compareQuantized(t, ours, theirs, bin)
		})
	}
}

// TestUpstreamSameOutcomeOnImperfectImatrix: with an importance matrix that lacks a tensor or has the wrong
// length for one, phonellm does what llama_model_quantize does — goes on without the missing entry for a type
// that can do without (the same bytes), refuses a missing entry of a very-low-bit tensor and a wrong length —
// and a refusal is an input error naming the tensor, with nothing written.
func TestUpstreamSameOutcomeOnImperfectImatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp's quantizer")
	}
	bin := imatrixOracle(t)
	spec, _ := tinymodel.Preset("qwen3")
	tmp := t.TempDir()
	hf := filepath.Join(tmp, "hf")
	if err := tinymodel.Generate(hf, spec); err != nil {
		t.Fatal(err)
	}
	f16 := filepath.Join(tmp, "F16.gguf")
	if _, err := convert.Run(context.Background(), convert.Options{Model: hf, Out: f16, OutType: convert.OutF16}, pipeline.Discard); err != nil {
		t.Fatal(err)
	}
	const tensor = "blk.1.ffn_down.weight"
	for _, c := range []struct {
		name        string
		ft          gguf.FileType
		skip, wrong bool
		refused     bool
		upstreamMsg string
	}{
		{"missing-Q4_K_M", gguf.FileTypeQ4_K_M, true, false, false, ""},
		{"missing-IQ2_XXS", gguf.FileTypeIQ2_XXS, true, false, true, "Missing importance matrix for tensor " + tensor},
		{"wrong-length-Q4_K_M", gguf.FileTypeQ4_K_M, false, true, true, "is different from tensor size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			imPath := imatrixFor(t, f16, map[string]bool{tensor: c.skip}, map[string]bool{tensor: c.wrong})
			ours := filepath.Join(dir, "ours.gguf")
			im, err := imatrix.Load(imPath)
			if err == nil {
				_, err = runQ(t, f16, Options{FileType: c.ft, Out: ours, Imatrix: im, ImatrixName: imPath})
				im.Close()
			}
			theirs := filepath.Join(dir, "llamacpp.gguf")
			out, upErr := exec.Command(bin, "quantize", f16, theirs, strconv.Itoa(int(c.ft)), imPath).CombinedOutput()
			if (upErr != nil) != c.refused || (c.refused && !bytes.Contains(out, []byte(c.upstreamMsg))) {
				t.Fatalf("llama_model_quantize: %v (want refused %v with %q)\n%s", upErr, c.refused, c.upstreamMsg, tail(out))
			}
			if !c.refused {
				if err != nil {
					t.Fatalf("llama.cpp goes on, phonellm: %v", err)
				}
				compareQuantized(t, ours, theirs, bin)
				return
			}
			if err == nil || !pipeline.IsInputError(err) || !strings.Contains(err.Error(), tensor) {
				t.Fatalf("llama.cpp refuses; phonellm: %v", err)
			}
			if _, serr := os.Stat(ours); serr == nil {
				t.Errorf("refused, yet %s was written", ours)
			}
		})
	}
}
