package plan

import (
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// The expectations below restate src/llama-quant.cpp (llama_tensor_get_type_impl, tensor_requires_imatrix) at
// llama.cpp 34af94cd for the low-bit file types, tensor by tensor, for layouts the golden mixes do not cover
// (llama-quantize needs an importance matrix to write most of them).

// qwen3_28 is Qwen3-0.6B's layout: 28 layers, 16/8 heads (n_gqa 2), tied embeddings.
var qwen3_28 = layout{arch: "qwen3", layers: 28, hidden: 256, ffn: 512, vocab: 512, heads: 16, kv: 8,
	headDim: 128, tied: true}

func has(name string, parts ...string) bool {
	for _, p := range parts {
		if strings.Contains(name, p) {
			return true
		}
	}
	return false
}

// TestLowBitFileTypes: every tensor of the 28-layer Qwen3 layout for each new file type, with and without an
// importance matrix, and which tensors need one.
func TestLowBitFileTypes(t *testing.T) {
	first8 := func(layer int) bool { return layer < 28/8 } // layers 0-2
	type want func(name string, layer int) gguf.Type
	lowIQ := func(base, vAndDown, out gguf.Type) want {
		return func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight": // tied: the output rule, Q5_K for the IQ1/IQ2 types
				return gguf.TypeQ5_K
			case has(name, "attn_v"): // n_gqa 2 < 4 and no experts
				return vAndDown
			case has(name, "ffn_down") && first8(layer):
				return vAndDown
			case has(name, "attn_output"):
				return out
			}
			return base
		}
	}
	for _, c := range []struct {
		ft        gguf.FileType
		imatrix   bool
		want      want
		needs     func(name string, layer int) bool // which converted tensors need an importance matrix
		refused   bool                              // llama-quantize refuses the file type without one
		defaultTo gguf.Type
	}{
		{ft: gguf.FileTypeIQ2_XXS, imatrix: true, want: lowIQ(gguf.TypeIQ2_XXS, gguf.TypeQ2_K, gguf.TypeIQ2_XXS),
			needs: func(n string, l int) bool { return !has(n, "attn_v") && !(has(n, "ffn_down") && first8(l)) }, refused: true},
		{ft: gguf.FileTypeIQ2_XS, imatrix: true, want: lowIQ(gguf.TypeIQ2_XS, gguf.TypeQ2_K, gguf.TypeIQ2_XS),
			needs: func(n string, l int) bool { return !has(n, "attn_v") && !(has(n, "ffn_down") && first8(l)) }, refused: true},
		{ft: gguf.FileTypeIQ2_S, imatrix: true, want: lowIQ(gguf.TypeIQ2_XS, gguf.TypeIQ3_S, gguf.TypeIQ3_S),
			needs: func(n string, l int) bool {
				return !has(n, "attn_v", "attn_output") && !(has(n, "ffn_down") && first8(l))
			}, refused: true},
		{ft: gguf.FileTypeIQ2_M, imatrix: true, want: lowIQ(gguf.TypeIQ2_S, gguf.TypeIQ3_S, gguf.TypeIQ3_S),
			needs: func(n string, l int) bool {
				return !has(n, "attn_v", "attn_output") && !(has(n, "ffn_down") && first8(l))
			}, refused: true},
		{ft: gguf.FileTypeIQ1_S, imatrix: true, want: lowIQ(gguf.TypeIQ1_S, gguf.TypeQ2_K, gguf.TypeIQ2_XXS),
			needs: func(n string, l int) bool { return !has(n, "attn_v") && !(has(n, "ffn_down") && first8(l)) }, refused: true},
		{ft: gguf.FileTypeIQ1_M, imatrix: true, want: lowIQ(gguf.TypeIQ1_M, gguf.TypeQ2_K, gguf.TypeIQ2_XXS),
			needs: func(n string, l int) bool { return !has(n, "attn_v") && !(has(n, "ffn_down") && first8(l)) }, refused: true},
		{ft: gguf.FileTypeIQ3_XXS, imatrix: true, refused: true, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ5_K
			case has(name, "attn_q.", "attn_k."):
				return gguf.TypeIQ2_S
			case has(name, "attn_output"):
				return gguf.TypeIQ3_S
			}
			return gguf.TypeIQ3_XXS // attn_v and ffn_down keep the base type with an imatrix
		}, needs: func(n string, l int) bool { return !has(n, "attn_output") }},
		{ft: gguf.FileTypeIQ3_XXS, imatrix: false, refused: true, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ5_K
			case has(name, "attn_q.", "attn_k."):
				return gguf.TypeIQ2_S
			case has(name, "attn_output", "attn_v"):
				return gguf.TypeIQ3_S
			case has(name, "ffn_down") && first8(layer):
				return gguf.TypeQ4_K
			case has(name, "ffn_down"):
				return gguf.TypeQ3_K
			}
			return gguf.TypeIQ3_XXS
		}, needs: func(n string, l int) bool { return !has(n, "attn_output", "attn_v", "ffn_down") }},
		{ft: gguf.FileTypeIQ3_XS, imatrix: true, refused: true, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight": // not an IQ1/IQ2 type: Q6_K
				return gguf.TypeQ6_K
			case has(name, "attn_q.", "attn_k."):
				return gguf.TypeIQ3_XXS
			case has(name, "ffn_gate", "ffn_up") && layer >= 3 && layer < 24:
				return gguf.TypeIQ3_XXS
			}
			return gguf.TypeIQ3_S
		}, needs: func(n string, l int) bool {
			return has(n, "attn_q.", "attn_k.") || has(n, "ffn_gate", "ffn_up") && l >= 3 && l < 24
		}},
		{ft: gguf.FileTypeIQ3_S, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			}
			return gguf.TypeIQ3_S
		}},
		{ft: gguf.FileTypeIQ3_M, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			case has(name, "attn_v", "attn_output"):
				return gguf.TypeQ4_K
			case has(name, "ffn_down") && first8(layer):
				return gguf.TypeQ4_K
			}
			return gguf.TypeIQ3_S
		}},
		{ft: gguf.FileTypeQ2_K_S, imatrix: true, refused: true, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			case has(name, "ffn_down") && first8(layer):
				return gguf.TypeQ4_K
			}
			return gguf.TypeQ2_K // attn_v stays Q2_K with n_gqa < 4
		}, needs: func(n string, l int) bool { return !(has(n, "ffn_down") && l < 3) }},
		{ft: gguf.FileTypeTQ1_0, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			}
			return gguf.TypeTQ1_0
		}},
		{ft: gguf.FileTypeTQ2_0, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			}
			return gguf.TypeTQ2_0
		}},
		// Existing file types whose rules change with an importance matrix.
		{ft: gguf.FileTypeQ4_0, imatrix: true, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			case has(name, "ffn_down") && first8(layer):
				return gguf.TypeQ4_1
			}
			return gguf.TypeQ4_0
		}},
		{ft: gguf.FileTypeQ5_0, imatrix: true, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			case has(name, "ffn_down") && first8(layer):
				return gguf.TypeQ5_1
			}
			return gguf.TypeQ5_0
		}},
		{ft: gguf.FileTypeQ4_0, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			}
			return gguf.TypeQ4_0
		}},
		{ft: gguf.FileTypeIQ4_XS, imatrix: true, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			}
			return gguf.TypeIQ4_XS // no Q5_K for the first ffn_down layers with an imatrix
		}},
		{ft: gguf.FileTypeIQ4_XS, want: func(name string, layer int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ6_K
			case has(name, "ffn_down") && first8(layer):
				return gguf.TypeQ5_K
			}
			return gguf.TypeIQ4_XS
		}},
	} {
		p := mustPlan(t, qwen3_28, c.ft, Overrides{HasImatrix: c.imatrix})
		check(t, p, c.want)
		n := 0
		for _, e := range p.Entries {
			layer, _, _ := blockNumber(e.Name)
			want := e.Convert() && e.Name != "token_embd.weight" && c.needs != nil && c.needs(e.Name, layer) // never the embedding
			if e.NeedsImatrix != want {
				t.Errorf("%s (imatrix %v) %s: needs imatrix %v, want %v", c.ft, c.imatrix, e.Name, e.NeedsImatrix, want)
			}
			if want {
				n++
			}
		}
		if p.NeedsImatrix != n {
			t.Errorf("%s: NeedsImatrix %d, want %d", c.ft, p.NeedsImatrix, n)
		}
		if RequiresImatrix(c.ft) != c.refused {
			t.Errorf("RequiresImatrix(%s) = %v", c.ft, !c.refused)
		}
		if c.refused {
			noIm := mustPlan(t, qwen3_28, c.ft, Overrides{})
			if _, ok := noIm.FirstNeedingImatrix(); !ok {
				t.Errorf("%s without an imatrix: no tensor needs one, yet llama-quantize refuses it", c.ft)
			}
		}
	}
}

