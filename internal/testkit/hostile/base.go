package hostile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/quantize"
)

// Base is a valid model the mutants start from: a tiny generated checkpoint (internal/tinymodel) and the GGUF
// phonellm's own converter (and quantizer) made from it.
type Base struct {
	Name       string // e.g. "qwen35-f16"
	Arch       string
	Checkpoint string        // the Hugging Face folder it was converted from
	MTP        bool          // the GGUF keeps Qwen3.5's multi-token-prediction block (serve refuses it)
	Quant      gguf.FileType // quantized after conversion (0: as converted)
	gguf       []byte
	model      *model
}

// GGUF returns the base's file bytes.
func (b *Base) GGUF() []byte { return b.gguf }

// tiny shrinks a preset to a few hundred KB: 64 wide, 4 heads of 16 (2 KV heads), a 300-token vocabulary in
// 304 embedding rows (convert pads the token list to the rows).
func tiny(name string, mtp bool) (tinymodel.Spec, error) {
	arch := name
	s, ok := tinymodel.Preset(arch)
	if !ok {
		return s, fmt.Errorf("hostile: no tinymodel preset %q", arch)
	}
	s.HiddenSize, s.NumHeads, s.NumKVHeads, s.HeadDim = 64, 4, 2, 16
	s.VocabSize, s.TokenizerSize = 304, 300
	if s.IntermediateSize != 0 {
		s.IntermediateSize = 128
	}
	s.MoEIntermediateSize, s.SharedExpertIntermediateSize = 64, 64
	s.LinearKeyHeadDim, s.LinearValueHeadDim = 16, 16
	s.PartialRotaryFactor, s.MRoPESection = 0.5, []int{2, 1, 1} // 8 rotary dims = 2·(2+1+1)
	s.Vision, s.MaxShardBytes = false, 0
	if mtp {
		s.MTPLayers = 1
	} else {
		s.MTPLayers = 0
	}
	return s, nil
}

// baseDefs are the bases, each architecture with a different output type, a quantized one and one with the
// MTP block.
var baseDefs = []struct {
	name, preset string
	out          convert.OutType
	quant        gguf.FileType // 0: as converted
	mtp          bool
}{
	{"qwen2-f32", "qwen2", convert.OutF32, 0, false},
	{"qwen3-f16", "qwen3", convert.OutF16, 0, false},
	{"qwen3moe-bf16", "qwen3moe", convert.OutBF16, 0, false},
	{"qwen35-f16", "qwen35", convert.OutF16, 0, false},
	{"qwen35moe-f32", "qwen35moe", convert.OutF32, 0, false},
	{"qwen3-q8_0", "qwen3", convert.OutF16, gguf.FileTypeQ8_0, false},
	{"qwen35-mtp-f32", "qwen35", convert.OutF32, 0, true},
}

// Bases generates every base model under dir (checkpoints and GGUFs; a few MB in all). The output depends on
// nothing but this package's code and the generators it calls.
func Bases(ctx context.Context, dir string) ([]*Base, error) {
	var out []*Base
	for _, d := range baseDefs {
		spec, err := tiny(d.preset, d.mtp)
		if err != nil {
			return nil, err
		}
		ckpt := filepath.Join(dir, "ckpt-"+d.preset)
		if d.mtp {
			ckpt += "-mtp"
		}
		if _, err := os.Stat(filepath.Join(ckpt, "config.json")); err != nil {
			if err := tinymodel.Generate(ckpt, spec); err != nil {
				return nil, err
			}
		}
		m, err := convert.Load(ckpt, convert.Options{OutType: d.out, KeepMTP: d.mtp, Name: d.name})
		if err != nil {
			return nil, fmt.Errorf("hostile: convert base %s: %w", d.name, err)
		}
		path := filepath.Join(dir, d.name+".gguf")
		_, err = m.WriteFile(ctx, path, nil)
		m.Close()
		if err != nil {
			return nil, err
		}
		if d.quant != 0 {
			src, err := quantize.OpenGGUF(path)
			if err != nil {
				return nil, err
			}
			q := filepath.Join(dir, d.name+"-q.gguf")
			_, err = quantize.Run(ctx, quantize.Options{Source: src, FileType: d.quant, Out: q, Threads: 1}, nil)
			src.Close()
			if err != nil {
				return nil, fmt.Errorf("hostile: quantize base %s: %w", d.name, err)
			}
			if err := os.Rename(q, path); err != nil {
				return nil, err
			}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		mod, err := decode(data)
		if err != nil {
			return nil, fmt.Errorf("hostile: base %s: %w", d.name, err)
		}
		out = append(out, &Base{Name: d.name, Arch: d.preset, Checkpoint: ckpt, MTP: d.mtp, Quant: d.quant, gguf: data, model: mod})
	}
	return out, nil
}
