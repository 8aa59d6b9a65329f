// Package checkpoint opens a Hugging Face model directory (config.json, safetensors weights, tokenizer files)
// as a [pipeline.TensorSource], and describes it for `phonellm inspect`. It is the one safetensors →
// TensorSource adapter: merge, convert, quantize and inspect read checkpoints through it, in rows as
// pipeline.TensorInfo defines them (the last dimension).
package checkpoint
