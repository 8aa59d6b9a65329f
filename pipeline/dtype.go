package pipeline

// DType is the element type of a checkpoint tensor, spelled as the safetensors header spells it ("BF16",
// "F8_E4M3", …; safetensors/src/tensor.rs, enum Dtype). The stages compute with the three float types F32, F16
// and BF16; the others can be listed and copied but not read as numbers.
type DType string

// Dtypes of the safetensors format.
const (
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	F64    DType = "F64"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	U8     DType = "U8"
	Bool   DType = "BOOL"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
	F8E8M0 DType = "F8_E8M0"
	F6E2M3 DType = "F6_E2M3"
	F6E3M2 DType = "F6_E3M2"
	F4     DType = "F4"
	C64    DType = "C64"
)

var dtypeBits = map[DType]int64{
	F32: 32, F16: 16, BF16: 16, F64: 64,
	I64: 64, I32: 32, I16: 16, I8: 8,
	U64: 64, U32: 32, U16: 16, U8: 8,
	Bool: 8, F8E4M3: 8, F8E5M2: 8, F8E8M0: 8,
	F6E2M3: 6, F6E3M2: 6, F4: 4, C64: 64,
}

// Bits returns the width of one element in bits, or 0 for an unknown dtype.
func (d DType) Bits() int64 { return dtypeBits[d] }

// Known reports whether d is a dtype of the safetensors format.
func (d DType) Known() bool { return dtypeBits[d] != 0 }

// Float reports whether tensors of this dtype can be read as float32 (F32, F16, BF16).
func (d DType) Float() bool { return d == F32 || d == F16 || d == BF16 }
