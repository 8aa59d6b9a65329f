// Package fit answers "will this GGUF run on that phone?" from the model's metadata and tensor infos only.
//
// [Estimate] (or [EstimateShape] for a [Shape] built by [ShapeFromConfig] from a config.json) predicts the
// resident memory of one process serving the model, by part ([Breakdown]):
//
//   - Weights: the sum of the tensor data sizes, all experts of a MoE included (the runtime maps or loads every
//     expert; estimating MoE from active parameters is the llmfit#230 error). llama.cpp mmaps the file (the
//     pages count in RSS once touched, and a full request touches them all); the goengine reads it into
//     buffers.
//   - KVCache: Ctx × Parallel cells, padded to 256, × (K + V bytes per cell) summed over the layers that have
//     KV heads. For qwen35/qwen35moe only the full-attention layers count: the per-layer head_count_kv array
//     (0 on recurrent layers, Ollama layout) or else full_attention_interval (layer i is recurrent iff
//     (i+1) % interval != 0, llama.cpp src/models/qwen35.cpp). Counting every layer is the 4× error of
//     gguf-parser-go#28. K/V types f16, q8_0 (34 bytes per 32), q4_0, f32.
//   - Recurrent: per slot and linear-attention layer, F32 conv state (conv_kernel−1) × (inner + 2·groups·state)
//     and delta-net state head_v_dim × state_size per value head (ollama model/models/qwen3next/model.go:
//     convDim, convChannels, deltaStateSize; llama.cpp n_embd_r/n_embd_s).
//   - Checkpoints: saved recurrent states for prefix reuse. The goengine (ollama kvcache/recurrent.go,
//     DefaultCheckpointCount = 24) reserves all 24 per slot at load, so they are resident; llama-server keeps up
//     to --ctx-checkpoints per slot (default 8 in common/common.h of the builds read, 32 in newer ones; each is
//     one recurrent state). The phone runtime plan passes --ctx-checkpoints 2 (one at the shared system-prompt
//     prefix, one at the end of the last prompt), which is the llama.cpp default here.
//   - Compute: the widest graph phase of the largest batch and the CPU work buffer (see compute.go), checked
//     against llama.cpp's measured compute buffers and the goengine's peak RSS.
//   - Output: one F32 logits row per slot.
//   - Overhead: the process besides the model; see the constants below.
//
// [Check] compares a Breakdown with a phone [Profile]: fits / tight / no and the headroom. [MaxContext] and
// [MaxParallel] search the largest context and slot count that fit. [Suggest] proposes, for a model that does
// not fit, the best smaller file type from package quantize's per-tensor type plans (Plan.OutBytes, no tensor is
// re-quantized), else the largest smaller known model (Qwen3.5 0.8B/4B/9B, [Known]). [Run] is the stage behind
// `phonellm fit`.
//
// # Engines
//
// Options.Engine selects whose allocation rules apply.
//
// LlamaCpp (default) is llama-server as the Acurast processor starts it on the phone: flash attention "auto"
// (on for the CPU backend); 200 MiB of overhead for llama.cpp plus the host app (the processor's Node runtime;
// an assumption, not measured) plus twice the GGUF metadata (the vocabulary is held parsed). The estimate
// assumes the phone runtime plan passes --cache-ram 0 (llama-server's prompt cache defaults to 8 GiB of host
// RAM, on its own more than any phone budget) and --ctx-checkpoints 2.
//
// GoEngine is phonellm serve (runtime/goengine, Ollama's engine): flash attention off (serve's default: the
// engine's flash-attention kernel is slower than its plain attention on the CPU, see GoEngineFlashAttention);
// 24 recurrent checkpoints per slot, all allocated and zeroed at load; tied embeddings loaded twice (ollama
// ml/backend/ggml creates output.weight as a copy of token_embd); per-pass attention masks (ubatch × KV cells
// float32) built in Go and copied into a ggml input buffer, counted as twice the mask plus 3 MiB of the pass's
// other memory, a total calibrated against serve (Breakdown.Inputs) — serve collects the Go heap and trims the C heap after every prompt
// pass, so masks never pile up however late the collector would have run on a busy machine; the scratch copy of
// the largest matrix the engine repacks, a load-time peak returned to the system when loading ends, counted where
// it exceeds a pass's buffers (Breakdown.Repack); 16 MiB of process overhead (the Go runtime, ggml and the engine
// without a model) plus 95 bytes per vocabulary entry and 95 per merge (Ollama's tokenizer and the engine's own
// BPE tables, live after loading: serve returns loading's garbage to the system; measured with Qwen3's 151,669
// tokens and 151,387 merges and with a generated 131,072-token vocabulary). Without flash attention the CPU work buffer holds an F16 copy of the
// scores (ubatch × KV cells × heads × 2 bytes) beside the F32 scores in the graph, in both engines.
// pipeline/fit/rsscheck serves generated models with the goengine and holds the estimate to ±10 % of the
// measured peak RSS at contexts 1024, 4096 and 8192, flash attention on and off.
//
// # Provenance of the phone profiles (profiles.json)
//
// Every profile number is a typical value for its RAM tier; the file's comments give the source of each column:
//
//   - usable_bytes: a fraction of marketed RAM fixed by two anchors. 8 GB → 4.0 GB (50 %): "about 4 GB usable
//     on an 8 GB S23" (pytorch/executorch#3599, cited in shared/reference/peers.md §4.4). 16 GB → 7.2 GB (45 %):
//     the field figure of the motivating deployment — Qwen3.5-9B Q4_K_M (~5.6 GB of weights) served on 16 GB
//     Acurast phones with under 1 GB to spare at a moderate context (issue 7; TestQwen35FieldFigures). 12 GB is
//     interpolated (47.5 %, 5.7 GB), 24 GB extrapolated at 45 % (10.8 GB), 6 GB at 45 % (2.7 GB).
//     Corroboration: off-grid-ai/OGAM#33 (a 60 % safe-memory threshold on a 12 GB phone that users find too
//     strict), AMEVA-Cluster (300 MB LMK guard band out of MemAvailable), alibaba/MNN#4435 (the maintainer cites
//     the per-process limit and the OOM killer on a 12 GB phone). Users override any of this with --profiles.
//   - mem_total_bytes: marketed RAM minus typical firmware carve-outs; acurast.md §5.1 notes a 16 GB phone may
//     report less than 16e9 [inference, not measured here].
//   - big_cores / bandwidth_gbps: typical SoC of the tier from vendor spec sheets [inference]; threads = big
//     cores per llama.cpp#21763 and whisper.cpp#1248 (peers.md §4.5, §5.4).
//   - minRamTotalBytes (Profile.MinRamTotalBytes) = 0.9 × marketed RAM × 1e9: Acurast's benchmarkFilters
//     vocabulary (acurast.md §5.1, pool ramTotal, bytes). 0.9 keeps every phone of the tier (MemTotal ≈ 0.93-0.97
//     × marketed) and excludes the tier below; the examples' 12000000000 for "≥ 12 GB" would drop 12 GB phones
//     that report less than 12e9.
package fit