// TestLowBitRulesMoE: the expert-count rules of the low-bit branch (attn_v Q4_K from four experts on, attn_k
// and attn_output for eight), the untied token embedding, and the IQ1/IQ2 ffn_down rule counting tensors, not
// layers (qwen35moe has two ffn_down tensors per layer, so only the first n/16 layers get the bump).
func TestLowBitRulesMoE(t *testing.T) {
	l := qwen3moe // 8 layers, 128 experts, untied
	p := mustPlan(t, l, gguf.FileTypeIQ2_XXS, Overrides{HasImatrix: true})
	check(t, p, func(name string, layer int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "output.weight":
			return gguf.TypeQ5_K
		case name == "token_embd.weight":
			return gguf.TypeQ2_K
		case has(name, "attn_v"):
			return gguf.TypeQ4_K
		case has(name, "ffn_down") && layer < 1:
			return gguf.TypeQ2_K
		}
		return gguf.TypeIQ2_XXS
	})
	l.experts = 8
	p = mustPlan(t, l, gguf.FileTypeIQ2_M, Overrides{HasImatrix: true})
	check(t, p, func(name string, layer int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "output.weight":
			return gguf.TypeQ5_K
		case name == "token_embd.weight":
			return gguf.TypeIQ3_S
		case has(name, "attn_v", "attn_k."):
			return gguf.TypeQ4_K
		case has(name, "attn_output"):
			return gguf.TypeQ5_K
		case has(name, "ffn_down") && layer < 1:
			return gguf.TypeIQ3_S
		}
		return gguf.TypeIQ2_S
	})
	// qwen35moe with 17 blocks (16 layers + MTP): n_ffn_down = 17, so the first 17/8 = 2 ffn_down tensors in
	// order are blk.0's ffn_down_exps and ffn_down_shexp; blk.1 gets none.
	q := qwen35moe
	q.layers = 16
	p = mustPlan(t, q, gguf.FileTypeIQ1_M, Overrides{HasImatrix: true})
	for _, name := range []string{"blk.0.ffn_down_exps.weight", "blk.0.ffn_down_shexp.weight"} {
		if e := byName(p)[name]; e.To != gguf.TypeQ2_K {
			t.Errorf("%s: %s, want Q2_K", name, e.To)
		}
	}
	if e := byName(p)["blk.1.ffn_down_exps.weight"]; e.To != gguf.TypeIQ1_M {
		t.Errorf("blk.1.ffn_down_exps: %s, want IQ1_M", e.To)
	}
	// The attn_v-like counter still advances in the low-bit branch: attn_qkv gets Q4_K (16 experts ≥ 4).
	if e := byName(p)["blk.0.attn_qkv.weight"]; e.To != gguf.TypeQ4_K {
		t.Errorf("attn_qkv: %s, want Q4_K", e.To)
	}
}

