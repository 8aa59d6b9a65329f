package kquant

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The second golden set: ggml's output with an importance matrix, and the
// IQ1/IQ2/IQ3/TQ formats with and without one (see
// testdata/ggml-golden-imatrix/PROVENANCE.md); never regenerated.
const goldenImatrixDir = "testdata/ggml-golden-imatrix"

type goldenImatrixCase struct {
	Case        string      `json:"case"`
	Type        string      `json:"type"`
	TypeID      uint32      `json:"ggml_type_id"`
	NRows       int         `json:"n_rows"`
	NPerRow     int         `json:"n_per_row"`
	BlockSize   int         `json:"block_size"`
	BlockBytes  int         `json:"block_bytes"`
	RowBytes    int         `json:"row_bytes"`
	Call        string      `json:"call"`
	Input       goldenFile  `json:"input"`
	Imatrix     *goldenFile `json:"imatrix"`
	Quantized   goldenFile  `json:"quantized"`
	Dequantized goldenFile  `json:"dequantized"`
}

type goldenImatrixManifest struct {
	Format     string              `json:"format"`
	QuantCases []goldenImatrixCase `json:"quant_cases"`
}

// goldenImatrixTypes are the 21 types of the set.
var goldenImatrixTypes = []string{"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
	"IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0"}

func loadImatrixManifest(t testing.TB) goldenImatrixManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenImatrixDir, "manifest.json"))
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	var m goldenImatrixManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("parse manifest: %v", err)
	}
	if m.Format != "ggml-golden-imatrix/1" {
		t.Fatalf("manifest format %q, want ggml-golden-imatrix/1", m.Format)
	}
	if len(m.QuantCases) != 252 {
		t.Fatalf("manifest has %d quant cases, want 252", len(m.QuantCases))
	}
	return m
}

// readGoldenImatrix reads a file of the set and checks size and sha256.
func readGoldenImatrix(t testing.TB, f goldenFile) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenImatrixDir, f.Path))
	if err != nil {
		t.Fatalf("read golden: %v", err)
	}
	sum := sha256.Sum256(b)
	if len(b) != f.Bytes || hex.EncodeToString(sum[:]) != f.SHA256 {
		t.Fatalf("golden %s: %d bytes sha256 %x, manifest says %d bytes %s", f.Path, len(b), sum, f.Bytes, f.SHA256)
	}
	return b
}

// referenceWeightedBlock and referenceWeightedRow are the plain reference
// kernels of the imatrix paths (weighted.go holds what QuantizeWeighted
// runs).
var (
	referenceWeightedBlock = map[uint32]blockKernel{
		TypeQ2_K: refQ2KWeighted, TypeQ3_K: refQ3KWeighted, TypeQ4_K: refQ4KWeighted,
		TypeQ5_K: refQ5KWeighted, TypeQ6_K: refQ6KWeighted,
		TypeIQ4_NL:  func(y []byte, x, qw []float32) { refIQ4BlockWeighted(y, x, qw, 32) },
		TypeIQ4_XS:  func(y []byte, x, qw []float32) { refIQ4BlockWeighted(y, x, qw, 256) },
		TypeIQ2_XXS: refIQ2XXS, TypeIQ2_XS: refIQ2XS, TypeIQ2_S: refIQ2S,
		TypeIQ3_XXS: refIQ3XXS, TypeIQ3_S: refIQ3S,
		TypeIQ1_S: refIQ1S, TypeIQ1_M: refIQ1M,
	}
	referenceWeightedRow = map[uint32]rowKernel{
		TypeQ4_0: refQ4_0Weighted, TypeQ4_1: refQ4_1Weighted,
		TypeQ5_0: refQ5_0Weighted, TypeQ5_1: refQ5_1Weighted,
	}
)

