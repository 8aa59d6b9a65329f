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
// rank. Several adapters are applied in order, and every merged value is rounded once, to nearest even, to the
// base tensor's dtype. A BF16 or F16 tensor that only LoRA updates change (the common case: every linear layer
// of a 16-bit checkpoint) accumulates in float32, as
//
//	x[j] = float32(u[k]·v[k,j]) + x[j]    k = 0 … R-1 in order, u = float32(weight·s·B), v = A, x₀ = W
//
// over all R rank components of all its adapters, and the float32 sum is rounded to the dtype. Its error
// before that rounding is at most (R+3)·2⁻²⁴·(|W| + Σ|s·B·A|), so it equals the exactly rounded result except
// for values within that distance of a rounding boundary (a few in 10⁵ in the tests), which may round to the
// neighbour instead. Everything else (F32 tensors, DoRA, LoRA biases, saved tensors, and chains of them) is
// computed in float64 and rounded once. PEFT itself rounds to the weight dtype after each step, so it can
// differ from either result by one ulp in rare cases.
//
// Speed: the float32 update has a plain-Go specification (lowRank32Go: a rounded multiply, then a rounded
// add, never fused) and an AVX2 kernel on amd64 that performs the same operations in the same order, four
// rows by sixteen columns at a time; the float64 update x[j] = fma(u[k], v[k,j], x[j]) has lowRankGo and its
// AVX2/FMA kernels. Each pair gives identical bits (tests compare them), as do the bf16 encode/decode pairs.
// Unchanged tensors are copied byte for byte.
//
// [Run] reads each base safetensors file once where it can: the file is mapped, the provenance hash walks it
// in order while the merge decodes and copies tensors from the same pages (see baseMaps), and the output is
// written with direct I/O (safetensors.WriterOptions.Direct), its sha256 computed alongside. One pipeline
// runs through every tensor of every shard (computing, copying, hashing and writing overlap) on
// Options.Threads workers; the package never changes process-wide settings such as GOMAXPROCS. With
// Options.HashCache a base file
// whose identity (path, size, times, inode, device; package hashcache) is unchanged since an earlier merge
// keeps its recorded sha256 and is not hashed again.
//
// [Wrap] exposes the merged model as a [pipeline.TensorSource] so convert/quantize can merge on the fly;
// [Run] writes a merged checkpoint directory atomically. Every adapter tensor must land on a base tensor with
// matching shapes, and an adapter that changes nothing is an error: nothing is ever skipped silently.
// A tied-embedding base (no lm_head.weight) whose head or embedding the adapter changes is untied.
package merge