// TestImatrixOverrides: --tensor-type can ask for a type that needs an importance matrix, and the plan says
// so; the row-length fallback of the IQ types goes to IQ4_NL.
func TestImatrixOverrides(t *testing.T) {
	p := mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{TensorTypes: rules(t, `ffn_up=iq2_xxs`)})
	e := byName(p)["blk.0.ffn_up.weight"]
	if e.To != gguf.TypeIQ2_XXS || !e.NeedsImatrix || p.NeedsImatrix != 8 {
		t.Fatalf("override: %+v, plan needs %d", e, p.NeedsImatrix)
	}
	if f, ok := p.FirstNeedingImatrix(); !ok || f.Name != "blk.0.ffn_up.weight" {
		t.Errorf("first needing: %+v %v", f, ok)
	}
	half := layout{arch: "qwen2", layers: 8, hidden: 896, ffn: 4864, vocab: 512, heads: 14, kv: 2, headDim: 64, tied: true, bias: true}
	p = mustPlan(t, half, gguf.FileTypeIQ2_XXS, Overrides{HasImatrix: true})
	if e := byName(p)["blk.4.attn_q.weight"]; e.To != gguf.TypeIQ4_NL || e.Fallback == "" || e.NeedsImatrix {
		t.Errorf("896-wide attn_q in IQ2_XXS: %+v", e)
	}
	if e := byName(p)["blk.4.ffn_down.weight"]; e.To != gguf.TypeIQ2_XXS || !e.NeedsImatrix {
		t.Errorf("4864-wide ffn_down: %+v", e)
	}
}
