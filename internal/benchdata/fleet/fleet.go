package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/benchdata"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/quantize"
)

// Spec is the checkpoint `phonellm bench fleet` serves when it starts a local fleet itself: a Qwen3-shaped
// (arch "qwen3") or Qwen3.5-shaped ("qwen35": three linear-attention layers per full-attention one) model of
// about 25 M parameters, so that one thread evaluates a 7,000-token prompt in several seconds (its attention
// over the long context costs about as much as its weights) and the cost of a cache miss shows.
func Spec(arch string) (tinymodel.Spec, error) {
	s, ok := tinymodel.Preset(arch)
	if !ok || (arch != tinymodel.Qwen3 && arch != tinymodel.Qwen35) {
		return tinymodel.Spec{}, fmt.Errorf("benchdata: no fleet model for %q (want qwen3 or qwen35)", arch)
	}
	s.Name, s.Seed, s.DType = arch+"-fleet-shape", 1700, tinymodel.BF16
	s.HiddenSize, s.NumLayers, s.NumHeads, s.NumKVHeads, s.HeadDim, s.IntermediateSize = 512, 8, 8, 2, 64, 1536
	s.MaxPositionEmbeddings = 40960
	if arch == tinymodel.Qwen35 {
		s.LinearNumKeyHeads, s.LinearNumValueHeads, s.LinearKeyHeadDim, s.LinearValueHeadDim = 4, 8, 64, 64
		s.MTPLayers, s.Vision, s.MaxShardBytes = 0, false, 0
		s.PartialRotaryFactor, s.MRoPESection = 0.25, []int{3, 3, 2}
	}
	return s, nil
}

// Model returns the Q4_K_M GGUF of Spec(arch), generated (tinymodel), converted and quantized once into
// benchdata.Dir() and reused.
func Model(ctx context.Context, arch string, rep pipeline.Reporter) (string, error) {
	spec, err := Spec(arch)
	if err != nil {
		return "", err
	}
	dir := benchdata.Dir()
	out := filepath.Join(dir, spec.Name+"-Q4_K_M.gguf")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	ck := filepath.Join(dir, spec.Name)
	if err := tinymodel.Generate(ck, spec); err != nil {
		return "", err
	}
	defer os.RemoveAll(ck)
	m, err := convert.Load(ck, convert.Options{Model: ck, OutType: convert.OutF16, Name: spec.Name})
	if err != nil {
		return "", err
	}
	src := quantize.FromModel(m)
	defer src.Close()
	if _, err := quantize.Run(ctx, quantize.Options{Source: src, FileType: gguf.FileTypeQ4_K_M, Out: out}, rep); err != nil {
		return "", err
	}
	return out, nil
}
