package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

func TestOverrides(t *testing.T) {
	base := func(name string, layer int) gguf.Type { // qwen3small Q4_K_M without overrides
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "token_embd.weight":
			return gguf.TypeQ6_K
		case (strings.Contains(name, "attn_v") || strings.Contains(name, "ffn_down")) && inSet(layer, 0, 3, 6, 7):
			return gguf.TypeQ6_K
		}
		return gguf.TypeQ4_K
	}
	with := func(over map[string]gguf.Type) func(string, int) gguf.Type {
		return func(name string, layer int) gguf.Type {
			if t, ok := over[name]; ok {
				return t
			}
			return base(name, layer)
		}
	}
	check(t, mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{}), base)

	t.Run("pure", func(t *testing.T) {
		p := mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{Pure: true})
		check(t, p, func(name string, _ int) gguf.Type {
			if kept(name) {
				return gguf.TypeF32
			}
			return gguf.TypeQ4_K
		})
		// --pure still falls back on rows that do not fit.
		p = mustPlan(t, qwen25half, gguf.FileTypeQ4_K_M, Overrides{Pure: true})
		if e := byName(p)["token_embd.weight"]; e.To != gguf.TypeQ5_0 || e.Fallback == "" {
			t.Errorf("pure 896-wide token_embd: %s (%q), want Q5_0 by fallback", e.To, e.Fallback)
		}
	})
	t.Run("pure with tensor types", func(t *testing.T) { // llama.cpp #25716: --tensor-type applies under --pure
		p := mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{Pure: true, TensorTypes: rules(t, "attn_v=q8_0")})
		check(t, p, func(name string, _ int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case strings.Contains(name, "attn_v"):
				return gguf.TypeQ8_0
			}
			return gguf.TypeQ4_K
		})
	})
	t.Run("output and token embedding types", func(t *testing.T) {
		untied := qwen3small
		untied.tied = false
		p := mustPlan(t, untied, gguf.FileTypeQ4_K_M, Overrides{OutputType: typ(gguf.TypeQ8_0)})
		check(t, p, with(map[string]gguf.Type{"output.weight": gguf.TypeQ8_0, "token_embd.weight": gguf.TypeQ4_K}))
		if n := byName(p)["output.weight"].Note; n != "--output-tensor-type" {
			t.Errorf("output note %q", n)
		}
		// Tied: the embedding takes the output rule, so --output-tensor-type reaches it (but not under --pure).
		p = mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{OutputType: typ(gguf.TypeQ5_K)})
		check(t, p, with(map[string]gguf.Type{"token_embd.weight": gguf.TypeQ5_K}))
		p = mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{OutputType: typ(gguf.TypeQ5_K), Pure: true})
		if e := byName(p)["token_embd.weight"]; e.To != gguf.TypeQ4_K {
			t.Errorf("pure tied token_embd with --output-tensor-type: %s, want Q4_K", e.To)
		}
		p = mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{TokenEmbdType: typ(gguf.TypeQ8_0)})
		check(t, p, with(map[string]gguf.Type{"token_embd.weight": gguf.TypeQ8_0}))
		// The direct overrides skip the fallback: a row that does not fit is an error, not a crash.
		_, err := Make("qwen2", qwen25half.info(), qwen25half.tensors(), gguf.FileTypeQ4_K_M,
			Overrides{TokenEmbdType: typ(gguf.TypeQ4_K)})
		if err == nil || !strings.Contains(err.Error(), "token_embd.weight") || !strings.Contains(err.Error(), "896") {
			t.Errorf("Q4_K token_embd on 896-wide rows: err %v", err)
		}
	})
	t.Run("tensor types", func(t *testing.T) {
		// First match wins, even against a more specific later rule.
		p := mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{
			TensorTypes: rules(t, "ffn_down=q5_k", `blk\.0\.ffn_down=q8_0`)})
		check(t, p, func(name string, layer int) gguf.Type {
			if strings.Contains(name, "ffn_down") {
				return gguf.TypeQ5_K
			}
			return base(name, layer)
		})
		if n := byName(p)["blk.0.ffn_down.weight"].Note; n != "--tensor-type ffn_down=Q5_K" {
			t.Errorf("note %q", n)
		}
		// A rule equal to the base type still locks the tensor (llama.cpp #22572) and, like upstream, the
		// locked tensor does not advance the attn_v counter: blk.1 is then attn_v number 0.
		p = mustPlan(t, qwen3small, gguf.FileTypeQ4_K_M, Overrides{TensorTypes: rules(t, `BLK\.0\.ATTN_V=Q4_K`)})
		check(t, p, func(name string, layer int) gguf.Type {
			if strings.Contains(name, "attn_v") {
				if inSet(layer, 1, 4, 7) {
					return gguf.TypeQ6_K
				}
				return gguf.TypeQ4_K
			}
			return base(name, layer)
		})
		// A manual type is still subject to the shape fallback.
		p = mustPlan(t, qwen25half, gguf.FileTypeQ4_K_M, Overrides{TensorTypes: rules(t, "attn_q=q6_k")})
		if e := byName(p)["blk.0.attn_q.weight"]; e.To != gguf.TypeQ8_0 || e.Fallback == "" {
			t.Errorf("manual Q6_K on 896: %s (%q), want Q8_0 by fallback", e.To, e.Fallback)
		}
		// Float file types ignore --tensor-type but honour the embedding override.
		p = mustPlan(t, qwen3small, gguf.FileTypeF16, Overrides{TensorTypes: rules(t, "attn_v=q8_0"),
			TokenEmbdType: typ(gguf.TypeQ8_0)})
		check(t, p, func(name string, _ int) gguf.Type {
			switch {
			case kept(name):
				return gguf.TypeF32
			case name == "token_embd.weight":
				return gguf.TypeQ8_0
			}
			return gguf.TypeF16
		})
	})
}

