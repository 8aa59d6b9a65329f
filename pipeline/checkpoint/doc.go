// Package checkpoint opens a Hugging Face model directory (config.json, safetensors weights, tokenizer files)
// as a [pipeline.TensorSource], and describes it for `phonellm inspect`. It is the public face of the
// safetensors reader for packages outside pipeline/.
package checkpoint
