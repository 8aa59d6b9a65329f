// Package kquant quantizes and dequantizes rows of float32 values in the ggml
// block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M,
// TQ1_0 and TQ2_0, producing exactly the bytes llama.cpp's
// ggml_quantize_chunk produces, with or without an importance matrix
// (llama.cpp commit 34af94cd9ab277632e27caeec2d41de2fd091b31,
// ggml/src/ggml-quants.c):
//
//   - Without an importance matrix (Format.Quantize; ggml's imatrix NULL):
//     Q4_0 … Q8_0 and Q2_K … Q6_K run quantize_row_<type>_ref; IQ4_NL and
//     IQ4_XS run quantize_row_iq4_nl_impl with ntry = 7 and no weights (what
//     quantize_iq4_nl / quantize_iq4_xs run), not the _ref variant; IQ3_XXS,
//     IQ3_S, IQ2_S and IQ1_M run their quantize_row_*_impl with NULL
//     weights; TQ1_0/TQ2_0 run quantize_row_tq*_0_ref. IQ2_XXS, IQ2_XS and
//     IQ1_S cannot be quantized without an importance matrix
//     (RequiresImatrix, ggml_quantize_requires_imatrix); their Quantize
//     panics.
//   - With an importance matrix (Format.QuantizeWeighted): Q4_0/Q4_1/Q5_0/
//     Q5_1 and the K-quants switch to quantize_row_<type>_impl (weighted
//     searches: make_qx_quants with weights, make_qkx3_quants,
//     make_qp_quants for the sub-block scales; weights qw[j] *
//     sqrt(sigma2 + x[j]^2)); IQ4_NL/IQ4_XS pass it as quant_weights; the
//     IQ1/IQ2/IQ3 formats weight their lattice searches with it; Q8_0,
//     TQ1_0 and TQ2_0 ignore it, as ggml does.
//
// Dequantization is the type's dequantize_row_<type>.
//
// # Using it
//
// Format.Quantize(dst, src) encodes whole blocks; rows never share a block
// and, without an importance matrix, every format's result is independent of
// where rows end. Format.QuantizeWeighted(dst, src, imatrix) takes the
// importance vector of one tensor (one value per column, what llama-quantize
// passes to ggml_quantize_chunk; for a 3-D expert tensor, the slice of that
// expert): len(imatrix) is the row length and src holds whole rows. The row
// length matters there: Q4_0/Q4_1/Q5_0/Q5_1 compute sigma2 over the whole
// row, and every format indexes the importance vector by column. A nil
// imatrix is ggml's NULL. All kernels are safe for concurrent use on
// distinct buffers and allocate nothing per call; the lattices of the IQ
// formats (grid points, the map of every level vector to its grid point or
// neighbour list, the neighbour lists) are computed from the transcribed
// grids the first time a format needs them, once per process (sync.Once),
// as ggml_quantize_init does.
//
// # Hostile input
//
// ggml does not check importance values: zero, negative, NaN and Inf
// weights go into its arithmetic as they are, and so they do here, giving
// ggml's bytes (the golden set includes importance vectors with zeros).
// For some inputs ggml's IQ1/IQ2/IQ3 quantizers stop the process
// (GGML_ASSERT, GGML_ABORT): when no lattice neighbour has a finite weighted
// distance, when a scale is NaN, or when a NaN scale leaves levels off the
// grid. That needs non-finite values or weights, or values so large that
// their squares overflow. These kernels never panic on any input; at those
// points they take, respectively, the first neighbour, a scale of 0, and the
// first neighbour of the level vector (grid point 0 outside the map), and
// document it at each place. One bit stays out of reach: when a NaN
// reaches a stored f16 scale (NaN input values, or Inf - Inf and 0 * Inf
// once float32 sums overflow), its sign can differ from ggml's, because
// with two NaN operands x86 returns the first one and which operand comes
// first is the compiler's choice, and because arm64 creates positive NaNs
// where x86 creates negative ones. ggml's block is meaningless there too.
// During development these kernels were also compared with ggml's own C
// quantizers (ggml 0.20.1 built with the golden build's gcc 12.2.0) on
// thousands of adversarial rows and importance vectors: every case ggml
// encodes gave the same bytes, apart from that NaN sign.
//
// # Bit-exactness
//
// Rules followed throughout (see testdata/ggml-golden/README.md): all
// arithmetic is float32 in the C evaluation order; sums are accumulated
// sequentially; every product that feeds an addition or subtraction is
// written float32(a*b) so that the Go compiler cannot fuse it into an FMA
// (it does on arm64 and with GOAMD64=v3), also across statements and into
// the add inside nearestInt; C's float-to-integer conversions are emulated
// as x86-64 performs them (cvttss2si, then truncation to the destination
// width; lroundf as glibc does), so that even NaN/Inf edge cases give the x86
// bytes; C's MAX macro, uint8/int8 wrap-around and glibc's qsort (a stable
// merge sort, which the IQ1 quantizers rely on for equal values) are
// reproduced as they behave.
//
// The plain reference kernels (ref_*.go, legacy.go, ref_weighted_*.go,
// ref_iq*.go, ref_tq.go) follow the C code statement by statement and are
// the specification. Faster kernels (fast_*.go: fixed-size arrays, repeated
// search steps skipped, prefix sums reused, a branch-free table search,
// tabulated lattice distances, shared split-search accumulators) are what
// Format.Quantize and Format.QuantizeWeighted run where they exist; they
// perform the same float32 operations on every value that decides the
// output, and the tests check them against the reference bit for bit on odd
// block counts and offsets, on special values, on adversarial importance
// vectors, and under fuzzing. The grid tables (table_*.go) are format constants
// transcribed from ggml-common.h and ggml-quants.c with their citation.
//
// # Vector kernels
//
// On amd64 CPUs with AVX2 and F16C the Format table runs AVX2 kernels
// (*_amd64.s, driven by lanes.go) for Q4_0, Q8_0, Q2_K … Q6_K, IQ4_NL and
// IQ4_XS, and QuantizeWeighted for the searches of Q2_K … Q6_K, IQ4_NL and
// IQ4_XS with an importance matrix (the same lane kernels, given the
// weights); every other CPU (arm64 included), and amd64 builds with -tags
// purego, run the plain Go kernels. The searches run one block per vector
// lane: the 8 sub-blocks of a Q4_K/Q5_K/IQ4_XS super-block (or 8
// consecutive IQ4_NL blocks), the 16 of a Q2_K/Q3_K/Q6_K super-block in two
// vectors. The values are transposed so that lane j of row i holds value i
// of block j; each lane then performs exactly the float32 operations of the
// scalar code for its block, in the same order (sums accumulate element 0,
// 1, 2, …; VMULPS then VADDPS, never FMA), conditions become per-lane masks
// and blends, and a loop that the scalar code leaves early runs until every
// lane would have left it (a step that changes nothing in the lanes that
// already stopped). Q4_0/Q8_0 run one block per iteration, taking the
// largest magnitude by a vector maximum (its order does not matter on
// finite values) and emulating roundf exactly. A block holding a NaN or Inf
// goes to the plain kernel, whose NaN propagation the lanes do not copy, and
// so does a weighted block with a NaN or Inf weight (or, for the searches
// whose error sums stop early, a negative one).
// vector_test.go checks every vector kernel against the plain kernel and
// the reference on adversarial blocks (lanes taking different branches,
// all-equal and all-zero sub-blocks, subnormals, nearest_int ties, sums that
// overflow, random finite bit patterns, exact cancellations) and the struct
// offsets the assembly uses; the goldens and the cross-build digest run on
// the vector kernels wherever the CPU has them.
//
// # Testing
//
// golden_test.go walks testdata/ggml-golden/manifest.json (156 cases
// without an importance matrix) and golden_imatrix_test.go
// testdata/ggml-golden-imatrix/manifest.json (252 cases: every format with
// lognormal, uniform and sparse importance vectors, and the IQ/TQ formats
// without one); quantized bytes are compared byte for byte, dequantized
// floats bit for bit. tables_test.go checks every transcribed table against
// the sha256 of its C source and the two stored forms of each lattice
// against each other, and the computed neighbour lists against a literal
// port of ggml's init loop. digest_test.go hashes every kernel's output on a
// set of adversarial finite inputs and compares it with the value of the
// GOAMD64=v1 build, extending the no-fusion check beyond the goldens.
// scripts/test-kernels-cross.sh repeats the tests with GOAMD64=v1, v3, v3
// with -tags purego (the plain kernels) and on arm64 under qemu, where Go
// would fuse a*b+c if a kernel let it.
// fuzz_test.go and fuzz_imatrix_test.go feed arbitrary values and importance
// vectors to every path.
package kquant
