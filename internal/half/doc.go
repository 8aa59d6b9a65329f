// Package half converts between float32 and the 16-bit float formats used in
// model files (IEEE binary16 "f16" and bfloat16 "bf16"), bit for bit as ggml
// does at llama.cpp commit 34af94cd9ab277632e27caeec2d41de2fd091b31 (see
// pipeline/quantize/kquant/testdata/ggml-golden/README.md):
//
//   - f32 -> f16: round to nearest, ties to even, f16 subnormals kept, values
//     from 65520 up become Inf, every NaN becomes 0x7E00 with the input's sign.
//   - f16 -> f32: exact; a signalling NaN comes back with the quiet bit set.
//   - f32 -> bf16: (bits + 0x7FFF + ((bits>>16)&1)) >> 16 (no flush of
//     subnormals); NaN -> (bits>>16) | 0x0040.
//   - bf16 -> f32: bits << 16.
//
// The row and little-endian byte-slice helpers process min(len(dst), len(src))
// elements (for byte slices, whole 2- or 4-byte elements) and return how many
// they converted. On amd64 CPUs with AVX2 and F16C they convert eight values
// at a time (vec_amd64.s: VCVTPH2PS, VCVTPS2PH with round to nearest even,
// widening and shifting for bf16), giving the same bits as the scalar
// conversions (a group of eight holding a NaN is rounded to f16 by the
// scalar code, which fixes its payload as ggml does); -tags purego keeps
// the scalar code.
package half
