package kquant

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
)

// The golden vectors are llama.cpp's own output (see
// testdata/ggml-golden/PROVENANCE.md); they are never regenerated.
const goldenDir = "testdata/ggml-golden"

type goldenFile struct {
	Path   string `json:"path"`
	Bytes  int    `json:"bytes"`
	SHA256 string `json:"sha256"`
}

type goldenCase struct {
	Case              string     `json:"case"`
	Type              string     `json:"type"`
	TypeID            uint32     `json:"ggml_type_id"`
	NRows             int        `json:"n_rows"`
	NPerRow           int        `json:"n_per_row"`
	BlockSize         int        `json:"block_size"`
	BlockBytes        int        `json:"block_bytes"`
	RowBytes          int        `json:"row_bytes"`
	PlatformDependent bool       `json:"platform_dependent"`
	DiffersWithFMA    bool       `json:"differs_with_fma_contraction"`
	Input             goldenFile `json:"input"`
	Quantized         goldenFile `json:"quantized"`
	Dequantized       goldenFile `json:"dequantized"`
	ReferencePath     string     `json:"reference_path"`
}

type goldenManifest struct {
	Format     string       `json:"format"`
	QuantCases []goldenCase `json:"quant_cases"`
}

func loadManifest(t testing.TB) goldenManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, "manifest.json"))
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	var m goldenManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("parse manifest: %v", err)
	}
	if m.Format != "ggml-golden/1" {
		t.Fatalf("manifest format %q, want ggml-golden/1", m.Format)
	}
	if len(m.QuantCases) != 156 {
		t.Fatalf("manifest has %d quant cases, want 156", len(m.QuantCases))
	}
	return m
}

// readGolden reads a golden file and checks its size and sha256 against the
// manifest, so a damaged copy fails loudly instead of testing nothing.
func readGolden(t testing.TB, f goldenFile) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, f.Path))
	if err != nil {
		t.Fatalf("read golden: %v", err)
	}
	sum := sha256.Sum256(b)
	if len(b) != f.Bytes || hex.EncodeToString(sum[:]) != f.SHA256 {
		t.Fatalf("golden %s: %d bytes sha256 %x, manifest says %d bytes %s", f.Path, len(b), sum, f.Bytes, f.SHA256)
	}
	return b
}

func decodeF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	half.DecodeF32LE(out, b)
	return out
}

type kernel func(dst []byte, src []float32, nb int)

// referenceKernels are the plain reference encoders, one block per call.
var referenceKernels = map[uint32]kernel{
	TypeQ4_0: refQ4_0, TypeQ4_1: quantizeQ4_1, TypeQ5_0: quantizeQ5_0, TypeQ5_1: quantizeQ5_1,
	TypeQ8_0: refQ8_0,
	TypeQ2_K: blockLoop(84, 256, refQ2K), TypeQ3_K: blockLoop(110, 256, refQ3K),
	TypeQ4_K: blockLoop(144, 256, refQ4K), TypeQ5_K: blockLoop(176, 256, refQ5K),
	TypeQ6_K:   blockLoop(210, 256, refQ6K),
	TypeIQ4_NL: blockLoop(18, 32, func(y []byte, x []float32) { refIQ4Block(y, x, 32) }),
	TypeIQ4_XS: blockLoop(136, 256, func(y []byte, x []float32) { refIQ4Block(y, x, 256) }),
}

func blockLoop(bb, bs int, f func([]byte, []float32)) kernel {
	return func(dst []byte, src []float32, nb int) {
		for i := 0; i < nb; i++ {
			f(dst[i*bb:(i+1)*bb], src[i*bs:(i+1)*bs])
		}
	}
}

