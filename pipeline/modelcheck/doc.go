// Package modelcheck decides whether a GGUF model is one phonellm can load: the project's own validation that
// every model passes before it reaches the cgo engine (ggml), and that convert and quantize run on the file they
// are about to write.
//
// The GGUF reader (package gguf) already guarantees a well-formed container: counts, string and array lengths,
// types, shapes and data offsets that fit the file. This package checks what the container cannot know, for
// the architectures phonellm converts and serves (qwen2, qwen3, qwen3moe, qwen35, qwen35moe):
//
//   - hyper-parameters have the GGUF type llama.cpp and Ollama's engine read them with (both read a mistyped
//     key as absent, and Ollama's engine then divides by zero or builds zero-sized tensors), are present where
//     the engine has no default, finite and in range (rope.freq_base NaN or ≤ 0, a negative RMS epsilon,
//     expert counts, layer counts above llama.cpp's limits), and agree with each other (head_count a multiple of
//     head_count_kv, key and value head sizes equal, rope dimensions even and at most the head size, Qwen3.5's
//     ssm.* sizes and its recurrent/full-attention layer pattern, the multi-token-prediction layers);
//   - every tensor the engine builds its graph from exists, has exactly the shape those hyper-parameters imply
//     (a transposed ffn_up or a head count that does not match attn_q reaches a GGML_ASSERT in ggml_mul_mat or
//     ggml_reshape, which aborts the process) and a data type ggml's CPU backend implements for its operation,
//     and no tensor is unknown (Ollama's loader indexes its layer table with the first number in a name);
//   - the vocabulary fits the embedding (a token id past the embedding rows makes ggml_get_rows assert) and its
//     arrays agree in length, and the special token ids lie inside it.
//
// [CheckFile] also reads the small tensors (norms, biases, the recurrent gates) and refuses NaN or infinite
// values in them; the large weight tensors are not read (the serving side stops a request whose logits are not
// finite).
//
// The rules follow llama.cpp's loader (src/models/qwen*.cpp, llama-model.cpp load_hparams, gguf-py's writer
// types) and Ollama v0.24.0's model/models/qwen2, qwen3 and qwen3next with its ggml backend
// (ml/backend/ggml/ggml.go): a file that passes loads in both. A failure is an *Error (an input error, exit 3)
// naming the key or tensor and what was expected.
package modelcheck
