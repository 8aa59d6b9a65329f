package kquant

import (
	"math/rand/v2"
	"testing"
)

// benchInput is N(0, 0.02^2)-like weights with rare outliers, the shape of
// real checkpoint tensors (and of the golden weights_2d case).
func benchInput(n int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.02)
		if i%512 == 7 {
			x[i] *= 50
		}
	}
	return x
}

// BenchmarkQuantize reports MB/s of float32 input per format.
func BenchmarkQuantize(b *testing.B) {
	const n = 256 * 1024
	x := benchInput(n)
	for _, f := range Formats() {
		if f.RequiresImatrix() { // BenchmarkQuantizeWeighted
			continue
		}
		b.Run(f.Name, func(b *testing.B) {
			dst := make([]byte, f.RowBytes(n))
			b.SetBytes(4 * n)
			b.ReportAllocs()
			for b.Loop() {
				f.Quantize(dst, x)
			}
		})
	}
}

// BenchmarkDequantize reports MB/s of float32 output per format.
func BenchmarkDequantize(b *testing.B) {
	const n = 256 * 1024
	x := benchInput(n)
	for _, f := range Formats() {
		b.Run(f.Name, func(b *testing.B) {
			q := make([]byte, f.RowBytes(n))
			f.QuantizeWeighted(q, x, benchImatrix(4096))
			dst := make([]float32, n)
			b.SetBytes(4 * n)
			b.ReportAllocs()
			for b.Loop() {
				f.Dequantize(dst, q)
			}
		})
	}
}

// BenchmarkQuantizeParallel runs one quantizer per GOMAXPROCS goroutine on
// separate 64K-value rows and reports the combined MB/s of float32 input
// (run with -cpu 1,2 for one and two threads).
func BenchmarkQuantizeParallel(b *testing.B) {
	const n = 64 * 1024
	x := benchInput(n)
	for _, name := range []string{"Q4_K", "Q6_K", "Q8_0", "Q4_0"} {
		f, _ := ForName(name)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(4 * n)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]byte, f.RowBytes(n))
				for pb.Next() {
					f.Quantize(dst, x)
				}
			})
		})
	}
}
