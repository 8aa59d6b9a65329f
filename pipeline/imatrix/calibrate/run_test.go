package calibrate

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/runtime/goengine"
)

// engineModel adapts the built-in engine to Model, as the CLI does.
type engineModel struct{ e *goengine.Engine }

func (m engineModel) Observe(ctx context.Context, toks []int32, want func(string, bool) bool, fn func(imatrix.Matmul) error) error {
	return m.e.Observe(ctx, toks, goengine.ObserveOptions{Want: want, Matmul: func(p goengine.Matmul) error { return fn(imatrix.Matmul(p)) }})
}
func (m engineModel) Close() error { return m.e.Close() }

func engineLoader(ctx context.Context, path string, n, batch int) (Model, error) {
	// One thread: ggml's spinning thread pool crawls on a loaded 2-core machine.
	e, err := goengine.Load(ctx, goengine.Options{Path: path, Threads: 1, ContextLength: n, BatchSize: batch})
	if err != nil {
		return nil, err
	}
	return engineModel{e}, nil
}

var (
	tinyOnce sync.Once
	tinyPath string
	tinyErr  error
)

// tinyQwen3 converts the tiny qwen3 preset to an F32 GGUF once per test binary.
func tinyQwen3(t *testing.T) string {
	t.Helper()
	tinyOnce.Do(func() {
		dir, err := os.MkdirTemp("", "calibrate-test-*")
		if err != nil {
			tinyErr = err
			return
		}
		spec, _ := tinymodel.Preset("qwen3")
		ckpt := filepath.Join(dir, "hf")
		if tinyErr = tinymodel.Generate(ckpt, spec); tinyErr != nil {
			return
		}
		tinyPath = filepath.Join(dir, "qwen3-f32.gguf")
		_, tinyErr = convert.Run(context.Background(), convert.Options{Model: ckpt, Out: tinyPath, OutType: convert.OutF32}, pipeline.Discard)
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyPath
}

const corpus = "The bank flagged the payment because the account is new and the amount is large. " +
	"Risk review: the beneficiary changed twice in one week, the device is unknown and the login came from abroad. " +
	"Numbers like 12, 345 and 6789 appear in invoices; the customer asked to raise the daily limit. "

func writeData(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunWritesLlamaImatrix: a run over plain text writes a GGUF imatrix with the chunk metadata, one entry
// per block weight (output.weight only with ProcessOutput), every count a whole number of chunks.
func TestRunWritesLlamaImatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tiny model")
	}
	model := tinyQwen3(t)
	data := writeData(t, "calib.txt", strings.Repeat(corpus, 6))
	out := filepath.Join(t.TempDir(), "imatrix.gguf")
	res, err := Run(context.Background(), Options{Model: model, Data: data, Out: out, ChunkSize: 64, Load: engineLoader}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks != res.Tokens/64 || res.Chunks < 3 || res.Entries != 14 || len(res.Artifacts) != 1 {
		t.Fatalf("result %+v", res)
	}
	m, err := imatrix.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.ChunkCount != res.Chunks || m.ChunkSize != 64 || len(m.Datasets) != 1 || m.Datasets[0] != data || len(m.Meta) != 0 {
		t.Fatalf("metadata %+v %v %v", m.Datasets, m.ChunkCount, m.Meta)
	}
	for _, e := range m.Entries {
		if !strings.HasPrefix(e.Name, "blk.") || e.Counts[0] != float64(64*res.Chunks) || e.Exact != nil {
			t.Errorf("%s: counts %v", e.Name, e.Counts)
		}
	}
	if _, err := os.Stat(out + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial file left: %v", err)
	}
	// --chunks limits, --process-output adds output.weight (the tied model's logits product).
	res2, err := Run(context.Background(), Options{Model: model, Data: data, Out: out, ChunkSize: 64, Chunks: 2,
		ProcessOutput: true, Load: engineLoader}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Chunks != 2 || res2.Entries != 15 {
		t.Fatalf("result %+v", res2)
	}
	// The legacy format.
	dat := filepath.Join(t.TempDir(), "imatrix.dat")
	if _, err := Run(context.Background(), Options{Model: model, Data: data, Out: dat, ChunkSize: 64, Chunks: 2, Format: imatrix.FormatDat, Load: engineLoader}, nil); err != nil {
		t.Fatal(err)
	}
	lm, err := imatrix.Read(dat)
	if err != nil || !lm.Legacy || lm.ChunkCount != 2 || len(lm.Entries) != 14 || lm.Entries[0].Counts[0] != 2 {
		t.Fatalf("legacy: %+v %v", lm, err)
	}
}

// interrupting is a loader whose model cancels the run after a number of chunks.
func interrupting(after int, cancel context.CancelFunc) Loader {
	return func(ctx context.Context, path string, n, batch int) (Model, error) {
		m, err := engineLoader(ctx, path, n, batch)
		if err != nil {
			return nil, err
		}
		return &countdown{Model: m, left: after, cancel: cancel}, nil
	}
}

type countdown struct {
	Model
	left   int
	cancel context.CancelFunc
}

func (c *countdown) Observe(ctx context.Context, toks []int32, want func(string, bool) bool, fn func(imatrix.Matmul) error) error {
	if c.left == 0 {
		c.cancel()
		return ctx.Err()
	}
	c.left--
	return c.Model.Observe(ctx, toks, want, fn)
}

// TestResume: a run interrupted after three chunks (partial file every chunk) and resumed gives exactly the
// file of an uninterrupted run; a partial file of other data is refused.
func TestResume(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tiny model")
	}
	model := tinyQwen3(t)
	data := writeData(t, "calib.txt", strings.Repeat(corpus, 6))
	dir := t.TempDir()
	full := filepath.Join(dir, "full.gguf")
	o := Options{Model: model, Data: data, ChunkSize: 64, Batch: 32, SaveEvery: 1, Load: engineLoader}
	o.Out = full
	want, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "resumed.gguf")
	o.Out = out
	ctx, cancel := context.WithCancel(context.Background())
	o.Load = interrupting(3, cancel)
	if _, err := Run(ctx, o, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("output exists after an interrupted run: %v", err)
	}
	p, err := imatrix.Read(out + ".partial")
	if err != nil || p.ChunkCount != 3 || p.Meta[resumeKey] == "" {
		t.Fatalf("partial: %+v %v", p, err)
	}
	o.Load, o.Resume = engineLoader, true
	got, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Resumed != 3 || got.Chunks != want.Chunks {
		t.Fatalf("resumed %d, chunks %d (want %d)", got.Resumed, got.Chunks, want.Chunks)
	}
	a, _ := os.ReadFile(full)
	b, _ := os.ReadFile(out)
	if !bytes.Equal(a, b) {
		t.Fatal("the resumed file differs from the uninterrupted one")
	}

	// A partial file of another data set is not continued.
	ctx, cancel = context.WithCancel(context.Background())
	o.Load, o.Resume = interrupting(2, cancel), false
	if _, err := Run(ctx, o, nil); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	o.Data = writeData(t, "other.txt", strings.Repeat(corpus, 7))
	o.Load, o.Resume = engineLoader, true
	if _, err := Run(context.Background(), o, nil); err == nil || !pipeline.IsInputError(err) || !strings.Contains(err.Error(), "another model, data set or options") {
		t.Fatalf("foreign partial: %v", err)
	}
}

// TestChatData: JSONL records with messages are rendered through the model's chat template, text records too
// with Chat, and too little data is an input error.
func TestChatData(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tiny model")
	}
	model := tinyQwen3(t)
	var b strings.Builder
	for range 8 {
		b.WriteString(`{"messages":[{"role":"system","content":"You review payments."},{"role":"user","content":"` + corpus + `"}]}` + "\n")
		b.WriteString(`{"text":"` + corpus + `"}` + "\n")
	}
	data := writeData(t, "prompts.jsonl", b.String())
	ctx := context.Background()
	plain, _, _, err := tokenize(ctx, Options{Model: model, Data: writeData(t, "p.txt", corpus)})
	if err != nil {
		t.Fatal(err)
	}
	mixed, n, _, err := tokenize(ctx, Options{Model: model, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	chat, _, _, err := tokenize(ctx, Options{Model: model, Data: data, Chat: true})
	if err != nil {
		t.Fatal(err)
	}
	// Each rendered record holds the corpus plus the template's framing (with <|im_start|> as one token).
	if n != 16 || len(mixed) <= 16*len(plain) || len(chat) <= len(mixed) {
		t.Fatalf("records %d; tokens: plain corpus %d, mixed %d, all chat %d", n, len(plain), len(mixed), len(chat))
	}
	out := filepath.Join(t.TempDir(), "chat.gguf")
	res, err := Run(ctx, Options{Model: model, Data: data, Out: out, ChunkSize: 64, Chat: true, Load: engineLoader}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 16 || res.Tokens != len(chat) || res.Chunks != len(chat)/64 {
		t.Fatalf("result %+v", res)
	}
	o := Options{Model: model, Data: writeData(t, "short.txt", "too short"), Out: out, ChunkSize: 64, Load: engineLoader}
	if _, err := Run(ctx, o, nil); err == nil || !pipeline.IsInputError(err) || !strings.Contains(err.Error(), "fewer than one chunk") {
		t.Fatalf("short data: %v", err)
	}
}

// TestMeasureOverhead: the benchmark harness alternates plain and collecting passes and reports both.
func TestMeasureOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tiny model")
	}
	m, err := engineLoader(context.Background(), tinyQwen3(t), 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks := make([]int32, 200)
	for i := range toks {
		toks[i] = int32(i*37%600 + 1)
	}
	o, err := MeasureOverhead(context.Background(), m, toks, 64, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Tokens != 192 || len(o.PlainSeconds) != 2 || len(o.CollectCPU) != 2 || o.Ratio <= 0 {
		t.Fatalf("%+v", o)
	}
	if cpuSeconds() <= 0 {
		t.Error("no process CPU time on this system")
	}
}
