package safetensors

import "github.com/phonellm/phonellm/pipeline"

// DType is a safetensors dtype string as written in the header ("F32", ...): the pipeline's dtype type, so a
// checkpoint tensor's dtype is the same value in every package.
type DType = pipeline.DType

// Dtypes of the safetensors format (safetensors/src/tensor.rs, enum Dtype). Only F32, F16 and BF16 can be
// read as float32; the others parse, are bounds-checked and can be read raw.
const (
	F32    = pipeline.F32
	F16    = pipeline.F16
	BF16   = pipeline.BF16
	F64    = pipeline.F64
	I64    = pipeline.I64
	I32    = pipeline.I32
	I16    = pipeline.I16
	I8     = pipeline.I8
	U64    = pipeline.U64
	U32    = pipeline.U32
	U16    = pipeline.U16
	U8     = pipeline.U8
	Bool   = pipeline.Bool
	F8E4M3 = pipeline.F8E4M3
	F8E5M2 = pipeline.F8E5M2
	F8E8M0 = pipeline.F8E8M0
	F6E2M3 = pipeline.F6E2M3
	F6E3M2 = pipeline.F6E3M2
	F4     = pipeline.F4
	C64    = pipeline.C64
)

// elemBytes is the byte width of a float-readable dtype.
func elemBytes(d DType) int64 { return d.Bits() / 8 }
