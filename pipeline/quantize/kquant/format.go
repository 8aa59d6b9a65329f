package kquant

import "fmt"

// ggml type ids (ggml/include/ggml.h, enum ggml_type).
const (
	TypeQ4_0    uint32 = 2
	TypeQ4_1    uint32 = 3
	TypeQ5_0    uint32 = 6
	TypeQ5_1    uint32 = 7
	TypeQ8_0    uint32 = 8
	TypeQ2_K    uint32 = 10
	TypeQ3_K    uint32 = 11
	TypeQ4_K    uint32 = 12
	TypeQ5_K    uint32 = 13
	TypeQ6_K    uint32 = 14
	TypeIQ2_XXS uint32 = 16
	TypeIQ2_XS  uint32 = 17
	TypeIQ3_XXS uint32 = 18
	TypeIQ1_S   uint32 = 19
	TypeIQ4_NL  uint32 = 20
	TypeIQ3_S   uint32 = 21
	TypeIQ2_S   uint32 = 22
	TypeIQ4_XS  uint32 = 23
	TypeIQ1_M   uint32 = 29
	TypeTQ1_0   uint32 = 34
	TypeTQ2_0   uint32 = 35
)

// Format describes one block-quantized ggml type.
//
// Quantize encodes len(src)/BlockSize blocks of src into dst without an
// importance matrix (ggml_quantize_chunk with imatrix NULL); len(src) must be
// a whole number of blocks (one row or many rows; ggml rows never share a
// block, so a chunk of rows gives the same bytes as row-by-row calls) and dst
// must hold at least len(src)/BlockSize*BlockBytes bytes. Dequantize decodes
// len(dst)/BlockSize blocks of src into dst under the same rules. Both panic
// on a length violation (a programmer error), never allocate, and are safe
// for concurrent use on distinct buffers. For the types ggml cannot quantize
// without an importance matrix (RequiresImatrix: IQ2_XXS, IQ2_XS, IQ1_S)
// Quantize panics; use QuantizeWeighted (weighted.go) for those, and for
// every type when an importance matrix is available.
type Format struct {
	Name       string // ggml type name, e.g. "Q4_K"
	Type       uint32 // ggml type id
	BlockSize  int    // values per block
	BlockBytes int    // bytes per block
	Quantize   func(dst []byte, src []float32)
	Dequantize func(dst []float32, src []byte)
}

// RowBytes is the encoded size of n values, or -1 if n is not a whole number
// of blocks.
func (f Format) RowBytes(n int) int {
	if n < 0 || n%f.BlockSize != 0 {
		return -1
	}
	return n / f.BlockSize * f.BlockBytes
}

