// Package quantize turns a float GGUF model into a quantized one the way
// llama.cpp's llama-quantize does (llama.cpp commit
// 34af94cd9ab277632e27caeec2d41de2fd091b31). The block kernels live in the
// kquant subpackage; package plan decides what each
// tensor becomes; this package streams the tensors through them.
//
// With an importance matrix (Options.Imatrix, package imatrix) every quantized tensor's per-column importance
// values go to the weighted kernels (an expert stack's rows expert by expert, each with its own slice), the
// plan's imatrix rules apply, and the output records quantize.imatrix.file, .dataset, .entries_count and
// .chunks_count as llama-quantize does (plus phonellm.quantize.imatrix.sha256). The matrix is matched
// against the plan before anything is written: an entry of the wrong size, or a missing one where the type
// needs it, is an input error naming the tensor; other missing entries are a warning, as in llama-quantize.
// The importance values are read from the file one tensor at a time, so memory stays that of a plain run.
// ReadProvenance reads those keys, and an automatic mix's (package auto), back from a GGUF.
package quantize