func TestGolden(t *testing.T) {
	m := loadManifest(t)
	seenTypes := map[string]int{}
	for _, c := range m.QuantCases {
		t.Run(c.Type+"/"+c.Case, func(t *testing.T) {
			f, ok := ForType(c.TypeID)
			if !ok || f.Name != c.Type {
				t.Fatalf("type id %d: got %q, %v", c.TypeID, f.Name, ok)
			}
			if f.BlockSize != c.BlockSize || f.BlockBytes != c.BlockBytes || f.RowBytes(c.NPerRow) != c.RowBytes {
				t.Fatalf("%s: layout %d/%d/%d, manifest %d/%d/%d", c.Type, f.BlockSize, f.BlockBytes,
					f.RowBytes(c.NPerRow), c.BlockSize, c.BlockBytes, c.RowBytes)
			}
			in := decodeF32(readGolden(t, c.Input))
			wantQ := readGolden(t, c.Quantized)
			wantD := readGolden(t, c.Dequantized)
			if len(in) != c.NRows*c.NPerRow || len(wantQ) != c.NRows*c.RowBytes {
				t.Fatalf("sizes: %d values, %d bytes", len(in), len(wantQ))
			}

			// Whole chunk through the public entry point.
			got := make([]byte, len(wantQ))
			f.Quantize(got, in)
			compareQuant(t, c, "chunk", got, wantQ)

			// Row by row, and through the plain reference kernel.
			rows := make([]byte, len(wantQ))
			for r := 0; r < c.NRows; r++ {
				f.Quantize(rows[r*c.RowBytes:(r+1)*c.RowBytes], in[r*c.NPerRow:(r+1)*c.NPerRow])
			}
			compareQuant(t, c, "rows", rows, wantQ)
			ref := make([]byte, len(wantQ))
			referenceKernels[c.TypeID](ref, in, len(in)/c.BlockSize)
			compareQuant(t, c, "reference", ref, wantQ)

			// Dequantize ggml's bytes: every float bit-identical.
			deq := make([]float32, len(in))
			f.Dequantize(deq, wantQ)
			want := decodeF32(wantD)
			bad := 0
			for i := range deq {
				if math.Float32bits(deq[i]) != math.Float32bits(want[i]) {
					if bad++; bad <= 5 {
						t.Errorf("dequantized[%d] = %g (%#08x), want %g (%#08x)", i, deq[i],
							math.Float32bits(deq[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d dequantized values differ", bad, len(deq))
			}
			seenTypes[c.Type]++
		})
	}
	if len(seenTypes) != 12 {
		t.Errorf("golden cases covered %d types, want 12: %v", len(seenTypes), seenTypes)
	}
}

// compareQuant compares quantized bytes. For the cases the golden README
// marks platform_dependent (tiny_subnormal with Q4_0/Q4_1/Q5_0/Q5_1/Q8_0:
// C converts Inf/NaN to an integer there) only the scale fields must match;
// the dequantized values are checked by the caller in every case. This
// package emulates the x86-64 conversion, so it matches those bytes too, and
// a mismatch there is reported as a failure all the same unless it is only
// in the quant bytes.
func compareQuant(t *testing.T, c goldenCase, what string, got, want []byte) {
	t.Helper()
	bad := 0
	for i := range want {
		if got[i] == want[i] {
			continue
		}
		off := i % c.BlockBytes
		if c.PlatformDependent && !isScaleByte(c.TypeID, off) {
			continue
		}
		if bad++; bad <= 5 {
			blk := i / c.BlockBytes
			t.Errorf("%s: block %d byte %d: got %#02x, want %#02x (fma-sensitive case: %v)", what, blk, off, got[i], want[i], c.DiffersWithFMA)
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d bytes differ", what, bad, len(want))
	}
	if c.PlatformDependent {
		for i := range want {
			if got[i] != want[i] {
				t.Logf("%s: platform-dependent byte %d differs (allowed)", what, i)
				break
			}
		}
	}
}

// isScaleByte reports whether byte off of a block is part of its f16 scale
// (d, and m for the _1 types).
func isScaleByte(id uint32, off int) bool {
	switch id {
	case TypeQ4_1, TypeQ5_1:
		return off < 4
	}
	return off < 2
}

func TestGoldenIntegrity(t *testing.T) {
	m := loadManifest(t)
	pd, fma := 0, 0
	for _, c := range m.QuantCases {
		if c.PlatformDependent {
			pd++
		}
		if c.DiffersWithFMA {
			fma++
		}
	}
	if pd != 5 || fma != 15 {
		t.Errorf("%d platform-dependent and %d FMA-sensitive cases, README says 5 and 15", pd, fma)
	}
}
