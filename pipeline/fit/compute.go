package fit

// compute estimates the compute buffer: the graph intermediates alive at the widest point of the largest batch
// (ubatch tokens over all KV cells, as both engines reserve it at load). ggml's allocator reuses the memory of
// tensors no longer needed, so the peak is the residual stream plus the widest single phase of one layer:
//
//   - attention: Q/K/V projections and, without flash attention, the scores n_kv × ubatch × heads (F32, soft-max in
//     place) and the mask n_kv × ubatch; with flash attention only an F16 mask and the output;
//   - feed-forward: gate, up and their product, ubatch × n_ff (MoE: ubatch × used experts × expert n_ff, plus
//     router logits and the shared expert);
//   - gated delta net (Qwen3.5): the mixed qkv, the conv window, the chunked (64-token) scan matrices per value head
//     and the state in and out;
//   - output: the logits of one row per sequence (both engines reserve the graph with one output per sequence;
//     prompt tokens other than the last are dropped before the output projection).
//
// Sources: llama.cpp src/llama-graph.cpp build_attn_mha, build_moe_ffn; ollama ml/backend/ggml Context.Reserve,
// kvcache/causal.go (mask over all cells); runtime/goengine reserve. Checked against measured llama.cpp compute
// buffers (gpustack/gguf-parser-go testdata/llamacpp_compute_buffer_sweep.json, ctx 4096, ubatch 512): Qwen3-4B
// 79.1 MiB, Qwen2.5-3B 80.6 MiB, Qwen3-30B-A3B 88.1 MiB (see TestComputeMatchesLlamaCpp). The CPU backend's work buffer (activations converted to the weights' dot type) is
// added as ubatch × the widest row in Q8 (1.0625 bytes per value).
//
// The arithmetic is in float64 so that hostile metadata cannot overflow it; the caller rejects absurd results.
func compute(h hparams, o Options, fa bool, nkvInt int64) float64 {
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

	var attn float64
	if Hkv > 0 {
		qRows := H * kl
		if h.ssmR > 0 { // Qwen3.5 attn_q carries query and output gate
			qRows *= 2
		}
		attn = T*qRows*f32 + T*H*hd*f32 + 2*T*Hkv*hd*f32
		if fa {
			attn += nkv*T*2 + T*H*hd*f32 + T*H*hd*2
		} else {
			attn += nkv*T*H*f32 + nkv*T*f32 + 2*T*H*hd*f32
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
	work := T * widest * 17 / 16
	return resid + max(attn, ffn, delta, out) + work
}
