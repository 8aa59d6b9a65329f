package kquant

import "fmt"

// Quantization with an importance matrix (ggml_quantize_chunk with a
// non-NULL imatrix).

// RequiresImatrix reports whether ggml refuses to quantize type id without
// an importance matrix (ggml_quantize_requires_imatrix: IQ2_XXS, IQ2_XS and
// IQ1_S). llama-quantize refuses more file types (IQ3_XXS, IQ2_M, IQ1_M,
// Q2_K_S) by policy; that decision belongs to the caller.
func RequiresImatrix(id uint32) bool {
	return id == TypeIQ2_XXS || id == TypeIQ2_XS || id == TypeIQ1_S
}

// RequiresImatrix reports RequiresImatrix(f.Type).
func (f Format) RequiresImatrix() bool { return RequiresImatrix(f.Type) }

// blockKernel encodes one block from its values and their importance
// weights (qw has BlockSize entries; nil means no importance matrix, for the
// kernels that accept that).
type blockKernel func(y []byte, x, qw []float32)

// rowKernel encodes one whole row (len(x) values, len(qw) == len(x)).
type rowKernel func(y []byte, x, qw []float32)

// weightedBlock and weightedRow are the imatrix paths QuantizeWeighted
// runs (the vector or fast kernel where there is one, else the reference):
// per block for every format whose weights depend only on the block, per
// row for Q4_0/Q4_1/Q5_0/Q5_1 (their sigma2 is a row statistic) and IQ4_NL
// (whose vector kernel takes 8 blocks at a time). Q8_0, TQ1_0 and TQ2_0 are
// absent: ggml ignores the importance matrix for them. The tests hold the
// matching reference tables.
var (
	weightedBlock = map[uint32]blockKernel{
		TypeQ2_K: weightedQ2K, TypeQ3_K: weightedQ3K, TypeQ4_K: weightedQ4K,
		TypeQ5_K: weightedQ5K, TypeQ6_K: weightedQ6K,
		TypeIQ4_XS:  weightedIQ4XS,
		TypeIQ2_XXS: fastIQ2XXS, TypeIQ2_XS: fastIQ2XS, TypeIQ2_S: fastIQ2S,
		TypeIQ3_XXS: fastIQ3XXS, TypeIQ3_S: fastIQ3S,
		TypeIQ1_S: fastIQ1S, TypeIQ1_M: fastIQ1M,
	}
	weightedRow = map[uint32]rowKernel{
		TypeQ4_0: refQ4_0Weighted, TypeQ4_1: fastQ4_1Weighted,
		TypeQ5_0: refQ5_0Weighted, TypeQ5_1: fastQ5_1Weighted,
		TypeIQ4_NL: weightedIQ4NLRow,
	}
)

// QuantizeWeighted encodes the rows of src using the per-column importance
// weights imatrix, producing what ggml_quantize_chunk(type, src, dst, 0,
// nrows, n_per_row, imatrix) produces with n_per_row = len(imatrix) and
// nrows = len(src)/len(imatrix). A nil imatrix means ggml's NULL: the result
// is Quantize's (and QuantizeWeighted panics like Quantize for the types
// that require an importance matrix).
//
// len(imatrix) must be a positive multiple of BlockSize and len(src) a
// multiple of len(imatrix); dst must hold RowBytes(len(src)) bytes. A
// violation panics (a programmer error). The importance values are used as
// they are: ggml does not check them, and zero, negative, NaN or Inf weights
// give ggml's bytes for them wherever ggml produces bytes at all (see
// doc.go for the cases where ggml aborts instead). Safe for concurrent use on
// distinct buffers; the lattices of the IQ formats are built once, on first
// use.
func (f Format) QuantizeWeighted(dst []byte, src, imatrix []float32) {
	if imatrix == nil {
		f.Quantize(dst, src)
		return
	}
	n := len(imatrix)
	if n == 0 || n%f.BlockSize != 0 {
		panic(fmt.Sprintf("kquant: quantize %s: importance matrix of %d values is not a positive whole number of %d-value blocks",
			f.Name, n, f.BlockSize))
	}
	if len(src)%n != 0 {
		panic(fmt.Sprintf("kquant: quantize %s: %d values is not a whole number of %d-value rows", f.Name, len(src), n))
	}
	rowBytes := n / f.BlockSize * f.BlockBytes
	nrows := len(src) / n
	if len(dst) < nrows*rowBytes {
		panic(fmt.Sprintf("kquant: quantize %s: dst has %d bytes, %d rows need %d", f.Name, len(dst), nrows, nrows*rowBytes))
	}
	if k, ok := weightedRow[f.Type]; ok {
		for r := 0; r < nrows; r++ {
			k(dst[r*rowBytes:(r+1)*rowBytes], src[r*n:(r+1)*n], imatrix)
		}
		return
	}
	k, ok := weightedBlock[f.Type]
	if !ok { // the importance matrix is ignored
		f.Quantize(dst[:nrows*rowBytes], src)
		return
	}
	bs, bb := f.BlockSize, f.BlockBytes
	for r := 0; r < nrows; r++ {
		x := src[r*n : (r+1)*n]
		y := dst[r*rowBytes : (r+1)*rowBytes]
		for i := 0; i < n/bs; i++ {
			k(y[i*bb:(i+1)*bb], x[i*bs:(i+1)*bs], imatrix[i*bs:(i+1)*bs])
		}
	}
}

// needsImatrix is the Quantize of a type that ggml cannot quantize without
// an importance matrix.
func needsImatrix(name string) func([]byte, []float32) {
	return func([]byte, []float32) {
		panic("kquant: quantize " + name + ": this type requires an importance matrix (use QuantizeWeighted)")
	}
}

// Block loops of the imatrix-free paths of the IQ formats (ggml's NULL
// quant_weights).

func quantizeIQ3XXS(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastIQ3XXS(dst[i*98:], src[i*256:], nil)
	}
}

func quantizeIQ3S(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastIQ3S(dst[i*110:], src[i*256:], nil)
	}
}

func quantizeIQ2S(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastIQ2S(dst[i*82:], src[i*256:], nil)
	}
}

func quantizeIQ1M(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastIQ1M(dst[i*56:], src[i*256:], nil)
	}
}
