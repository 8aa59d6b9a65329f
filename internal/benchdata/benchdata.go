package benchdata

import (
	"context"
	"os"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/home"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
)

// Dir is the folder generated benchmark inputs live in: $PHONELLM_HOME/bench.
func Dir() string { return home.Path("bench") }

// Qwen3F16 returns an F16 GGUF with Qwen3-0.6B shapes and a separate output.weight (311 tensors, 1.5 GB):
// the shape of llama-quantize's published speed anchor (shared/reference/gguf-quant-convert.md §10.4). It is
// generated (tinymodel) and converted once, then reused.
func Qwen3F16(ctx context.Context, rep pipeline.Reporter) (string, error) {
	dir := Dir()
	out := filepath.Join(dir, "qwen3-0.6b-shape-F16.gguf")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	spec := tinymodel.Qwen3BenchSpec()
	spec.TiedEmbeddings = false
	ck := filepath.Join(dir, "qwen3-0.6b-shape")
	if err := tinymodel.Generate(ck, spec); err != nil {
		return "", err
	}
	defer os.RemoveAll(ck)
	if _, err := convert.Run(ctx, convert.Options{Model: ck, OutType: convert.OutF16, Out: out, Name: "qwen3-0.6b-shape"}, rep); err != nil {
		return "", err
	}
	return out, nil
}
