package convert

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// qwen3moe: Qwen3MoeForCausalLM (conversion/qwen.py Qwen3MoeModel → Qwen2MoeModel). The per-expert
// projections mlp.experts.E.{gate,up,down}_proj are stacked into 3-D blk.N.ffn_{gate,up,down}_exps (ne
// {n_embd, n_ff_exp, n_expert} for gate/up, {n_ff_exp, n_embd, n_expert} for down), written when the last
// expert of a block has been seen, in the order down, gate, up. Transformers-v5 checkpoints with fused
// mlp.experts.gate_up_proj [E, 2·ff, d] are split in half along dim -2 (gate first). The router
// mlp.gate → ffn_gate_inp stays F32.
var qwen3moeArch = archSpec{
	name:     "qwen3moe",
	classes:  []string{"Qwen3MoeForCausalLM"},
	moe:      true,
	layer:    mergeMaps(denseAttention, qkNorm, moeFFN, map[string]string{"post_attention_layernorm": "ffn_norm"}),
	defaults: map[string]int64{"head_dim": 128},
	setup:    noSetup,
	extraKVs: moeKVs,
}

var moeFFN = map[string]string{
	"mlp.gate":              "ffn_gate_inp",
	"mlp.experts.gate_proj": "ffn_gate_exps",
	"mlp.experts.up_proj":   "ffn_up_exps",
	"mlp.experts.down_proj": "ffn_down_exps",
}

// moeKVs are Qwen2MoeModel.set_gguf_parameters' additions.
func moeKVs(b *builder, k *kvList) error {
	arch := b.spec.name
	if err := k.optUint32(b.h, arch+".expert_feed_forward_length", "moe_intermediate_size"); err != nil {
		return err
	}
	return k.optUint32(b.h, arch+".expert_shared_feed_forward_length", "shared_expert_intermediate_size")
}

// expertProjections is the order Qwen2MoeModel stacks them in.
var expertProjections = []string{"down_proj", "gate_proj", "up_proj"}

// moeModify is Qwen2MoeModel.modify_tensors. It reports done when it emitted (or buffered) the tensor itself.
func (b *builder) moeModify(t *pending) (bool, error) {
	name := t.name
	switch {
	case strings.HasSuffix(name, "mlp.experts.down_proj") || strings.HasSuffix(name, "mlp.experts.down_proj.weight"):
		if !strings.HasSuffix(name, ".weight") {
			t.name = name + ".weight"
		}
		return false, nil
	case strings.HasSuffix(name, "mlp.experts.gate_up_proj") || strings.HasSuffix(name, "mlp.experts.gate_up_proj.weight"):
		return true, b.splitGateUp(t)
	case strings.Contains(name, "experts"):
		return true, b.bufferExpert(t)
	}
	return false, nil
}

func (b *builder) splitGateUp(t *pending) error {
	n := len(t.shape)
	if n < 3 || t.shape[n-2]%2 != 0 {
		return srcErr(t.st, "gate_up_proj shape %v (want [experts, 2·ff, hidden])", t.shape)
	}
	if t.transform != "" {
		return fmt.Errorf("convert: internal error: %s transformed before the gate/up split", t.st.Name)
	}
	ff := t.shape[n-2] / 2
	lead := int64(1)
	for _, d := range t.shape[:n-2] {
		lead *= d
	}
	base := strings.TrimSuffix(strings.TrimSuffix(t.name, ".weight"), ".gate_up_proj")
	for half, proj := range []string{"gate_proj", "up_proj"} {
		shape := append([]int64(nil), t.shape...)
		shape[n-2] = ff
		p := plan{rowLen: t.shape[n-1]}
		for e := range lead {
			p.segs = append(p.segs, segment{src: t.st.Name, rows: ff, srcRow0: e*2*ff + int64(half)*ff})
		}
		part := &pending{name: base + "." + proj + ".weight", bid: t.bid, st: t.st, shape: shape, plan: p,
			sources: t.sources, transform: "split-" + strings.TrimSuffix(proj, "_proj")}
		if err := b.emit(part); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) bufferExpert(t *pending) error {
	if t.bid < 0 {
		return srcErr(t.st, "expert tensor %q without a block number", t.name)
	}
	if b.nExperts == 0 {
		key, ok := b.h.find("num_local_experts", "num_experts")
		if !ok {
			return b.h.missing("num_experts")
		}
		n, err := b.h.positive(key)
		if err != nil {
			return err
		}
		b.nExperts = n
	}
	prefix := fmt.Sprintf("model.layers.%d.mlp.experts.", t.bid)
	rest, ok := strings.CutPrefix(t.name, prefix)
	xs, proj, ok2 := strings.Cut(rest, ".")
	xid, err := strconv.ParseInt(xs, 10, 64)
	if !ok || !ok2 || err != nil || !isDigits(xs) || xid >= b.nExperts ||
		(proj != "gate_proj.weight" && proj != "up_proj.weight" && proj != "down_proj.weight") {
		return srcErr(t.st, "expert tensor %q (want model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight with E < %d)", t.name, b.nExperts)
	}
	if t.transform != "" {
		return fmt.Errorf("convert: internal error: expert %s transformed", t.st.Name)
	}
	if b.experts == nil {
		b.experts = map[int64]map[string]srcTensor{}
	}
	if b.experts[t.bid] == nil {
		b.experts[t.bid] = map[string]srcTensor{}
	}
	b.experts[t.bid][t.name] = t.st
	if int64(len(b.experts[t.bid])) < 3*b.nExperts {
		return nil
	}
	for _, proj := range expertProjections {
		var first srcTensor
		p := plan{}
		var sources []string
		for x := range b.nExperts {
			st, ok := b.experts[t.bid][fmt.Sprintf("%s%d.%s.weight", prefix, x, proj)]
			if !ok {
				return srcErr(t.st, "block %d lacks expert %d %s", t.bid, x, proj)
			}
			if x == 0 {
				first = st
				p.rowLen = st.RowLen()
			} else if !sameShape(st.Shape, first.Shape) {
				return srcErr(st, "expert shape %v differs from expert 0's %v", st.Shape, first.Shape)
			}
			p.segs = append(p.segs, segment{src: st.Name, rows: st.Rows()})
			sources = append(sources, st.Name)
		}
		shape := append([]int64{b.nExperts}, first.Shape...)
		if err := b.emit(&pending{name: fmt.Sprintf("model.layers.%d.mlp.experts.%s.weight", t.bid, proj), bid: t.bid,
			st: first, shape: shape, plan: p, sources: sources, transform: "stack"}); err != nil {
			return err
		}
	}
	delete(b.experts, t.bid)
	return nil
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// leftoverExperts fails when some block did not have all its experts (Qwen2MoeModel.prepare_tensors).
func (b *builder) leftoverExperts() error {
	var names []string
	for _, m := range b.experts {
		for n := range m {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	more := ""
	if len(names) > 4 {
		more = fmt.Sprintf(" and %d more", len(names)-4)
		names = names[:4]
	}
	return &UnsupportedError{What: fmt.Sprintf("incomplete experts (want %d per block): unprocessed %s%s", b.nExperts, strings.Join(names, ", "), more)}
}
