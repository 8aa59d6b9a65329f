// Package gguf reads and writes GGUF v3 files, the model container of llama.cpp.
//
// It knows the format only: header, key/value metadata of every value type (including nested arrays), tensor
// infos, alignment and the ggml type table (block size and bytes per block). It knows nothing about model
// architectures; see package convert for that.
//
// # Reading
//
// [Open] parses the header and tensor infos through an [io.ReaderAt] and checks them against the file size
// (every count and length is bounded by the bytes that remain, tensor data must lie inside the file and follow
// the running-offset rule llama.cpp enforces). Tensor bytes are read on demand with [File.TensorReader].
//
// # Writing
//
// [Writer] is two-phase: first plan the metadata and tensor infos (AddKV, AddTensor), then [Writer.WriteHeader]
// fixes the aligned offsets and the tensor bodies are streamed in plan order with [Writer.WriteTensor]. The output
// is deterministic: the same plan and bodies give the same bytes.
//
// Format reference: ggml/include/gguf.h and ggml/src/gguf.cpp (llama.cpp 34af94cd); see
// shared/reference/gguf-quant-convert.md §1.
package gguf
