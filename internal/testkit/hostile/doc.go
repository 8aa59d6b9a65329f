// Package hostile generates a corpus of hostile model files for tests: GGUF files and Hugging Face checkpoint
// folders derived from tiny generated models (internal/tinymodel, converted and quantized by phonellm itself)
// by deterministic mutators, each labelled with what a correct phonellm does with it in every command.
//
// GGUF mutators damage the container (magic, version, counts, truncation, string and array lengths, value
// types, duplicate and empty keys, alignment), the hyper-parameters (zero, one, off by one, doubled, huge,
// negative, NaN, infinite, mistyped, missing; Qwen3.5's rotary sections, layer pattern and MTP layers), the
// tensor infos (transposed, off by one, zero and overflowing dimensions, unsupported and removed types,
// offsets, missing, extra and duplicate tensors, names that are too long, not UTF-8 or hold control
// characters), tensor data (NaN and infinities in weights and in norms), chat templates (syntax errors,
// loops, recursion, explosive output) and vocabularies (larger than the embedding, empty strings, mismatched
// arrays, special token ids out of range). Checkpoint mutators damage config.json, tokenizer.json and the
// safetensors files, and put FIFOs, folders and devices where files are expected.
//
// [Corpus] returns every mutant (several hundred) and [Sample] a spread subset for quick runs. The corpus test
// in this package runs them through the phonellm binary in child processes; [WriteAll] writes them out for
// inspection by hand.
package hostile
