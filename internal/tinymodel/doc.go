// Package tinymodel writes tiny, deterministic, random-weight Hugging Face
// checkpoints of the Qwen family: safetensors
// weights (single file or sharded with model.safetensors.index.json),
// config.json and generation_config.json shaped like the real checkpoints',
// and a real-format byte-level BPE tokenizer.json (vocabulary and merges
// learned deterministically from a small built-in multilingual corpus) with
// tokenizer_config.json and Qwen's ChatML chat template.
//
// It is production code, not test support: `phonellm demo` generates its
// embedded demo model and adapter with it (nothing is downloaded), and
// `phonellm bench quantize` its input (package benchdata); the test suites
// use the same generator. Test-only helpers live under internal/testkit.
//
// Generate(dir, spec) writes one checkpoint; Presets lists the shapes used
// by the test suites (qwen2 tied and untied, qwen3, qwen3moe, qwen35,
// qwen35moe), all with hidden size 256 so k-quants apply without fallbacks.
// GenerateAdapter writes a PEFT LoRA adapter (adapter_config.json +
// adapter_model.safetensors) for a generated base model. Spec.TensorValues
// recomputes any tensor's values without reading files, for test oracles.
// Spec.OutlierChannels gives the activations a few outlier channels, as
// trained LLMs have (large RMSNorm gains and heavy-tailed embedding values
// in the same hidden dimensions), for quantization-quality benchmarks.
//
// Weights are F32 (exact tests) or BF16; like the released Qwen3.5 BF16
// checkpoints, Qwen3.5's linear_attn.A_log and linear_attn.norm.weight stay
// F32, so BF16 Qwen3.5 checkpoints have mixed dtypes. The safetensors files
// are written by a small writer of this package's own (not
// pipeline/safetensors, on purpose), which makes them an independent
// cross-check for that package's reader.
//
// Determinism: every tensor is drawn from its own stream of a splitmix64
// generator seeded from (Spec.Seed, tensor name), and normal-ish values are
// made from integer arithmetic only (a sum of four 16-bit uniforms), so the
// same Spec gives the same bytes on every platform and Go version, and a
// tensor's values do not depend on which other tensors exist. Weights are
// streamed to disk tensor by tensor in bounded chunks, so a ~1 GB
// benchmark-sized checkpoint never sits in memory.
package tinymodel
