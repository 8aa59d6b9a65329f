package quantize

import (
	"context"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
)

// FromModel makes a Source of a checkpoint converted on the fly, with no intermediate file. Each tensor reads
// exactly what the F16/BF16/F32 file of that conversion would hold: rows of F16 or BF16 tensors are rounded to
// that type (round to nearest even) before they are quantized, so quantizing directly from the checkpoint gives
// the same bytes as converting first and quantizing the file, as llama-quantize would.
func FromModel(m *convert.Model) *Source {
	src := &Source{Name: m.Dir, Arch: m.Arch, KVs: m.KVs, Close: m.Close}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		round := roundTrip(t.Type)
		src.Tensors = append(src.Tensors, SourceTensor{
			Name: t.Name, Type: t.Type, Shape: t.Shape,
			ReadRows: func(ctx context.Context, row0, n int64, dst []float32) ([]float32, error) {
				rows, err := t.ReadRows(ctx, row0, n, dst)
				if err != nil {
					return nil, err
				}
				if round != nil {
					round(rows)
				}
				return rows, nil
			},
		})
	}
	return src
}

// roundTrip returns an in-place rounding of float32 values to a storage type and back, or nil for F32. It
// goes through the row conversions (eight values at a time where the CPU has F16C) a few thousand values at
// a time: every value of a checkpoint quantized directly passes through here.
func roundTrip(t gguf.Type) func([]float32) {
	var enc func([]uint16, []float32) int
	var dec func([]float32, []uint16) int
	switch t {
	case gguf.TypeF16:
		enc, dec = half.F32ToF16Row, half.F16ToF32Row
	case gguf.TypeBF16:
		enc, dec = half.F32ToBF16Row, half.BF16ToF32Row
	default:
		return nil
	}
	return func(v []float32) {
		var buf [2048]uint16
		for len(v) > 0 {
			n := enc(buf[:], v)
			dec(v, buf[:n])
			v = v[n:]
		}
	}
}
