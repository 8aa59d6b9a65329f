// Package tinygguf writes tiny random-weight GGUF models (qwen2, qwen3, qwen35 in llama.cpp's converter
// layout) directly, without a Hugging Face checkpoint: the one tiny-GGUF builder of the test suite, used by
// the engine's tests and the llama.cpp oracle's tests. It writes through pipeline/gguf's writer.
//
// The weights are deterministic for a Spec (seed), small (64 wide, 2 to 4 layers) and random, so a model's
// answers are noise; what tests compare is two implementations on the same file. Checkpoint-shaped tiny models
// (safetensors, config.json, tokenizer.json) come from internal/tinymodel instead, and a converted tiny model
// from there through pipeline/gguf/convert.
package tinygguf
