package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/goengine"
)

var modelRoot string

func TestMain(m *testing.M) {
	// ggml's loader logs through slog at info level; keep test output short.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var err error
	if modelRoot, err = os.MkdirTemp("", "phonellm-eval-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(modelRoot)
	os.Exit(code)
}

// fakeModel is a LogitModel in plain Go: tokens are bytes (mod vocab), and the logits after position p are
// pseudo-random values determined by the tokens 0..p of the call (so they depend on the window, as a real
// model's do). A candidate adds noise·N(0,1)-ish perturbations from its own seed. Like the Go engine, it
// evaluates in chunks, allocating one chunk of logits per pass.
type fakeModel struct {
	vocab, ctx, chunk int
	noise             float64
	seed              uint64
	failAt            int // position whose evaluation fails; -1 never
	tokenShift        int32
}

func (m *fakeModel) Info() engine.ModelInfo {
	return engine.ModelInfo{ID: "fake", VocabSize: m.vocab, ContextLength: m.ctx}
}

func (m *fakeModel) Tokenize(ctx context.Context, text string, _ bool) ([]int32, error) {
	out := make([]int32, len(text))
	for i := range len(text) {
		out[i] = (int32(text[i]) + m.tokenShift) % int32(m.vocab)
	}
	return out, nil
}

func (m *fakeModel) ApplyChatTemplate(ctx context.Context, ms []engine.Message, _ engine.TemplateOptions) (string, error) {
	var b strings.Builder
	for _, x := range ms {
		fmt.Fprintf(&b, "<%s>%s\n", x.Role, x.Content)
	}
	return b.String() + "<assistant>", nil
}

func (m *fakeModel) Close() error { return nil }

func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// row writes the logits after the prefix with hash h: uniform values in [-3, 3) from a 64-bit LCG seeded by h,
// plus the candidate's noise (a sum of two uniforms from a second LCG seeded by h and its seed).
func (m *fakeModel) row(h uint64, dst []float32) {
	x, y := mix(h), mix(h^m.seed)
	for i := range dst {
		x = x*6364136223846793005 + 1442695040888963407
		v := float64(6*unit(x)) - 3
		if m.noise > 0 {
			y = y*6364136223846793005 + 1442695040888963407
			a := unit(y)
			y = y*6364136223846793005 + 1442695040888963407
			v += float64(m.noise * (a + unit(y) - 1) * 2.45) // sum of two uniforms: variance 1/6
		}
		dst[i] = float32(v)
	}
}

func (m *fakeModel) Logits(ctx context.Context, toks []int32, fn func(int, []float32) error) error {
	if len(toks) > m.ctx {
		return &engine.ContextLengthError{PromptTokens: len(toks), ContextLength: m.ctx}
	}
	h := uint64(1469598103934665603)
	for start := 0; start < len(toks); start += m.chunk {
		n := min(m.chunk, len(toks)-start)
		buf := make([]float32, n*m.vocab) // a fresh chunk per pass, as the engine's forward returns
		for i := range n {
			h = mix(h ^ uint64(toks[start+i]))
			m.row(h, buf[i*m.vocab:][:m.vocab])
		}
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			if start+i == m.failAt {
				return errors.New("fake forward pass failed")
			}
			if err := fn(start+i, buf[i*m.vocab:][:m.vocab]); err != nil {
				return err
			}
		}
	}
	return nil
}

func fakeLoader(models map[string]LogitModel) Loader {
	return func(_ context.Context, path string) (LogitModel, error) {
		m, ok := models[path]
		if !ok {
			return nil, fmt.Errorf("no model %s", path)
		}
		return m, nil
	}
}

