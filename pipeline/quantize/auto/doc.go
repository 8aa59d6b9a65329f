// Package auto chooses a per-tensor type mix for a target — a file size, bits per weight, a phone's memory, or
// a KL-divergence bound — from measured sensitivities (phonellm quantize auto).
//
// The model's quantizable tensors are split into groups that take one type together ([Groups]: the output
// head, the token embedding, and per band of layers the attention projections, attn_v, the Qwen3.5 linear
// attention's attn_qkv, attn_gate and ssm_out, and the feed-forward gate/up and down matrices, expert stacks
// apart). For every group and every type of a ladder (Q2_K … Q8_0), [Measure] quantizes that group alone to the
// type — every other tensor at the reference type Q8_0, with the importance matrix when there is one — and
// measures the mean KL divergence against the unquantized model on the calibration prompts (package eval);
// the increase over the all-Q8_0 file is the group's sensitivity at that type.
//
// [Solve] then picks one type per group: the least total predicted increase whose size fits a byte budget, a
// multiple-choice knapsack solved exactly by dynamic programming over sizes rounded up to budget/8192 bytes,
// followed by a greedy pass that spends what the rounding left. [SolveMaxKLD] is the dual: the smallest mix
// whose predicted increase stays under a bound. The prediction assumes that the groups' increases add up,
// which holds well for small perturbations; the final file is measured again by eval.
//
// The chosen mix becomes --tensor-type rules (one per group, an exact list of tensor names) recorded in the
// output's metadata (phonellm.quantize.tensor_types), so `phonellm quantize TYPE --tensor-type …` reproduces
// the file; the file itself is an ordinary GGUF of llama.cpp's types.
package auto
