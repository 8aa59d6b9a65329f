package auto

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// DefaultLadder is the types every group is measured at (Q8_0 is the reference, measured once for all).
var DefaultLadder = []gguf.Type{gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeIQ4_XS, gguf.TypeQ4_K, gguf.TypeQ5_K,
	gguf.TypeQ6_K, gguf.TypeQ8_0}

// reference is the type every tensor outside the measured group keeps, and the top of every ladder.
const reference = gguf.TypeQ8_0

// kinds names the tensor kinds that are grouped, by the part of the name after "blk.N." (Qwen2/3, Qwen3-MoE,
// Qwen3.5 and Qwen3.5-MoE): the hybrid models' attn_qkv and ssm_out, often the most sensitive, are groups of
// their own, as are attn_v and ffn_down, which llama-quantize's mixes already favour.
var kinds = []struct {
	name     string
	suffixes []string
}{
	{"attn", []string{"attn_q", "attn_k", "attn_output"}},
	{"attn_v", []string{"attn_v"}},
	{"attn_qkv", []string{"attn_qkv"}},
	{"attn_gate", []string{"attn_gate", "ssm_alpha", "ssm_beta"}},
	{"ssm_out", []string{"ssm_out"}},
	{"ffn_gate_up", []string{"ffn_gate", "ffn_up"}},
	{"ffn_down", []string{"ffn_down"}},
	{"ffn_exps_gate_up", []string{"ffn_gate_exps", "ffn_up_exps"}},
	{"ffn_down_exps", []string{"ffn_down_exps"}},
	{"ffn_shexp", []string{"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"}},
}

// kindOf returns the kind of a block tensor ("blk.3.attn_v.weight" → attn_v, layer 3), or "other".
func kindOf(name string) (kind string, layer int, ok bool) {
	rest, found := strings.CutPrefix(name, "blk.")
	if !found {
		return "", 0, false
	}
	num, tail, found := strings.Cut(rest, ".")
	if !found {
		return "", 0, false
	}
	layer, err := strconv.Atoi(num)
	if err != nil || layer < 0 {
		return "", 0, false
	}
	base := strings.TrimSuffix(tail, ".weight")
	for _, k := range kinds {
		for _, s := range k.suffixes {
			if base == s {
				return k.name, layer, true
			}
		}
	}
	return "other", layer, true
}

// Groups splits the quantizable tensors of a plan (any plan of the model: only names, shapes and which
// tensors are quantized are read) into groups: "output" (output.weight, or token_embd.weight when the
// embeddings are tied), "token_embd" (untied), and for each band of layers (bands bands of about equal
// size, counted over block_count layers) one group per tensor kind (see kinds). Each group carries the
// tensors' names and a --tensor-type pattern that matches exactly those names.
func Groups(p plan.Plan, layers, bands int) ([]Group, error) {
	if layers <= 0 {
		return nil, fmt.Errorf("auto: %d layers", layers)
	}
	bands = max(1, min(bands, layers))
	tied := true
	for _, e := range p.Entries {
		if e.Name == "output.weight" {
			tied = false
		}
	}
	type key struct {
		kind string
		band int
	}
	byKey := map[key]*Group{}
	var keys []key
	add := func(k key, name string) {
		g := byKey[k]
		if g == nil {
			g = &Group{}
			byKey[k] = g
			keys = append(keys, k)
		}
		g.Tensors = append(g.Tensors, name)
	}
	for _, e := range p.Entries {
		if !e.Convert() {
			continue
		}
		switch {
		case e.Name == "output.weight" || tied && e.Name == "token_embd.weight":
			add(key{"output", -1}, e.Name)
		case e.Name == "token_embd.weight":
			add(key{"token_embd", -1}, e.Name)
		default:
			kind, layer, ok := kindOf(e.Name)
			if !ok {
				add(key{"other", -1}, e.Name)
				continue
			}
			if layer >= layers {
				return nil, fmt.Errorf("auto: tensor %s: layer %d outside the model's %d", e.Name, layer, layers)
			}
			add(key{kind, layer * bands / layers}, e.Name)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].band != keys[j].band {
			return keys[i].band < keys[j].band
		}
		return kindRank(keys[i].kind) < kindRank(keys[j].kind)
	})
	out := make([]Group, 0, len(keys))
	for _, k := range keys {
		g := byKey[k]
		sort.Strings(g.Tensors)
		g.Name = k.kind
		if k.band >= 0 {
			lo, hi := bandRange(k.band, bands, layers)
			g.Name = fmt.Sprintf("blk.%d-%d %s", lo, hi, k.kind)
			if lo == hi {
				g.Name = fmt.Sprintf("blk.%d %s", lo, k.kind)
			}
		}
		out = append(out, *g)
	}
	return out, nil
}

// bandRange returns the first and last layer of a band (layer l is in band l·bands/layers).
func bandRange(band, bands, layers int) (lo, hi int) {
	lo = (band*layers + bands - 1) / bands
	hi = ((band+1)*layers+bands-1)/bands - 1
	return lo, hi
}

func kindRank(kind string) int {
	switch kind {
	case "output":
		return -2
	case "token_embd":
		return -1
	}
	for i, k := range kinds {
		if k.name == kind {
			return i
		}
	}
	return len(kinds)
}

// Pattern returns a --tensor-type pattern that matches exactly the group's tensors: for a band of layers,
// "^blk\.(0|1|2)\.(ffn_gate|ffn_up)\.weight$" when every listed layer has every listed tensor; otherwise the
// names, quoted, as one anchored alternation. Go's RE2 and llama.cpp's std::regex read both alike.
func (g Group) Pattern() string {
	var layers, bases []string
	seenL, seenB := map[string]bool{}, map[string]bool{}
	compact := true
	for _, t := range g.Tensors {
		rest, ok := strings.CutPrefix(t, "blk.")
		num, tail, ok2 := strings.Cut(rest, ".")
		base, ok3 := strings.CutSuffix(tail, ".weight")
		if !ok || !ok2 || !ok3 || regexp.QuoteMeta(base) != base {
			compact = false
			break
		}
		if !seenL[num] {
			seenL[num] = true
			layers = append(layers, num)
		}
		if !seenB[base] {
			seenB[base] = true
			bases = append(bases, base)
		}
	}
	if compact && len(layers)*len(bases) == len(g.Tensors) && len(g.Tensors) > 0 {
		return `^blk\.(` + strings.Join(layers, "|") + `)\.(` + strings.Join(bases, "|") + `)\.weight$`
	}
	q := make([]string, len(g.Tensors))
	for i, t := range g.Tensors {
		q[i] = regexp.QuoteMeta(t)
	}
	return "^(" + strings.Join(q, "|") + ")$"
}

// Rule returns the group's --tensor-type rule for a type.
func (g Group) Rule(t gguf.Type) (plan.TensorTypeRule, error) {
	return plan.ParseTensorTypeRule(g.Pattern() + "=" + strings.ToLower(t.String()))
}
