// Package repack moves the quantized matrix weights of a loaded Ollama ggml
// model into ggml-cpu's interleaved ("repacked") layouts, so prompt
// processing runs ggml's GEMM kernels for them (Q4_0 8×8, Q4_K 8×8 and
// IQ4_NL 8×8 on AVX2) instead of one vector dot product per row pair, and
// hands Q6_K matrices (which ggml cannot repack; Q4_K_M files hold a third
// to half of attn_v and ffn_down, and the output, in Q6_K) to a GEMM of its
// own (q6k.cpp), which unpacks each weight block once for four activation
// rows and gives the very bits of ggml's vec_dot.
//
// Upstream llama.cpp does this by default (GGML_CPU_REPACK): weights are
// allocated in the CPU_REPACK buffer type and rearranged when they are
// uploaded. Ollama v0.24.0 compiles the repack code but leaves it out of
// ggml-cpu's list of extra buffer types and loads weights in chunks, which a
// repack buffer cannot take. This package closes that gap without changing
// Ollama:
//
//   - At package initialisation (once per process, before any graph runs)
//     the CPU_REPACK buffer type joins ggml-cpu's extra buffer types, and its
//     extra_buffer_type is wrapped to accept the Q6_K tensors tagged here.
//     ggml-cpu then routes a MUL_MAT whose weight lives in a repack buffer to
//     the repack kernels or the Q6_K kernel; every other op is unaffected.
//   - Model walks the backend's weight tensors after Backend.Load and, for
//     each 2-D matrix that only feeds MUL_MAT (attention, feed-forward and
//     output projections) in a type and shape the repack code accepts,
//     rearranges its bytes in place (Q6_K: leaves them as they are) and
//     marks the tensor as living in a repack buffer. The memory stays where
//     Ollama allocated it: no second copy of the weights, and Backend.Close
//     frees it as before.
//
// The ggml tensor layout is taken from the cgo type Ollama's package was
// built with (package ggmlabi: reflection over its struct fields), so it
// cannot drift from the header. Anything unexpected (a field missing, a pointer-sized field that is
// not) disables repacking with an error instead of guessing. Two internal
// ggml layouts are mirrored from Ollama v0.24.0's sources in q6k.cpp (the
// buffer type's context slot, checked at run time against the public
// ggml_backend_buft_get_device, and ggml_compute_params); upgrading Ollama
// means re-reading them.
package repack
