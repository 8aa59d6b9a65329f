// Package safetensors reads and writes the Hugging Face safetensors format
// (https://github.com/huggingface/safetensors, "Format" section of its README):
// an 8-byte little-endian header length N, N bytes of UTF-8 JSON describing
// every tensor (dtype, shape, data_offsets relative to the data section) plus
// an optional "__metadata__" string map, then the data section.
//
// Every byte of a file is treated as hostile: the header length is capped
// (MaxHeaderSize), every shape product is overflow-checked, every entry must
// lie inside the data section, entries may neither overlap nor leave holes
// (the upstream rule: the data section is indexed completely), and the byte
// count implied by dtype and shape must equal the span of data_offsets.
// Problems with the bytes are *FormatError; valid files whose dtype this
// package cannot turn into float32 give *UnsupportedError. Both name the file
// and, where there is one, the tensor.
//
// Reading goes through io.ReaderAt (File), optionally backed by a read-only
// mmap (OpenMmap). Checkpoint opens a Hugging Face model directory, single
// file or sharded through model.safetensors.index.json, and reads tensors or
// element ranges of them as float32 (F32, F16 and BF16 are converted with package
// half). Writer plans every tensor first, then streams bodies in the planned
// order into a temporary file that Commit fsyncs and renames into place.
//
// File and Checkpoint are safe for concurrent reads (each read uses its own
// pread or mmap copy); a Writer is used by one goroutine.
//
// The package knows nothing about models: names are opaque strings.
package safetensors
