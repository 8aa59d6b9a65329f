package kquant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// benchImatrix is a lognormal importance vector (a few columns dominate, as
// in real activation statistics).
func benchImatrix(n int) []float32 {
	r := rand.New(rand.NewPCG(3, 4))
	im := make([]float32, n)
	for i := range im {
		im[i] = float32(math.Exp(r.NormFloat64() * 1.5))
	}
	return im
}

// BenchmarkQuantizeWeighted reports the throughput of every imatrix path
// (MB/s of float32 input; values/s = MB/s / 4 * 1e6) on 16 rows of 4096
// values, the shape of a small model's weight matrix.
func BenchmarkQuantizeWeighted(b *testing.B) {
	const nPerRow, rows = 4096, 16
	x := benchInput(nPerRow * rows)
	im := benchImatrix(nPerRow)
	warmLattices() // built once per process, not per call: keep it out of the figures
	for _, f := range Formats() {
		b.Run(f.Name, func(b *testing.B) {
			dst := make([]byte, f.RowBytes(len(x)))
			b.SetBytes(int64(4 * len(x)))
			b.ReportAllocs()
			for b.Loop() {
				f.QuantizeWeighted(dst, x, im)
			}
			b.ReportMetric(float64(len(x))*float64(b.N)/b.Elapsed().Seconds(), "values/s")
		})
	}
}

// BenchmarkQuantizePlainIQ reports the imatrix-free paths of the formats
// added with the importance-matrix work.
func BenchmarkQuantizePlainIQ(b *testing.B) {
	const n = 4096 * 16
	x := benchInput(n)
	warmLattices()
	for _, f := range Formats() {
		if f.RequiresImatrix() || referenceKernels[f.Type] == nil {
			continue
		}
		switch f.Type {
		case TypeIQ3_XXS, TypeIQ3_S, TypeIQ2_S, TypeIQ1_M, TypeTQ1_0, TypeTQ2_0:
		default:
			continue
		}
		b.Run(f.Name, func(b *testing.B) {
			dst := make([]byte, f.RowBytes(n))
			b.SetBytes(4 * n)
			for b.Loop() {
				f.Quantize(dst, x)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "values/s")
		})
	}
}
