package hostile

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// The mutants of a GGUF's content: tensor data, the chat template and the vocabulary (the structure's are in
// gguf_mutants.go).

// data puts NaN, Inf and extreme values into tensor data.
func (g *builder) data() {
	base := g.b.model
	poison := func(t *tensor, v float32, all bool) {
		d := slices.Clone(t.data)
		t.data = d
		switch gguf.Type(t.typ) {
		case gguf.TypeF32:
			for i := 0; i+4 <= len(d); i += 4 {
				binary.LittleEndian.PutUint32(d[i:], math.Float32bits(v))
				if !all {
					break
				}
			}
		case gguf.TypeF16:
			h := half.F32ToF16(v)
			for i := 0; i+2 <= len(d); i += 2 {
				binary.LittleEndian.PutUint16(d[i:], h)
				if !all {
					break
				}
			}
		case gguf.TypeBF16:
			h := half.F32ToBF16(v)
			for i := 0; i+2 <= len(d); i += 2 {
				binary.LittleEndian.PutUint16(d[i:], h)
				if !all {
					break
				}
			}
		case gguf.TypeQ8_0: // 34-byte blocks: an f16 scale, then 32 int8
			h := half.F32ToF16(v)
			for i := 0; i+34 <= len(d); i += 34 {
				binary.LittleEndian.PutUint16(d[i:], h)
				if !all {
					break
				}
			}
		}
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	matrix := ""
	for _, name := range []string{"blk.0.ffn_up.weight", "blk.0.ffn_up_exps.weight"} {
		if base.tensorIndex(name) >= 0 {
			matrix = name
		}
	}
	w := ggufBadWeights
	if g.b.MTP {
		w = Expect{Inspect: Accept, Fit: Accept, Quantize: Refuse, Serve: Refuse}
	}
	if matrix != "" {
		g.edit("data", "NaN in "+matrix, w, func(m *model) { poison(m.tensor(matrix), nan, false) })
		g.edit("data", "all of "+matrix+" -Inf", w, func(m *model) { poison(m.tensor(matrix), float32(math.Inf(-1)), true) })
	}
	g.edit("data", "+Inf in token_embd", w, func(m *model) { poison(m.tensor("token_embd.weight"), inf, false) })
	g.edit("data", "all weights NaN", w, func(m *model) {
		for i := range m.tensors {
			if len(m.tensors[i].shape) >= 2 && m.tensors[i].shape[1] > 1 {
				poison(&m.tensors[i], nan, true)
			}
		}
	})
	if t := base.tensor(matrix); t != nil && t.typ == uint32(gguf.TypeF32) {
		g.edit("data", "denormal weights", g.valid, func(m *model) { poison(m.tensor(matrix), 1e-45, true) })
	}
	// Small F32 tensors are checked at load: a NaN norm makes every logit NaN.
	for _, name := range []string{"output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ssm_a", "blk.0.attn_q.bias", "blk.0.ffn_norm.weight"} {
		if base.tensorIndex(name) < 0 {
			continue
		}
		g.edit("data", "NaN in "+name, ggufRefused, func(m *model) { poison(m.tensor(name), nan, false) })
		g.edit("data", "+Inf in "+name, ggufRefused, func(m *model) { poison(m.tensor(name), inf, true) })
	}
}

// templates replaces the chat template.
func (g *builder) templates() {
	const key = "tokenizer.chat_template"
	set := func(what string, e Expect, v gguf.Value) {
		g.edit("templates", what, e, func(m *model) { m.set(key, v) })
	}
	syntax, hostile := ggufTemplateSyntax, ggufHostileTemplate
	if g.b.MTP {
		syntax, hostile = ggufServeRefused, ggufServeRefused
	}
	set("syntax error", syntax, gguf.String("{% for %}"))
	set("unclosed block", syntax, gguf.String("{% if messages %}never closed"))
	set("loop of 10^9", hostile, gguf.String("{% for i in range(1000000000) %}x{% endfor %}"))
	set("nested loops", hostile, gguf.String("{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}"))
	set("recursive macro", hostile, gguf.String("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"))
	set("output of 10^9 bytes", hostile, gguf.String("{{ 'x' * 1000000000 }}"))
	set("doubling string", hostile, gguf.String("{% set s = namespace(v='x') %}{% for i in range(64) %}{% set s.v = s.v + s.v %}{% endfor %}{{ s.v }}"))
	set("empty (ChatML fallback)", g.valid, gguf.String(""))
	set("not a string", ggufRefused, gguf.Uint32(7))
}

// vocab changes the tokenizer metadata.
func (g *builder) vocab() {
	r := ggufRefused
	base := g.b.model
	v, _ := base.get("tokenizer.ggml.tokens")
	tokens := slices.Clone(v.V.(gguf.Array).Values.([]string))
	tv, _ := base.get("tokenizer.ggml.token_type")
	types := slices.Clone(tv.V.(gguf.Array).Values.([]int32))
	n := len(tokens)
	setTokens := func(m *model, toks []string, typs []int32) {
		m.set("tokenizer.ggml.tokens", gguf.Strings(toks))
		m.set("tokenizer.ggml.token_type", gguf.Int32s(typs))
	}
	g.edit("vocab", "40 tokens more than embedding rows", r, func(m *model) {
		toks, typs := slices.Clone(tokens), slices.Clone(types)
		for i := range 40 {
			toks, typs = append(toks, fmt.Sprintf("extra%d", i)), append(typs, 1)
		}
		setTokens(m, toks, typs)
	})
	pads := 0
	for pads < n && strings.HasPrefix(tokens[n-1-pads], "[PAD") {
		pads++
	}
	if pads > 0 {
		g.edit("vocab", "padding tokens dropped (fewer tokens than rows)", g.valid, func(m *model) {
			setTokens(m, tokens[:n-pads], types[:n-pads])
		})
		g.edit("vocab", "a 60 KB token", g.valid, func(m *model) {
			toks := slices.Clone(tokens)
			toks[n-1] = strings.Repeat("é", 30000)
			setTokens(m, toks, types)
		})
		g.edit("vocab", "a 1 MB token", r, func(m *model) {
			toks := slices.Clone(tokens)
			toks[n-1] = strings.Repeat("é", 1<<19)
			setTokens(m, toks, types)
		})
	}
	// Odd but well-formed vocabularies: the tokenizer must cope (a prompt may come out short or empty).
	odd := ggufOddVocab
	if g.b.MTP {
		odd = ggufServeRefused
	}
	g.edit("vocab", "byte tokens renamed, no merges (only special tokens match)", odd, func(m *model) {
		toks := slices.Clone(tokens)
		for i := range toks {
			if types[i] == 1 {
				toks[i] = fmt.Sprintf("[UNUSED%d]", i)
			}
		}
		setTokens(m, toks, types)
		m.set("tokenizer.ggml.merges", gguf.Strings([]string{}))
	})
	g.edit("vocab", "every token the same", r, func(m *model) {
		toks := make([]string, n)
		for i := range toks {
			toks[i] = "a"
		}
		setTokens(m, toks, types)
	})
	g.edit("vocab", "one empty token", r, func(m *model) {
		toks := slices.Clone(tokens)
		toks[n/2] = ""
		setTokens(m, toks, types)
	})
	g.edit("vocab", "all tokens empty", r, func(m *model) { setTokens(m, make([]string, n), types) })
	g.edit("vocab", "no tokens", r, func(m *model) { setTokens(m, []string{}, []int32{}) })
	g.edit("vocab", "tokens as int32", r, func(m *model) { m.set("tokenizer.ggml.tokens", gguf.Int32s(types)) })
	g.edit("vocab", "tokens missing", r, func(m *model) { m.del("tokenizer.ggml.tokens") })
	g.edit("vocab", "token_type short", r, func(m *model) { m.set("tokenizer.ggml.token_type", gguf.Int32s(types[:n-1])) })
	g.edit("vocab", "token_type as uint32", r, func(m *model) {
		u := make([]uint32, n)
		for i, t := range types {
			u[i] = uint32(t)
		}
		m.set("tokenizer.ggml.token_type", gguf.Uint32s(u))
	})
	// Without token types every token is a normal one (llama.cpp's default too): specials are not split out.
	g.edit("vocab", "token_type missing", g.valid, func(m *model) { m.del("tokenizer.ggml.token_type") })
	g.edit("vocab", "scores short", r, func(m *model) { m.set("tokenizer.ggml.scores", gguf.Float32s(make([]float32, 3))) })
	g.edit("vocab", "merges missing", r, func(m *model) { m.del("tokenizer.ggml.merges") })
	g.edit("vocab", "merges empty", g.valid, func(m *model) { m.set("tokenizer.ggml.merges", gguf.Strings([]string{})) })
	g.edit("vocab", "merges garbage", r, func(m *model) {
		m.set("tokenizer.ggml.merges", gguf.Strings([]string{"nospace", " ", "a  b", "\xff \xfe", strings.Repeat("z", 1000) + " q"}))
	})
	for _, k := range []string{"bos_token_id", "eos_token_id", "padding_token_id"} {
		key := "tokenizer.ggml." + k
		g.edit("vocab", k+" = vocabulary size", r, func(m *model) { m.set(key, gguf.Uint32(uint32(n))) })
		g.edit("vocab", k+" = 2^32-1", r, func(m *model) { m.set(key, gguf.Uint32(math.MaxUint32)) })
	}
	g.edit("vocab", "eos_token_ids with -1", r, func(m *model) { m.set("tokenizer.ggml.eos_token_ids", gguf.Int32s([]int32{-1})) })
	g.edit("vocab", "eos_token_ids in range", g.valid, func(m *model) { m.set("tokenizer.ggml.eos_token_ids", gguf.Int32s([]int32{int32(n - 1)})) })
	g.edit("vocab", "tokenizer model llama", r, func(m *model) { m.set("tokenizer.ggml.model", gguf.String("llama")) })
	g.edit("vocab", "tokenizer model missing", r, func(m *model) { m.del("tokenizer.ggml.model") })
	// Adding a BOS token needs one: the converted bases have no bos_token_id (Qwen has none).
	_, hasBOS := base.get("tokenizer.ggml.bos_token_id")
	g.edit("vocab", "add_bos_token true", g.pick(hasBOS), func(m *model) { m.set("tokenizer.ggml.add_bos_token", gguf.Bool(true)) })
	g.edit("vocab", "add_bos_token true with a BOS", g.valid, func(m *model) {
		m.set("tokenizer.ggml.add_bos_token", gguf.Bool(true))
		m.set("tokenizer.ggml.bos_token_id", gguf.Uint32(uint32(n-1)))
	})
	g.edit("vocab", "add_bos_token uint8", r, func(m *model) { m.set("tokenizer.ggml.add_bos_token", gguf.Uint8(1)) })
}