var formats = []Format{
	{"Q4_0", TypeQ4_0, 32, 18, wrapQ(32, 18, quantizeQ4_0), wrapD(32, 18, dequantizeQ4_0)},
	{"Q4_1", TypeQ4_1, 32, 20, wrapQ(32, 20, quantizeQ4_1), wrapD(32, 20, dequantizeQ4_1)},
	{"Q5_0", TypeQ5_0, 32, 22, wrapQ(32, 22, quantizeQ5_0), wrapD(32, 22, dequantizeQ5_0)},
	{"Q5_1", TypeQ5_1, 32, 24, wrapQ(32, 24, quantizeQ5_1), wrapD(32, 24, dequantizeQ5_1)},
	{"Q8_0", TypeQ8_0, 32, 34, wrapQ(32, 34, quantizeQ8_0), wrapD(32, 34, dequantizeQ8_0)},
	{"Q2_K", TypeQ2_K, 256, 84, wrapQ(256, 84, quantizeQ2K), wrapD(256, 84, dequantizeQ2K)},
	{"Q3_K", TypeQ3_K, 256, 110, wrapQ(256, 110, quantizeQ3K), wrapD(256, 110, dequantizeQ3K)},
	{"Q4_K", TypeQ4_K, 256, 144, wrapQ(256, 144, quantizeQ4K), wrapD(256, 144, dequantizeQ4K)},
	{"Q5_K", TypeQ5_K, 256, 176, wrapQ(256, 176, quantizeQ5K), wrapD(256, 176, dequantizeQ5K)},
	{"Q6_K", TypeQ6_K, 256, 210, wrapQ(256, 210, quantizeQ6K), wrapD(256, 210, dequantizeQ6K)},
	{"IQ2_XXS", TypeIQ2_XXS, 256, 66, needsImatrix("IQ2_XXS"), wrapD(256, 66, dequantizeIQ2XXS)},
	{"IQ2_XS", TypeIQ2_XS, 256, 74, needsImatrix("IQ2_XS"), wrapD(256, 74, dequantizeIQ2XS)},
	{"IQ3_XXS", TypeIQ3_XXS, 256, 98, wrapQ(256, 98, quantizeIQ3XXS), wrapD(256, 98, dequantizeIQ3XXS)},
	{"IQ1_S", TypeIQ1_S, 256, 50, needsImatrix("IQ1_S"), wrapD(256, 50, dequantizeIQ1S)},
	{"IQ4_NL", TypeIQ4_NL, 32, 18, wrapQ(32, 18, quantizeIQ4NL), wrapD(32, 18, dequantizeIQ4NL)},
	{"IQ3_S", TypeIQ3_S, 256, 110, wrapQ(256, 110, quantizeIQ3S), wrapD(256, 110, dequantizeIQ3S)},
	{"IQ2_S", TypeIQ2_S, 256, 82, wrapQ(256, 82, quantizeIQ2S), wrapD(256, 82, dequantizeIQ2S)},
	{"IQ4_XS", TypeIQ4_XS, 256, 136, wrapQ(256, 136, quantizeIQ4XS), wrapD(256, 136, dequantizeIQ4XS)},
	{"IQ1_M", TypeIQ1_M, 256, 56, wrapQ(256, 56, quantizeIQ1M), wrapD(256, 56, dequantizeIQ1M)},
	{"TQ1_0", TypeTQ1_0, 256, 54, wrapQ(256, 54, quantizeTQ1_0), wrapD(256, 54, dequantizeTQ1_0)},
	{"TQ2_0", TypeTQ2_0, 256, 66, wrapQ(256, 66, quantizeTQ2_0), wrapD(256, 66, dequantizeTQ2_0)},
}

// Formats lists every supported format in ggml type-id order.
func Formats() []Format {
	out := make([]Format, len(formats))
	copy(out, formats)
	return out
}

// ForType returns the format of a ggml type id.
func ForType(id uint32) (Format, bool) {
	for _, f := range formats {
		if f.Type == id {
			return f, true
		}
	}
	return Format{}, false
}

// ForName returns the format with the given ggml type name ("Q4_K"; exact,
// upper case as ggml spells it).
func ForName(name string) (Format, bool) {
	for _, f := range formats {
		if f.Name == name {
			return f, true
		}
	}
	return Format{}, false
}

// RowBytes is the encoded size of n values of ggml type id, or -1 if the type
// is not supported here or n is not a whole number of its blocks.
func RowBytes(id uint32, n int) int {
	f, ok := ForType(id)
	if !ok {
		return -1
	}
	return f.RowBytes(n)
}

// wrapQ checks lengths once and hands whole blocks to a kernel that loops
// over nb blocks.
func wrapQ(bs, bb int, k func(dst []byte, src []float32, nb int)) func([]byte, []float32) {
	return func(dst []byte, src []float32) {
		if len(src)%bs != 0 {
			panic(fmt.Sprintf("kquant: quantize: %d values is not a whole number of %d-value blocks", len(src), bs))
		}
		nb := len(src) / bs
		if len(dst) < nb*bb {
			panic(fmt.Sprintf("kquant: quantize: dst has %d bytes, %d blocks need %d", len(dst), nb, nb*bb))
		}
		k(dst[:nb*bb], src, nb)
	}
}

func wrapD(bs, bb int, k func(dst []float32, src []byte, nb int)) func([]float32, []byte) {
	return func(dst []float32, src []byte) {
		if len(dst)%bs != 0 {
			panic(fmt.Sprintf("kquant: dequantize: %d values is not a whole number of %d-value blocks", len(dst), bs))
		}
		nb := len(dst) / bs
		if len(src) < nb*bb {
			panic(fmt.Sprintf("kquant: dequantize: src has %d bytes, %d blocks need %d", len(src), nb, nb*bb))
		}
		k(dst, src[:nb*bb], nb)
	}
}
