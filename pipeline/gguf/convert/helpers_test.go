package convert

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
)

// fakeSource is an in-memory pipeline.TensorSource with the same row semantics as the real one (rows are the
// product of every dimension but the last).
type fakeSource struct {
	t     map[string]fakeTensor
	fail  string // ReadRows of this tensor fails
	reads int
}

type fakeTensor struct {
	dtype string
	shape []int64
	data  []float32
}

func newFake() *fakeSource { return &fakeSource{t: map[string]fakeTensor{}} }

// add registers a tensor whose element i has the value i+base (or data if given).
func (f *fakeSource) add(name, dtype string, shape []int64, data []float32) {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if data == nil {
		data = make([]float32, n)
		for i := range data {
			data[i] = float32(i)
		}
	}
	if int64(len(data)) != n {
		panic(fmt.Sprintf("fake tensor %s: %d values for shape %v", name, len(data), shape))
	}
	f.t[name] = fakeTensor{dtype, shape, data}
}

func (f *fakeSource) Tensors() []pipeline.TensorInfo {
	var out []pipeline.TensorInfo
	for n, t := range f.t {
		out = append(out, pipeline.TensorInfo{Name: n, DType: pipeline.DType(t.dtype), Shape: t.shape})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (f *fakeSource) ReadRows(ctx context.Context, name string, row0, n int64, dst []float32) ([]float32, error) {
	f.reads++
	if name == f.fail {
		return nil, fmt.Errorf("injected read failure")
	}
	t, ok := f.t[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	info := pipeline.TensorInfo{Shape: t.shape}
	rl := info.RowLen()
	if row0 < 0 || n < 0 || row0+n > info.Rows() {
		return nil, fmt.Errorf("rows [%d,%d) of %q out of range", row0, row0+n, name)
	}
	dst = append(dst[:0], t.data[row0*rl:(row0+n)*rl]...)
	return dst, nil
}

// writeJSON writes v as JSON to dir/name.
func writeJSON(t testing.TB, dir, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

const qwen2Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
const qwen35Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// tinyTokenizer returns a tokenizer.json object: tokens "a".."e", "ab", added <|endoftext|> (5) and
// <|im_end|> (6), one merge.
func tinyTokenizer(regex string, merges any) map[string]any {
	if merges == nil {
		merges = []any{"a b"}
	}
	return map[string]any{
		"version": "1.0",
		"added_tokens": []any{
			map[string]any{"id": 6, "content": "<|endoftext|>", "special": true, "normalized": false},
			map[string]any{"id": 7, "content": "<|im_end|>", "special": true, "normalized": false},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": regex}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "byte_fallback": false,
			"vocab":  map[string]any{"a": 0, "b": 1, "c": 2, "d": 3, "e": 4, "ab": 5},
			"merges": merges},
	}
}

// modelDir writes config.json (cfg), tokenizer.json and tokenizer_config.json into a temporary directory.
func modelDir(t testing.TB, cfg map[string]any, regex string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, dir, "config.json", cfg)
	writeJSON(t, dir, "tokenizer.json", tinyTokenizer(regex, nil))
	writeJSON(t, dir, "tokenizer_config.json", map[string]any{
		"add_bos_token": false, "bos_token": nil, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
		"chat_template": "{{ messages }}",
	})
	return dir
}

// loadFake plans a conversion of cfg with tensors from src.
func loadFake(t testing.TB, cfg map[string]any, regex string, src *fakeSource, o Options) *Model {
	t.Helper()
	m, err := tryLoadFake(t, cfg, regex, src, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func tryLoadFake(t testing.TB, cfg map[string]any, regex string, src *fakeSource, o Options) (*Model, error) {
	dir := modelDir(t, cfg, regex)
	o.Source = src
	o.partial = true // a few tensors exercising one transform, not a whole model
	return Load(dir, o)
}

// readAll reads every row of an output tensor.
func readAll(t testing.TB, m *Model, name string) []float32 {
	t.Helper()
	tt, ok := m.Tensor(name)
	if !ok {
		t.Fatalf("no output tensor %q; have %v", name, tensorNames(m))
	}
	v, err := tt.ReadRows(context.Background(), 0, tt.Rows(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func tensorNames(m *Model) []string {
	var out []string
	for _, t := range m.Tensors {
		out = append(out, t.Name)
	}
	return out
}

func seq(n int, f func(i int) float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func contextWithCancel(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