func TestParseTensorTypeRule(t *testing.T) {
	r, err := ParseTensorTypeRule(`BLK\.(1|2)\.ATTN_V=Q8_0`)
	if err != nil || r.Pattern != `blk\.(1|2)\.attn_v` || r.Type != gguf.TypeQ8_0 || !r.re.MatchString("blk.2.attn_v.weight") {
		t.Fatalf("got %+v, %v", r, err)
	}
	if r, err := ParseTensorTypeRule("a=b=q4_k"); err == nil {
		t.Errorf("a=b=q4_k: %+v; the type is everything after the first '='", r)
	}
	for _, c := range []struct{ in, want string }{
		{"attn_v", "want REGEX=TYPE"},
		{"=q8_0", "missing tensor name"},
		{"attn_v=", "missing tensor type"},
		{"attn_v=q9_k", "valid: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, " +
			"IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, BF16, TQ1_0, TQ2_0"},
		{"attn_v=mxfp4", "unsupported tensor type \"mxfp4\""},
		{"(=q8_0", "bad pattern"},
		{"a(?!b)=q8_0", "bad pattern"},                         // look-ahead: ECMAScript has it, RE2 does not
		{"a(?=b)=q8_0", "unsupported tensor type \"b)=q8_0\""}, // split at the first '=', as upstream
	} {
		_, err := ParseTensorTypeRule(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want %q", c.in, err, c.want)
		}
	}
	if _, err := ParseTargetType("q7"); err == nil || !strings.Contains(err.Error(), "IQ4_XS") {
		t.Errorf("ParseTargetType(q7): %v", err)
	}
	// Rules built by hand are compiled by Make; bad ones are reported there.
	_, err = Make("qwen3", qwen3small.info(), qwen3small.tensors(), gguf.FileTypeQ4_K_M,
		Overrides{TensorTypes: []TensorTypeRule{{Pattern: "(", Type: gguf.TypeQ8_0}}})
	if err == nil || !strings.Contains(err.Error(), "bad pattern") {
		t.Errorf("hand-built bad rule: %v", err)
	}
	_, err = Make("qwen3", qwen3small.info(), qwen3small.tensors(), gguf.FileTypeQ4_K_M,
		Overrides{OutputType: typ(gguf.TypeMXFP4)})
	var ue *UnsupportedError
	if !errors.As(err, &ue) {
		t.Errorf("MXFP4 output type: %v, want *UnsupportedError", err)
	}
}

func FuzzParseTensorTypeRule(f *testing.F) {
	for _, s := range []string{"attn_v=q8_0", `blk\.[0-3]\.ffn_down=Q6_K`, "=", "a=", "(=f16", "x=bf16=f32"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseTensorTypeRule(s)
		if err != nil {
			return
		}
		if !isTarget(r.Type) || r.re == nil || r.Pattern != strings.ToLower(r.Pattern) {
			t.Fatalf("%q: accepted %+v", s, r)
		}
		again, err := ParseTensorTypeRule(r.String())
		if err != nil || again.Type != r.Type || again.Pattern != r.Pattern {
			t.Fatalf("%q: round trip %q -> %+v, %v", s, r.String(), again, err)
		}
	})
}