// weightedReference runs the plain reference kernels of a type the way
// ggml_quantize_chunk does, one row at a time, with imatrix (nil = NULL).
func weightedReference(f Format, dst []byte, src, imatrix []float32, nPerRow int) {
	rowBytes := f.RowBytes(nPerRow)
	for r := 0; r < len(src)/nPerRow; r++ {
		x := src[r*nPerRow : (r+1)*nPerRow]
		y := dst[r*rowBytes : (r+1)*rowBytes]
		switch {
		case imatrix == nil:
			plainReference(f, y, x)
		case referenceWeightedRow[f.Type] != nil:
			referenceWeightedRow[f.Type](y, x, imatrix)
		case referenceWeightedBlock[f.Type] != nil:
			k := referenceWeightedBlock[f.Type]
			for i := 0; i < nPerRow/f.BlockSize; i++ {
				k(y[i*f.BlockBytes:(i+1)*f.BlockBytes], x[i*f.BlockSize:(i+1)*f.BlockSize],
					imatrix[i*f.BlockSize:(i+1)*f.BlockSize])
			}
		default:
			plainReference(f, y, x)
		}
	}
}

// plainReference is the reference kernel without an importance matrix.
func plainReference(f Format, y []byte, x []float32) {
	referenceKernels[f.Type](y, x, len(x)/f.BlockSize)
}

func TestGoldenImatrix(t *testing.T) {
	m := loadImatrixManifest(t)
	seen := map[string]int{}
	plain := 0
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
			in := decodeF32(readGoldenImatrix(t, c.Input))
			var im []float32
			if c.Imatrix != nil {
				im = decodeF32(readGoldenImatrix(t, *c.Imatrix))
				if len(im) != c.NPerRow || !strings.HasSuffix(c.Call, "imatrix)") {
					t.Fatalf("imatrix of %d values for rows of %d, call %q", len(im), c.NPerRow, c.Call)
				}
			} else if !strings.HasSuffix(c.Call, "NULL)") || f.RequiresImatrix() {
				t.Fatalf("case without imatrix: call %q, type requires one: %v", c.Call, f.RequiresImatrix())
			}
			wantQ := readGoldenImatrix(t, c.Quantized)
			wantD := readGoldenImatrix(t, c.Dequantized)
			if len(in) != c.NRows*c.NPerRow || len(wantQ) != c.NRows*c.RowBytes {
				t.Fatalf("sizes: %d values, %d bytes", len(in), len(wantQ))
			}
			cc := goldenCase{Case: c.Case, Type: c.Type, TypeID: c.TypeID, BlockBytes: c.BlockBytes}

			// The whole chunk through the public entry point.
			got := make([]byte, len(wantQ))
			if im == nil {
				f.Quantize(got, in)
			} else {
				f.QuantizeWeighted(got, in, im)
			}
			compareQuant(t, cc, "chunk", got, wantQ)

			// Row by row, and through the plain reference kernels.
			rows := make([]byte, len(wantQ))
			for r := 0; r < c.NRows; r++ {
				f.QuantizeWeighted(rows[r*c.RowBytes:(r+1)*c.RowBytes], in[r*c.NPerRow:(r+1)*c.NPerRow], im)
			}
			compareQuant(t, cc, "rows", rows, wantQ)
			ref := make([]byte, len(wantQ))
			weightedReference(f, ref, in, im, c.NPerRow)
			compareQuant(t, cc, "reference", ref, wantQ)

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
			seen[c.Type]++
			if im == nil {
				plain++
			}
		})
	}
	if len(seen) != len(goldenImatrixTypes) {
		t.Errorf("golden cases covered %d types, want %d: %v", len(seen), len(goldenImatrixTypes), seen)
	}
	for _, name := range goldenImatrixTypes {
		if seen[name] == 0 {
			t.Errorf("no passing golden case for %s", name)
		}
	}
	if plain != 7*6 {
		t.Errorf("%d passing cases without an importance matrix, want 42 (7 inputs x IQ3_XXS, IQ3_S, IQ2_S, IQ1_M, TQ1_0, TQ2_0)", plain)
	}
}
