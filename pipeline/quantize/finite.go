package quantize

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// DataError reports input weights that are not finite. A NaN or an infinity has no quantized value (the block
// scale becomes NaN too) and makes every logit of the model NaN; llama-quantize refuses such tensors as well
// (ggml_validate_row_data).
type DataError struct {
	Tensor string
	Index  int64 // element index within the tensor
	Value  float32
}

func (e *DataError) Error() string {
	return fmt.Sprintf("quantize: tensor %q: element %d is %v (the input's weights must be finite numbers)", e.Tensor, e.Index, e.Value)
}

// InputError classifies the error as bad input (exit 3).
func (e *DataError) InputError() bool { return true }

// checkFinite returns a *DataError for the first NaN or infinity in rows (which start at element first).
// Every value of the input passes through here, so the common case is one branch-free pass (about a
// twentieth of the cost of testing each value with math.IsNaN and math.IsInf): the exponent field of a NaN
// or an infinity is all ones, so adding one at its lowest bit carries into the sign bit, and the OR of
// (bits & exponent) + lowest-bit over the values has the sign bit set exactly when one of them is not
// finite. Only then are the values searched one by one. Where the CPU has AVX2, the values up to the last
// multiple of 32 are checked 32 at a time first (allFiniteVec; finite_amd64.s).
func checkFinite(tensor string, first int64, rows []float32) error {
	const exp, lsb = 0x7F800000, 0x00800000
	i, ok := allFiniteVec(rows)
	if !ok {
		return firstNonFinite(tensor, first, rows)
	}
	var acc uint32
	for ; i+8 <= len(rows); i += 8 {
		r := rows[i : i+8 : i+8]
		acc |= (math.Float32bits(r[0])&exp + lsb) | (math.Float32bits(r[1])&exp + lsb) |
			(math.Float32bits(r[2])&exp + lsb) | (math.Float32bits(r[3])&exp + lsb) |
			(math.Float32bits(r[4])&exp + lsb) | (math.Float32bits(r[5])&exp + lsb) |
			(math.Float32bits(r[6])&exp + lsb) | (math.Float32bits(r[7])&exp + lsb)
	}
	for ; i < len(rows); i++ {
		acc |= math.Float32bits(rows[i])&exp + lsb
	}
	if acc&0x80000000 == 0 {
		return nil
	}
	return firstNonFinite(tensor, first, rows)
}

// firstNonFinite returns a *DataError for the first NaN or infinity in rows, or nil.
func firstNonFinite(tensor string, first int64, rows []float32) error {
	for i, v := range rows {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return &DataError{Tensor: tensor, Index: first + int64(i), Value: v}
		}
	}
	return nil
}

// finiteReader passes the bytes of a tensor copied unchanged and fails with a *DataError at the first
// non-finite value. It decodes units of size bytes (one value, or one block of per values).
type finiteReader struct {
	r      io.Reader
	tensor string
	size   int
	per    int
	decode func(dst []float32, src []byte)
	vals   []float32
	pos    int64  // index of the next value
	carry  []byte // a unit split across two reads
}

// checkedRaw wraps the raw bytes of a tensor of type t copied unchanged, so they are checked like the rows
// that are quantized: float types value by value, block types block by block (dequantized). A type without a
// decoder passes unchecked.
func checkedRaw(r io.Reader, tensor string, t gguf.Type) io.Reader {
	switch t {
	case gguf.TypeF32:
		return &finiteReader{r: r, tensor: tensor, size: 4, per: 1, decode: func(dst []float32, b []byte) { dst[0] = math.Float32frombits(binary.LittleEndian.Uint32(b)) }}
	case gguf.TypeF16:
		return &finiteReader{r: r, tensor: tensor, size: 2, per: 1, decode: func(dst []float32, b []byte) { dst[0] = half.F16ToF32(binary.LittleEndian.Uint16(b)) }}
	case gguf.TypeBF16:
		return &finiteReader{r: r, tensor: tensor, size: 2, per: 1, decode: func(dst []float32, b []byte) { dst[0] = half.BF16ToF32(binary.LittleEndian.Uint16(b)) }}
	}
	dec, err := rowDecoder(t)
	if err != nil || t.BlockSize() <= 1 {
		return r
	}
	return &finiteReader{r: r, tensor: tensor, size: int(t.BlockBytes()), per: int(t.BlockSize()), decode: dec}
}

func (f *finiteReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	b := p[:n]
	if len(f.carry) > 0 {
		need := f.size - len(f.carry)
		if need > len(b) {
			f.carry = append(f.carry, b...)
			return n, err
		}
		if e := f.unit(append(f.carry, b[:need]...)); e != nil {
			return 0, e
		}
		f.carry = f.carry[:0]
		b = b[need:]
	}
	whole := len(b) / f.size * f.size
	for i := 0; i < whole; i += f.size {
		if e := f.unit(b[i : i+f.size]); e != nil {
			return 0, e
		}
	}
	f.carry = append(f.carry, b[whole:]...)
	return n, err
}

func (f *finiteReader) unit(b []byte) error {
	if cap(f.vals) < f.per {
		f.vals = make([]float32, f.per)
	}
	v := f.vals[:f.per]
	f.decode(v, b)
	if err := checkFinite(f.tensor, f.pos, v); err != nil {
		return err
	}
	f.pos += int64(f.per)
	return nil
}
