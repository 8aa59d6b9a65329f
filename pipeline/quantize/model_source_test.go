package quantize

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// TestRoundTrip: FromModel's rounding to F16 or BF16 and back gives, value by value, what the scalar
// conversions give (random bit patterns with NaN payloads, Infs, subnormals and exact f16 values), for row
// blocks of many lengths, including ones longer than its buffer.
func TestRoundTrip(t *testing.T) {
	if roundTrip(gguf.TypeF32) != nil {
		t.Fatal("F32 rows are rounded")
	}
	r := rand.New(rand.NewPCG(19, 3))
	for _, c := range []struct {
		typ    gguf.Type
		scalar func(float32) float32
	}{
		{gguf.TypeF16, func(x float32) float32 { return half.F16ToF32(half.F32ToF16(x)) }},
		{gguf.TypeBF16, func(x float32) float32 { return half.BF16ToF32(half.F32ToBF16(x)) }},
	} {
		round := roundTrip(c.typ)
		for _, n := range []int{0, 1, 7, 8, 9, 100, 2047, 2048, 2049, 5000} {
			v := make([]float32, n)
			for i := range v {
				switch r.IntN(3) {
				case 0:
					v[i] = math.Float32frombits(r.Uint32())
				case 1:
					v[i] = float32(r.NormFloat64() * 0.02)
				default:
					v[i] = half.F16ToF32(uint16(r.Uint32()))
				}
			}
			want := make([]uint32, n)
			for i, x := range v {
				want[i] = math.Float32bits(c.scalar(x))
			}
			round(v)
			for i := range v {
				if math.Float32bits(v[i]) != want[i] {
					t.Fatalf("%s, %d values, [%d]: %#08x, want %#08x", c.typ, n, i, math.Float32bits(v[i]), want[i])
				}
			}
		}
	}
}

// BenchmarkRoundTrip measures FromModel's rounding of float32 rows to F16/BF16 and back (MB/s of float32).
func BenchmarkRoundTrip(b *testing.B) {
	v := make([]float32, 1<<16)
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []gguf.Type{gguf.TypeF16, gguf.TypeBF16} {
		b.Run(typ.String(), func(b *testing.B) {
			round := roundTrip(typ)
			b.SetBytes(int64(4 * len(v)))
			for b.Loop() {
				b.StopTimer()
				for i := range v {
					v[i] = float32(r.NormFloat64() * 0.02)
				}
				b.StartTimer()
				round(v)
			}
		})
	}
}
