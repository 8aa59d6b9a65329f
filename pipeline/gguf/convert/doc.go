// Package convert turns a Hugging Face checkpoint directory of a Qwen model into a GGUF file, the way upstream
// llama.cpp's convert_hf_to_gguf.py (build b10018; model classes in conversion/qwen.py and conversion/base.py)
// writes it: the same architecture name, KV keys and order, tensor names, transforms (zero-centred norm +1,
// A_log → -exp(A_log), conv1d squeeze, V-head reorder, MoE expert stacking), per-tensor output types and tensor
// order. Supported checkpoints: Qwen2ForCausalLM (qwen2), Qwen3ForCausalLM (qwen3), Qwen3MoeForCausalLM
// (qwen3moe), Qwen3_5ForConditionalGeneration / Qwen3_5ForCausalLM (qwen35, text part) and the Qwen3.5 MoE
// classes (qwen35moe). Each architecture lives in its own file; tokenizer.go turns tokenizer.json into the gpt2
// BPE vocabulary keys.
//
// [Load] reads only config.json, the tokenizer files and the safetensors headers, and returns a [Model]: the
// KVs plus a plan of output tensors, each readable row block by row block with the transforms applied, so the
// quantizer can convert on the fly. [Run] streams such a model into an F32, F16 or BF16 GGUF, atomically.
//
// Deliberate differences from upstream: the MTP block of Qwen3.5 is dropped unless Options.KeepMTP is set
// (upstream keeps it unless --no-mtp); norm +1 and -exp are always computed in float32 (upstream computes them
// in float16 for float16 checkpoints); general.* metadata is limited to general.type and general.name.
package convert
