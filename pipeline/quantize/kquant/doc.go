// Package kquant quantizes and dequantizes rows of float32 values in the ggml
// block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL and IQ4_XS, producing exactly the bytes llama.cpp's
// ggml_quantize_chunk produces without an importance matrix (llama.cpp commit
// 34af94cd9ab277632e27caeec2d41de2fd091b31, ggml/src/ggml-quants.c):
//
//   - Q4_0 … Q8_0 and Q2_K … Q6_K: quantize_row_<type>_ref.
//   - IQ4_NL, IQ4_XS: quantize_row_iq4_nl_impl with ntry = 7 and no weights
//     (what quantize_iq4_nl / quantize_iq4_xs run), not the _ref variant.
//
// Dequantization is the type's dequantize_row_<type>.
//
// Bit-exactness rules followed throughout (see testdata/ggml-golden/README.md):
// all arithmetic is float32 in the C evaluation order; sums are accumulated
// sequentially; every product that feeds an addition or subtraction is
// written float32(a*b) so that the Go compiler cannot fuse it into an FMA
// (it does on arm64 and with GOAMD64=v3); C's float-to-integer conversions
// are emulated as x86-64 performs them (cvttss2si, then truncation to the
// destination width), so that even NaN/Inf edge cases give the x86 bytes on
// every platform.
//
// The plain reference kernels (ref_*.go, and legacy.go for the cheap
// 32-value formats) follow the C code statement by statement and are the
// specification. Faster kernels (fast_*.go: fixed-size arrays, repeated
// search steps skipped, prefix sums reused, a branch-free table search) are
// what Format.Quantize runs; they perform the same float32 operations on
// every value that decides the output, and the tests check them against the
// reference bit for bit on odd block counts and offsets, on special values,
// and under fuzzing.
//
// Testing: golden_test.go walks testdata/ggml-golden/manifest.json (156
// cases, all compared byte for byte, dequantized floats bit for bit);
// scripts/test-kernels-cross.sh repeats the tests with GOAMD64=v1, v3 and on
// arm64 under qemu, where Go would fuse a*b+c if a kernel let it.
package kquant
