// Package merge reads PEFT LoRA adapters (adapter_config.json + adapter_model.safetensors) and merges them into
// a 16-bit Hugging Face base checkpoint, streaming row block by row block.
//
// The math follows PEFT's merge_and_unload (peft/tuners/lora/layer.py Linear.get_delta_weight and
// Embedding.get_delta_weight, variants.py DoraLinearVariant / DoraEmbeddingVariant, dora.py get_weight_norm):
//
//	s        = weight · lora_alpha / r            (use_rslora: weight · lora_alpha / √r)
//	Linear   W' = W + s·(B·A)                      (fan_in_fan_out, Conv1D layout [in,out]: W' = W + s·(B·A)ᵀ)
//	Embedding W' = W + s·(B·A)ᵀ                    (lora_embedding_A [r,vocab], lora_embedding_B [dim,r])
//	DoRA     V = W + ΔW;  W' = (m / ‖V‖)·V          norm per output row of a Linear ([out,in]: over in),
//	                                                per embedding column of an Embedding (over the vocabulary)
//	bias     b' = b + s·lora_B.bias                 (lora_bias)
//	modules_to_save, bias="all"/"lora_only", saved base layers: the saved tensor replaces the base tensor.
//
// r and alpha per module come from rank_pattern / alpha_pattern with PEFT's get_pattern_key rule: the first key,
// in the JSON object's order, for which re.match(`(.*\.)?(key)$`, module) matches; r must equal the factors'
// rank. Several adapters are applied in order. Everything is computed in float64 and rounded once, to nearest
// even, to the base tensor's dtype (PEFT itself rounds to the weight dtype after each step, so it can differ
// from this exactly-rounded result by one ulp in rare cases).
//
// Speed: the rank-r update x[j] = fma(u[k], v[k,j], x[j]) (k in order) has a plain-Go specification
// (lowRankGo) and AVX2/FMA kernels on amd64 that perform the same fused operations in the same order, four rows
// by eight columns at a time, so their results are identical bit for bit (tests compare them); bf16
// decoding/rounding has the same pair. Unchanged tensors are copied byte for byte.
//
// [Wrap] exposes the merged model as a [pipeline.TensorSource] so convert/quantize can merge on the fly;
// [Run] writes a merged checkpoint directory atomically. Every adapter tensor must land on a base tensor with
// matching shapes, and an adapter that changes nothing is an error: nothing is ever skipped silently.
// A tied-embedding base (no lm_head.weight) whose head or embedding the adapter changes is untied.
package merge
