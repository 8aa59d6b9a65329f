package kquant

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// digestInputs are finite rows of many shapes (scaled normal, heavy tails,
// sparse, constant, quarter grid, subnormal and large magnitudes, signed
// zeros) small enough that no float32 sum in any kernel overflows: inputs on
// which every build must give the same bytes. (Where ggml's sums overflow,
// Inf - Inf creates a NaN that can reach a stored scale; such a NaN has its
// sign bit set on x86 and clear on arm64, so those inputs are left to the
// fuzz tests, which do not compare across builds.)
func digestInputs(nPerRow, rows int) [][]float32 {
	r := rand.New(rand.NewPCG(2026, 34))
	var out [][]float32
	gen := []func(i int) float32{
		func(int) float32 { return float32(r.NormFloat64() * 0.02) },
		func(int) float32 { return float32(r.NormFloat64() * 1e3) },
		func(int) float32 { return float32((r.ExpFloat64() - r.ExpFloat64()) * 0.05) },
		func(i int) float32 {
			if r.IntN(9) == 0 {
				return float32(r.NormFloat64())
			}
			return 0
		},
		func(i int) float32 { return 0.3 },
		func(int) float32 { return float32(r.IntN(17)-8) * 0.25 },
		func(int) float32 { return float32(r.NormFloat64() * 1e-38) },
		func(int) float32 { return float32(r.NormFloat64() * 1e6) },
		func(i int) float32 {
			v := float32(r.NormFloat64() * 0.02)
			if i%97 == 5 {
				v *= 300
			}
			if i%13 == 0 {
				v = float32(math.Copysign(0, -1))
			}
			return v
		},
		func(int) float32 { return float32(math.Abs(r.NormFloat64())) + 1 },
	}
	for _, g := range gen {
		x := make([]float32, nPerRow*rows)
		for i := range x {
			x[i] = g(i)
		}
		out = append(out, x)
	}
	return out
}

// digestImatrices are importance vectors: lognormal, uniform, sparse,
// spread over twelve orders of magnitude, and with exact ties.
func digestImatrices(n int) [][]float32 {
	r := rand.New(rand.NewPCG(7, 2026))
	var out [][]float32
	gen := []func(i int) float32{
		func(int) float32 { return float32(math.Exp(r.NormFloat64() * 1.5)) },
		func(int) float32 { return 1 },
		func(i int) float32 {
			if i%10 == 3 {
				return 0
			}
			return float32(math.Exp(r.NormFloat64()))
		},
		func(int) float32 { return float32(math.Pow(10, float64(r.IntN(13)-6))) },
		func(i int) float32 { return float32(1 + i%3) },
	}
	for _, g := range gen {
		im := make([]float32, n)
		for i := range im {
			im[i] = g(i)
		}
		out = append(out, im)
	}
	return out
}

// TestCrossBuildDigest hashes the output of every kernel (each format's
// imatrix-free path where ggml has one, and its weighted path with five
// importance vectors) on digestInputs, and compares the hash with the value
// recorded from the GOAMD64=v1 build, where Go never fuses a*b+c. The ggml
// golden cases check the bytes against ggml itself; this test extends the
// check that no build fuses or reorders anything to all the inputs here,
// including paths the goldens do not reach. scripts/test-kernels-cross.sh
// runs it under GOAMD64=v3 and on arm64. To print the hash, run with
// KQUANT_DIGEST=1 -v (with and without -short).
func TestCrossBuildDigest(t *testing.T) {
	const nPerRow = 512
	rows, want := 3, digestFull
	if testing.Short() { // the arm64 run under qemu
		rows, want = 1, digestShort
	}
	h := sha256.New()
	ins := digestInputs(nPerRow, rows)
	ims := digestImatrices(nPerRow)
	for _, f := range Formats() {
		fh := sha256.New()
		for _, x := range ins {
			q := make([]byte, f.RowBytes(len(x)))
			if !f.RequiresImatrix() {
				f.Quantize(q, x)
				fh.Write(q)
			}
			for _, im := range ims {
				f.QuantizeWeighted(q, x, im)
				fh.Write(q)
			}
		}
		sum := fh.Sum(nil)
		if os.Getenv("KQUANT_DIGEST") != "" {
			t.Logf("%-8s %x", f.Name, sum)
		}
		h.Write(sum)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("kernel output digest %s, recorded %s (run with KQUANT_DIGEST=1 -v for the per-format hashes)", got, want)
	}
}

// The digests of TestCrossBuildDigest with 3 rows per input and (-short) 1.
const (
	digestFull  = "d03db5dcbd27ca65233d72481b3b5252299cd9ac15e223f6be140f6921192eb8"
	digestShort = "915209e3fff39028f4b0f39c17949fea3e2b7330a2e7c75881a3e1aa6198590b"
)
