// Package plan decides what llama-quantize would make of each tensor
// (llama.cpp commit 34af94cd9ab277632e27caeec2d41de2fd091b31). It is a leaf:
// it reads tensor names, shapes and metadata only, so fit and eval can use it
// without the converter or the kernels.
//
// Make is a pure function from (architecture, a few hyperparameters, the
// tensor list, a file type such as Q4_K_M, user overrides) to a Plan: the
// tensors in the order the output file lists them, each with its input type,
// its output type, its size and, where it applies, why a type was replaced.
// It restates src/llama-quant.cpp (llama_tensor_get_type,
// llama_tensor_get_type_impl, tensor_type_fallback,
// tensor_allows_quantization) for the Qwen architectures phonellm writes
// (qwen2, qwen3, qwen3moe, qwen35, qwen35moe) and the file types of
// gguf.FileTypes:
//
//   - Only tensors with two or more dimensions whose names end in "weight"
//     are converted; norms, ssm_conv1d, the MoE router ffn_gate_inp and the
//     other upstream exclusions keep their input type.
//   - The output tensor, and token_embd when there is no output.weight (tied
//     embeddings), get Q6_K (Q8_0 in a Q8_0 file, or when the row length is
//     not a multiple of the file's base block size).
//   - attn_v and the Qwen3.5 gated-delta-net attn_qkv share one counter for
//     the attn_v rules; ffn_down follows the use_more_bits layer pattern for
//     Q4_K_M and Q5_K_M (the layer comes from the tensor name when the model
//     has experts, from a running counter otherwise).
//   - A row length that is not a multiple of the chosen type's block size
//     falls back: Q2_K/Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0,
//     IQ4_XS to IQ4_NL, and to F16 when even that does not fit.
//   - Overrides mirror --pure, --output-tensor-type, --token-embedding-type
//     and --tensor-type REGEX=TYPE (first matching rule wins); HasImatrix
//     is llama-quantize's has_imatrix, which changes the IQ3_XXS, IQ4_NL,
//     IQ4_XS, Q4_0 and Q5_0 rules.
//   - The low-bit file types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M,
//     IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M, Q2_K_S, TQ1_0, TQ2_0) follow their own
//     branch of the rules (Q2_K/IQ3_S attn_v and first ffn_down, Q5_K output).
//     Entry.NeedsImatrix marks the tensors llama-quantize will not write
//     without an importance matrix (tensor_requires_imatrix); RequiresImatrix
//     names the file types it therefore refuses without one.
//
// The output file carries general.quantization_version = 2 and
// general.file_type = the llama_ftype, appended after all input keys
// (Plan.MetadataKVs).
package plan
