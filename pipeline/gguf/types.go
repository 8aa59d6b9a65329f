package gguf

import (
	"fmt"
	"strings"
)

// Type is a ggml tensor type id as stored in a GGUF tensor info
// (ggml/include/ggml.h, enum ggml_type, llama.cpp 34af94cd).
type Type uint32

// The ggml tensor types. Ids 4, 5 and 31-33, 36-38 were removed upstream and are never written.
const (
	TypeF32     Type = 0
	TypeF16     Type = 1
	TypeQ4_0    Type = 2
	TypeQ4_1    Type = 3
	TypeQ5_0    Type = 6
	TypeQ5_1    Type = 7
	TypeQ8_0    Type = 8
	TypeQ8_1    Type = 9
	TypeQ2_K    Type = 10
	TypeQ3_K    Type = 11
	TypeQ4_K    Type = 12
	TypeQ5_K    Type = 13
	TypeQ6_K    Type = 14
	TypeQ8_K    Type = 15
	TypeIQ2_XXS Type = 16
	TypeIQ2_XS  Type = 17
	TypeIQ3_XXS Type = 18
	TypeIQ1_S   Type = 19
	TypeIQ4_NL  Type = 20
	TypeIQ3_S   Type = 21
	TypeIQ2_S   Type = 22
	TypeIQ4_XS  Type = 23
	TypeI8      Type = 24
	TypeI16     Type = 25
	TypeI32     Type = 26
	TypeI64     Type = 27
	TypeF64     Type = 28
	TypeIQ1_M   Type = 29
	TypeBF16    Type = 30
	TypeTQ1_0   Type = 34
	TypeTQ2_0   Type = 35
	TypeMXFP4   Type = 39
)

type typeTraits struct {
	name       string
	blockSize  int64 // elements per block
	blockBytes int64 // bytes per block
	quantized  bool
}

// traits holds block size and bytes per block for every type a GGUF may contain
// (gguf-py/gguf/constants.py GGML_QUANT_SIZES; ggml-common.h block structs).
var traits = map[Type]typeTraits{
	TypeF32:     {"F32", 1, 4, false},
	TypeF16:     {"F16", 1, 2, false},
	TypeQ4_0:    {"Q4_0", 32, 18, true},
	TypeQ4_1:    {"Q4_1", 32, 20, true},
	TypeQ5_0:    {"Q5_0", 32, 22, true},
	TypeQ5_1:    {"Q5_1", 32, 24, true},
	TypeQ8_0:    {"Q8_0", 32, 34, true},
	TypeQ8_1:    {"Q8_1", 32, 36, true},
	TypeQ2_K:    {"Q2_K", 256, 84, true},
	TypeQ3_K:    {"Q3_K", 256, 110, true},
	TypeQ4_K:    {"Q4_K", 256, 144, true},
	TypeQ5_K:    {"Q5_K", 256, 176, true},
	TypeQ6_K:    {"Q6_K", 256, 210, true},
	TypeQ8_K:    {"Q8_K", 256, 292, true},
	TypeIQ2_XXS: {"IQ2_XXS", 256, 66, true},
	TypeIQ2_XS:  {"IQ2_XS", 256, 74, true},
	TypeIQ3_XXS: {"IQ3_XXS", 256, 98, true},
	TypeIQ1_S:   {"IQ1_S", 256, 50, true},
	TypeIQ4_NL:  {"IQ4_NL", 32, 18, true},
	TypeIQ3_S:   {"IQ3_S", 256, 110, true},
	TypeIQ2_S:   {"IQ2_S", 256, 82, true},
	TypeIQ4_XS:  {"IQ4_XS", 256, 136, true},
	TypeI8:      {"I8", 1, 1, false},
	TypeI16:     {"I16", 1, 2, false},
	TypeI32:     {"I32", 1, 4, false},
	TypeI64:     {"I64", 1, 8, false},
	TypeF64:     {"F64", 1, 8, false},
	TypeIQ1_M:   {"IQ1_M", 256, 56, true},
	TypeBF16:    {"BF16", 1, 2, false},
	TypeTQ1_0:   {"TQ1_0", 256, 54, true},
	TypeTQ2_0:   {"TQ2_0", 256, 66, true},
	TypeMXFP4:   {"MXFP4", 32, 17, true},
}

