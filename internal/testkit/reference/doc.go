// Package reference is an independent, slow, plain-Go float32 implementation of the Qwen model family and of the
// Hugging Face byte-level BPE tokenizer, used only as a test oracle.
//
// The forward pass is written from the Hugging Face transformers modeling code (modeling_qwen2.py,
// modeling_qwen3.py, modeling_qwen3_moe.py, modeling_qwen3_5.py, modeling_qwen3_5_moe.py), never from GGUF or
// llama.cpp, so that the converter's tensor transforms (norm +1, -exp(A_log), V-head reorder, conv squeeze, …) are
// checked against a computation that does not share them. Supported architectures: Qwen2ForCausalLM,
// Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen3_5ForCausalLM / Qwen3_5ForConditionalGeneration (text part) and
// Qwen3_5Moe{ForCausalLM,ForConditionalGeneration} (text part; MTP and vision tensors are ignored). Weights are
// read once into memory: the package is meant for tiny checkpoints only.
//
//	m, err := reference.Load(dir)              // config.json + safetensors (single or sharded)
//	logits := m.Forward(tokens)                // [len(tokens)][vocab_size]
//	next := m.Greedy(prompt, 16)               // 16 argmax tokens
//	s := m.NewSession(); l := s.Step(token)    // incremental decoding, same numbers as Forward
//
// Numerics: float32 weights and activations with every sum accumulated in float64 and rounded once, which is at
// least as accurate as torch's float32 CPU kernels. Against upstream llama.cpp on phonellm's F32 GGUFs of the
// tinymodel presets the logits agree to ~3e-5 with llama.cpp's KV cache in F32 (TestMatchesLlamaCpp); its
// default F16 KV cache (and the f16 Q·K and softmax·V products that come with it) alone moves the logits of
// these models by up to ~1.5e-2.
//
// LoRA adapters (PEFT directories) are applied at run time without merging: LoadWithAdapters / LoadWith.
// Every targeted linear computes W x + b + Σ s·B(A x) with PEFT's scaling s = lora_alpha/r (alpha_pattern, or
// lora_alpha/√r with use_rslora) times Adapter.Scale; DoRA layers compute b + (m/‖W + s·BA‖_row)(W x + s·B(A x));
// embedding LoRAs add s·B·A[:, id] to the embedding row; modules_to_save tensors (embed_tokens, lm_head) replace
// the base tensors. A tied lm_head follows the embedding as it does after merge_and_unload, so a run-time
// adapter computes what the merged checkpoint computes.
//
// The tokenizer implements the tokenizer.json semantics of the Hugging Face tokenizers library for the Qwen
// byte-level BPE: added tokens matched first (leftmost-longest, special tokens optional), NFC normalization, the
// Qwen2 / Qwen3.5 Split regexes (hand-written scanners equivalent to the regexes, which use a lookahead Go's
// regexp lacks), ByteLevel mapping, BPE merges by rank, and ByteLevel decoding. llama.cpp does not apply the NFC
// normalizer, so for non-NFC input the two legitimately differ.
package reference
