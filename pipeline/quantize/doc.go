// Package quantize turns a float GGUF model into a quantized one the way
// llama.cpp's llama-quantize does (llama.cpp commit
// 34af94cd9ab277632e27caeec2d41de2fd091b31). The block kernels live in the
// kquant subpackage; package plan decides what each
// tensor becomes; this package streams the tensors through them.
package quantize