// Known reports whether t is a type this package knows the layout of.
func (t Type) Known() bool { _, ok := traits[t]; return ok }

// String returns the ggml name of the type ("Q4_K", "F16"), or "type(N)" for unknown ids.
func (t Type) String() string {
	if tr, ok := traits[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements in one block (1 for plain types). It is 0 for unknown types.
func (t Type) BlockSize() int64 { return traits[t].blockSize }

// BlockBytes is the number of bytes one block occupies. It is 0 for unknown types.
func (t Type) BlockBytes() int64 { return traits[t].blockBytes }

// Quantized reports whether t is a block-quantized type.
func (t Type) Quantized() bool { return traits[t].quantized }

// RowBytes returns the bytes of a row of n elements, or an error when n is not a whole number of blocks.
func (t Type) RowBytes(n int64) (int64, error) {
	tr, ok := traits[t]
	if !ok {
		return 0, &UnsupportedError{What: fmt.Sprintf("ggml type id %d", uint32(t))}
	}
	if n < 0 || n%tr.blockSize != 0 {
		return 0, fmt.Errorf("gguf: row of %d elements is not a multiple of the %s block size %d", n, tr.name, tr.blockSize)
	}
	return n / tr.blockSize * tr.blockBytes, nil
}

// ParseType parses a ggml type name, case-insensitively ("q4_k", "F16").
func ParseType(name string) (Type, error) {
	u := strings.ToUpper(strings.TrimSpace(name))
	for t, tr := range traits {
		if tr.name == u {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown ggml type %q", name)
}

// FileType is a llama_ftype, the value of general.file_type (include/llama.h).
type FileType uint32

// File types phonellm writes. Values from llama.h (llama.cpp 34af94cd).
const (
	FileTypeAllF32 FileType = 0
	FileTypeF16    FileType = 1
	FileTypeQ4_0   FileType = 2
	FileTypeQ4_1   FileType = 3
	FileTypeQ8_0   FileType = 7
	FileTypeQ5_0   FileType = 8
	FileTypeQ5_1   FileType = 9
	FileTypeQ2_K   FileType = 10
	FileTypeQ3_K_S FileType = 11
	FileTypeQ3_K_M FileType = 12
	FileTypeQ3_K_L FileType = 13
	FileTypeQ4_K_S FileType = 14
	FileTypeQ4_K_M FileType = 15
	FileTypeQ5_K_S FileType = 16
	FileTypeQ5_K_M FileType = 17
	FileTypeQ6_K   FileType = 18
	FileTypeIQ4_NL FileType = 25
	FileTypeIQ4_XS FileType = 30
	FileTypeBF16   FileType = 32

	// The low-bit file types (most need an importance matrix).
	FileTypeIQ2_XXS FileType = 19
	FileTypeIQ2_XS  FileType = 20
	FileTypeQ2_K_S  FileType = 21
	FileTypeIQ3_XS  FileType = 22
	FileTypeIQ3_XXS FileType = 23
	FileTypeIQ1_S   FileType = 24
	FileTypeIQ3_S   FileType = 26
	FileTypeIQ3_M   FileType = 27
	FileTypeIQ2_S   FileType = 28
	FileTypeIQ2_M   FileType = 29
	FileTypeIQ1_M   FileType = 31
	FileTypeTQ1_0   FileType = 36
	FileTypeTQ2_0   FileType = 37
)

var fileTypeNames = map[FileType]string{
	FileTypeAllF32: "F32", FileTypeF16: "F16", FileTypeQ4_0: "Q4_0", FileTypeQ4_1: "Q4_1",
	FileTypeQ8_0: "Q8_0", FileTypeQ5_0: "Q5_0", FileTypeQ5_1: "Q5_1", FileTypeQ2_K: "Q2_K",
	FileTypeQ3_K_S: "Q3_K_S", FileTypeQ3_K_M: "Q3_K_M", FileTypeQ3_K_L: "Q3_K_L",
	FileTypeQ4_K_S: "Q4_K_S", FileTypeQ4_K_M: "Q4_K_M", FileTypeQ5_K_S: "Q5_K_S",
	FileTypeQ5_K_M: "Q5_K_M", FileTypeQ6_K: "Q6_K", FileTypeIQ4_NL: "IQ4_NL",
	FileTypeIQ4_XS: "IQ4_XS", FileTypeBF16: "BF16",
	FileTypeIQ2_XXS: "IQ2_XXS", FileTypeIQ2_XS: "IQ2_XS", FileTypeQ2_K_S: "Q2_K_S", FileTypeIQ3_XS: "IQ3_XS",
	FileTypeIQ3_XXS: "IQ3_XXS", FileTypeIQ1_S: "IQ1_S", FileTypeIQ3_S: "IQ3_S", FileTypeIQ3_M: "IQ3_M",
	FileTypeIQ2_S: "IQ2_S", FileTypeIQ2_M: "IQ2_M", FileTypeIQ1_M: "IQ1_M", FileTypeTQ1_0: "TQ1_0",
	FileTypeTQ2_0: "TQ2_0",
}

// String returns the llama-quantize name of the file type ("Q4_K_M").
func (f FileType) String() string {
	if n, ok := fileTypeNames[f]; ok {
		return n
	}
	return fmt.Sprintf("ftype(%d)", uint32(f))
}

// FileTypes lists the file types phonellm can write: the float and classic types, then the low-bit ones
// roughly in llama-quantize's order (tools/quantize/quantize.cpp QUANT_OPTIONS).
func FileTypes() []FileType {
	return []FileType{FileTypeAllF32, FileTypeF16, FileTypeBF16, FileTypeQ4_0, FileTypeQ4_1, FileTypeQ5_0,
		FileTypeQ5_1, FileTypeQ8_0, FileTypeQ2_K, FileTypeQ3_K_S, FileTypeQ3_K_M, FileTypeQ3_K_L,
		FileTypeQ4_K_S, FileTypeQ4_K_M, FileTypeQ5_K_S, FileTypeQ5_K_M, FileTypeQ6_K, FileTypeIQ4_NL,
		FileTypeIQ4_XS, FileTypeIQ2_XXS, FileTypeIQ2_XS, FileTypeIQ2_S, FileTypeIQ2_M, FileTypeIQ1_S,
		FileTypeIQ1_M, FileTypeTQ1_0, FileTypeTQ2_0, FileTypeQ2_K_S, FileTypeIQ3_XXS, FileTypeIQ3_S,
		FileTypeIQ3_M, FileTypeIQ3_XS}
}

// ParseFileType parses a llama-quantize file type name case-insensitively ("q4_k_m", "Q4_K_M"), with the
// aliases llama-quantize accepts (Q4_K = Q4_K_M, Q3_K = Q3_K_M, Q5_K = Q5_K_M).
func ParseFileType(name string) (FileType, error) {
	u := strings.ToUpper(strings.TrimSpace(name))
	switch u {
	case "Q4_K":
		return FileTypeQ4_K_M, nil
	case "Q3_K":
		return FileTypeQ3_K_M, nil
	case "Q5_K":
		return FileTypeQ5_K_M, nil
	}
	for f, n := range fileTypeNames {
		if n == u {
			return f, nil
		}
	}
	names := make([]string, 0, len(fileTypeNames))
	for _, f := range FileTypes() {
		names = append(names, f.String())
	}
	return 0, fmt.Errorf("unknown quantization type %q (valid: %s)", name, strings.Join(names, ", "))
}
