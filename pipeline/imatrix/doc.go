// Package imatrix collects, stores and loads importance matrices the way llama.cpp's llama-imatrix and
// llama-quantize do (llama.cpp commit 34af94cd9ab277632e27caeec2d41de2fd091b31: tools/imatrix/imatrix.cpp,
// common/imatrix-loader.cpp, tools/quantize/quantize.cpp, src/llama-quant.cpp).
//
// An importance matrix holds, for every weight matrix W of a model that multiplies activations (W·x), the sum
// over the calibration tokens of x_j² for every input column j ("in_sum2"), and the number of tokens that went
// through it ("counts"). A 3-D expert tensor has one such row and one count per expert. llama-quantize divides
// the sums by the count and hands the resulting per-column importance to the weighted quantizers
// (ggml_quantize_chunk's imatrix argument).
//
// The package has four parts:
//
//   - Formats ([Matrix], [Read], [Matrix.WriteGGUF], [Matrix.WriteDat]): llama.cpp's GGUF imatrix
//     (general.type = "imatrix", imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size, and per weight NAME
//     the F32 tensors NAME.in_sum2 [n_per_row, n_mat] and NAME.counts [1, n_mat]) and the legacy .dat format
//     (int32 entry count; per entry the name, ncall and the sums stored as mean × ncall; then the chunk count and
//     the dataset name). Both readers bound every length by the bytes that remain.
//   - Loading for quantization ([Load], [Importance]): the per-column values llama-quantize computes —
//     in_sum2 / count per matrix, or 1 where a matrix saw no token; for a legacy file sums / ncall — with the
//     checks llama-quantize applies (metadata present, values finite) plus the ones it does not (negative
//     values), each failing with a one-line error that names the tensor.
//   - Collection ([Collector]): accumulates the statistics from observed matrix products ([Matmul]) with
//     llama-imatrix's rules: a MUL_MAT counts when its input has at least 16 token rows and is F32, a
//     MUL_MAT_ID (experts) always counts, per expert; dense tensors keep one count. Sums are kept in float64
//     (llama-imatrix uses float32; the stored values are rounded to float32 either way).
//   - The stage ([Run]): tokenizes the calibration data (plain text, or JSONL prompts rendered through the
//     model's chat template), cuts the tokens into chunks of ChunkSize, evaluates each chunk from an empty
//     context through a [Model] (the CLI passes the built-in engine) and writes the matrix atomically, with
//     a partial file every few chunks that --resume continues from.
package imatrix