// allRows evaluates toks on m and keeps every row (the brute-force side of the tests).
func allRows(t testing.TB, m LogitModel, toks []int32) [][]float32 {
	t.Helper()
	var rows [][]float32
	if err := m.Logits(context.Background(), toks, func(_ int, l []float32) error {
		rows = append(rows, append([]float32(nil), l...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return rows
}

// goLoader loads GGUFs into the Go engine (one thread: the test machine is shared).
func goLoader(ctx context.Context, path string) (LogitModel, error) {
	return goengine.Load(ctx, goengine.Options{Path: path, Threads: 1, ContextLength: 8192, BatchSize: 512})
}

// oracleModel is a LogitModel over upstream llama.cpp (the test oracle): Logits asks for every row at once
// and replays them.
type oracleModel struct {
	o    *oracle.Oracle
	path string
	info oracle.ModelInfo
	ctx  int
}

func oracleLoader(t testing.TB, o *oracle.Oracle) Loader {
	return func(_ context.Context, path string) (LogitModel, error) {
		mi, err := o.Load(path)
		if err != nil {
			return nil, err
		}
		ctx := o.Context.ContextSize
		if ctx == 0 {
			ctx = 512
		}
		return &oracleModel{o: o, path: path, info: mi, ctx: ctx}, nil
	}
}

func (m *oracleModel) Info() engine.ModelInfo {
	return engine.ModelInfo{ID: m.path, Path: m.path, Engine: "llama.cpp", VocabSize: m.info.VocabSize, ContextLength: m.ctx}
}

func (m *oracleModel) Tokenize(ctx context.Context, text string, special bool) ([]int32, error) {
	ids, err := m.o.Tokenize(m.path, text, special)
	out := make([]int32, len(ids))
	for i, v := range ids {
		out[i] = int32(v)
	}
	return out, err
}

func (m *oracleModel) ApplyChatTemplate(context.Context, []engine.Message, engine.TemplateOptions) (string, error) {
	return "", errors.New("oracle model: no chat template")
}

func (m *oracleModel) Logits(_ context.Context, toks []int32, fn func(int, []float32) error) error {
	ids := make([]int, len(toks))
	for i, v := range toks {
		ids[i] = int(v)
	}
	rows, err := m.o.LogitsAll(m.path, ids)
	if err != nil {
		return err
	}
	for i, r := range rows {
		if err := fn(i, r); err != nil {
			return err
		}
	}
	return nil
}

func (m *oracleModel) Close() error { return nil }

// quantTypes are the candidates of the ordering test, from the most to the least precise.
var quantTypes = []gguf.FileType{gguf.FileTypeQ8_0, gguf.FileTypeQ6_K, gguf.FileTypeQ4_K_M, gguf.FileTypeQ2_K}

var built struct {
	sync.Mutex
	dirs map[string]string
}

// tinyModels generates the tiny preset, converts it to an F32 GGUF (the reference) and quantizes that to
// every quantTypes, once per test binary. It returns the directory holding f32.gguf and <TYPE>.gguf.
func tinyModels(t testing.TB, preset string) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if d, ok := built.dirs[preset]; ok {
		return d
	}
	spec, ok := tinymodel.Preset(preset)
	if !ok {
		t.Fatalf("no preset %s", preset)
	}
	dir := filepath.Join(modelRoot, preset)
	ckpt := filepath.Join(dir, "hf")
	if err := tinymodel.Generate(ckpt, spec); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref := filepath.Join(dir, "f32.gguf")
	if _, err := convert.Run(ctx, convert.Options{Model: ckpt, Out: ref, OutType: convert.OutF32}, pipeline.Discard); err != nil {
		t.Fatal(err)
	}
	for _, ft := range quantTypes {
		src, err := quantize.OpenGGUF(ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = quantize.Run(ctx, quantize.Options{Source: src, FileType: ft, Out: filepath.Join(dir, ft.String()+".gguf")}, pipeline.Discard)
		src.Close()
		if err != nil {
			t.Fatalf("quantize %s: %v", ft, err)
		}
	}
	if built.dirs == nil {
		built.dirs = map[string]string{}
	}
	built.dirs[preset] = dir
	return dir
}

// bruteKLD is KL(P||Q) computed the textbook way: softmax both rows, then Σ p·log(p/q).
func bruteKLD(ref, cand []float32) float64 {
	p, q := softmax(ref), softmax(cand)
	var s float64
	for i := range p {
		if p[i] > 0 {
			s += p[i] * math.Log(p[i]/q[i])
		}
	}
	return s
}

func softmax(v []float32) []float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, float64(x))
	}
	out := make([]float64, len(v))
	var z float64
	for i, x := range v {
		out[i] = math.Exp(float64(x) - m)
		z += out[i]
	}
	for i := range out {
		out[i] /= z
	}
	return out
}
