package fit

// compute estimates the compute buffers: the graph intermediates alive at the widest point of the largest batch
// (ubatch tokens over all KV cells, as both engines reserve it at load) plus the CPU backend's work buffer.
// ggml's allocator reuses the memory of tensors no longer needed, so the graph's peak is the residual stream
// plus the widest single phase of one layer:
//
//   - attention: Q/K/V projections and, without flash attention, the scores n_kv × ubatch × heads (F32, soft-max in
//     place) and the mask n_kv × ubatch (F32) when it is a graph input (llama.cpp; the goengine builds it in a
//     buffer of its own, see Breakdown.Inputs); with flash attention an F16 mask (llama.cpp's input, the goengine's
//     cast of its F32 one) and the output;
//   - feed-forward: gate, up and their product, ubatch × n_ff (MoE: ubatch × used experts × expert n_ff, plus
//     router logits and the shared expert);
//   - gated delta net (Qwen3.5): the mixed qkv, the conv window, the chunked (64-token) scan matrices per value head
//     and the state in and out;
//   - output: the logits of one row per sequence (both engines reserve the graph with one output per sequence;
//     prompt tokens other than the last are dropped before the output projection).
//
// The work buffer (ggml-cpu's cplan work data, allocated apart from the graph and grown to the largest op) holds
// src1 of a matrix product converted to the weights' dot type: ubatch × the widest row in Q8 (1.0625 bytes per
// value) for the projections, and without flash attention the soft-maxed scores converted to F16 for the product
// with the F16 V cache, n_kv × ubatch × heads × 2 bytes (ggml-cpu ggml_graph_plan, GGML_OP_MUL_MAT), the larger
// of the two.
//
// Sources: llama.cpp src/llama-graph.cpp build_attn_mha, build_moe_ffn; ollama ml/backend/ggml Context.Reserve and
// ScaledDotProductAttention, kvcache/causal.go (mask over all cells); runtime/goengine reserve. Checked against
// measured llama.cpp compute buffers (gpustack/gguf-parser-go testdata/llamacpp_compute_buffer_sweep.json, ctx 4096,
// ubatch 512): Qwen3-4B 79.1 MiB, Qwen2.5-3B 80.6 MiB, Qwen3-30B-A3B 88.1 MiB (see TestComputeMatchesLlamaCpp),
// and against the goengine's reserved graph and peak RSS (pipeline/fit/rsscheck).
//
// The arithmetic is in float64 so that hostile metadata cannot overflow it; the caller rejects absurd results.
func compute(h hparams, o Options, fa, maskInGraph bool, nkvInt int64) float64 {
	const f32 = 4
	T, E, nkv := float64(o.UBatch), float64(h.embd), float64(nkvInt)
	var H, Hkv float64
	for il := range h.nLayer {
		if !h.recurrent[il] {
			H, Hkv = max(H, float64(h.head[il])), max(Hkv, float64(h.headKV[il]))
		}
	}
	hd, kl := float64(max(h.keyLen, h.valLen)), float64(h.keyLen)
	ff, ffExp, ffSh := float64(h.ff), float64(h.ffExp), float64(h.ffShexp)
	experts, used, vocab := float64(h.experts), float64(h.used), float64(h.vocab)
	inner, S, G, R := float64(h.ssmInner), float64(h.ssmS), float64(h.ssmG), float64(h.ssmR)
	convK, par := float64(h.convK), float64(o.Parallel)
	resid := 3 * T * E * f32

	var attn, scoresF16 float64
	if Hkv > 0 {
		qRows := H * kl
		if h.ssmR > 0 { // Qwen3.5 attn_q carries query and output gate
			qRows *= 2
		}
		attn = T*qRows*f32 + T*H*hd*f32 + 2*T*Hkv*hd*f32
		if fa {
			attn += nkv*T*2 + T*H*hd*f32 + T*H*hd*2
		} else {
			attn += nkv*T*H*f32 + 2*T*H*hd*f32
			if maskInGraph {
				attn += nkv * T * f32
			}
			scoresF16 = nkv * T * H * 2
		}
	}

	var ffn float64
	if h.experts > 0 { // router logits and probabilities, gate/up/product per used expert, down per used expert
		ffn = 2*T*experts*f32 + 3*T*used*ffExp*f32 + T*used*E*f32 + 3*T*ffSh*f32
	} else {
		ffn = 3 * T * ff * f32
	}

	var delta float64
	if h.ssmR > 0 {
		C := inner + 2*G*S
		headV := inner / R
		const chunk = deltaNetChunk
		nc := float64((int64(o.UBatch) + chunk - 1) / chunk)
		padded := nc * chunk
		delta = T*C*f32 + (convK-1+T)*C*f32 + T*C*f32 + T*inner*f32 + 2*T*R*f32 +
			padded*(2*S+headV)*R*f32 + 3*chunk*chunk*nc*R*f32 + 2*S*headV*R*f32*par + 2*T*inner*f32
	}

	out := par*vocab*f32 + T*E*f32

	widest := max(E, ff, ffExp, inner, H*hd)
	work := max(T*widest*17/16, scoresF16)
	return resid + max(attn, ffn, delta, out) + work
}
