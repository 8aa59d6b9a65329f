// Package goengine is the default runtime.Engine: Ollama's Go inference
// engine (github.com/ollama/ollama v0.24.0, packages model, kvcache,
// tokenizer and the cgo ml/backend/ggml) driven directly, without Ollama's
// runner or its llama.cpp bindings. It runs qwen2, qwen3(moe) and
// qwen35(moe) GGUFs.
//
// One goroutine owns the model: it batches prompt chunks and decode tokens of
// all active slots into one forward pass (continuous batching), samples with
// runtime.Sampler and streams text through runtime.TextStream. A slot keeps
// the tokens whose keys and values are in its KV cache; a new prompt goes to
// the free slot sharing its longest prefix and only the rest is evaluated.
//
// Observe evaluates tokens while reporting the input of every matrix product
// with a model weight (package internal/observe: ggml's scheduler evaluation
// callback), which the imatrix stage collects its statistics from.
//
// Building needs cgo and a C/C++ compiler only (no extra headers or apt
// packages); set CGO_CFLAGS/CGO_CXXFLAGS="-O3 -march=x86-64-v3" on amd64 for
// AVX2 kernels, identically on every build so the Go build cache stays warm.
package goengine
