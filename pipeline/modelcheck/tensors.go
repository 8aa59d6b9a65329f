package modelcheck

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// role is what the engine does with a tensor, which decides the data types it may have.
type role int

const (
	roleMatrix  role = iota // a weight of a matrix multiplication (ggml_mul_mat)
	roleExperts             // stacked expert weights (ggml_mul_mat_id)
	roleEmbed               // the token embedding: rows gathered by ggml_get_rows, and the output matrix when tied
	roleVector              // norms, biases and gates: F32 operands of element-wise operations
	roleConv                // the gated-delta-net convolution kernel: ggml_ssm_conv takes F32 only
)

// matmulTypes are the weight types ggml's CPU backend multiplies (type_traits_cpu has a vec_dot for them and
// get_rows dequantizes them) and Ollama's loader sizes like ggml (fs/ggml TypeSize; TQ1_0/TQ2_0 are 0 there).
var matmulTypes = []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ4_0, gguf.TypeQ4_1,
	gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0, gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K,
	gguf.TypeQ6_K, gguf.TypeIQ2_XXS, gguf.TypeIQ2_XS, gguf.TypeIQ3_XXS, gguf.TypeIQ1_S, gguf.TypeIQ4_NL,
	gguf.TypeIQ3_S, gguf.TypeIQ2_S, gguf.TypeIQ4_XS, gguf.TypeIQ1_M, gguf.TypeMXFP4}

func (r role) allows(t gguf.Type) bool {
	switch r {
	case roleVector, roleConv:
		return t == gguf.TypeF32
	}
	return slices.Contains(matmulTypes, t)
}

func (r role) types() string {
	switch r {
	case roleVector, roleConv:
		return "F32"
	}
	return "a float or block-quantized weight type (not " + strings.Join([]string{"Q8_1", "Q8_K", "TQ1_0", "TQ2_0", "integer", "F64"}, ", ") + ")"
}

// dim is one expected dimension and how it follows from the hyper-parameters.
type dim struct {
	n    uint64
	expr string
}

// want is an expected tensor.
type want struct {
	dims     []dim
	role     role
	required bool
	alt      string // another name that stands in for this tensor (exactly one of the two must exist)
}

func (w *want) shape() []uint64 {
	s := make([]uint64, len(w.dims))
	for i, d := range w.dims {
		s[i] = d.n
	}
	return s
}

func (w *want) exprs() string {
	parts := make([]string, len(w.dims))
	for i, d := range w.dims {
		parts[i] = d.expr
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// layout is the list of tensors a model must and may have.
type layout struct {
	order  []string
	byName map[string]*want
}

func (l *layout) add(name string, r role, required bool, dims ...dim) *want {
	w := &want{dims: dims, role: r, required: required}
	if _, dup := l.byName[name]; !dup {
		l.order = append(l.order, name)
	}
	l.byName[name] = w
	return w
}

// layout builds the tensors of c.arch with hyper-parameters h; vocab is the number of embedding rows.
func (c *checker) layout(h *hparams, vocab uint64) *layout {
	l := &layout{byName: map[string]*want{}}
	E := dim{h.embd, "embedding_length"}
	V := dim{vocab, "vocabulary rows"}
	l.add("token_embd.weight", roleEmbed, true, E, V)
	l.add("output_norm.weight", roleVector, true, E)
	l.add("output.weight", roleMatrix, false, E, V)
	if c.arch == "qwen2" {
		l.add("output.bias", roleVector, false, V)
	}
	isHybrid := hybrid(c.arch)
	hd := h.headDim
	qOut := dim{h.heads * hd, "head_count × key_length"}
	if isHybrid {
		qOut = dim{2 * h.heads * hd, "2 × head_count × key_length (query and gate)"}
	}
	attnOut := dim{h.heads * hd, "head_count × key_length"}
	HD := dim{hd, "key_length"}

	for i := 0; i < h.nAll; i++ {
		p := "blk." + strconv.Itoa(i) + "."
		mtp := i >= h.n
		l.add(p+"attn_norm.weight", roleVector, true, E)
		if isHybrid {
			l.add(p+"post_attention_norm.weight", roleVector, true, E)
		} else {
			l.add(p+"ffn_norm.weight", roleVector, true, E)
		}
		if mtp || !h.recurrent[i] {
			kv := dim{h.kvHeads[i] * hd, "head_count_kv × key_length"}
			l.add(p+"attn_q.weight", roleMatrix, true, E, qOut)
			l.add(p+"attn_k.weight", roleMatrix, true, E, kv)
			l.add(p+"attn_v.weight", roleMatrix, true, E, kv)
			l.add(p+"attn_output.weight", roleMatrix, true, attnOut, E)
			l.add(p+"attn_q.bias", roleVector, false, qOut)
			l.add(p+"attn_k.bias", roleVector, false, kv)
			l.add(p+"attn_v.bias", roleVector, false, kv)
			l.add(p+"attn_output.bias", roleVector, false, E)
			if c.arch != "qwen2" {
				l.add(p+"attn_q_norm.weight", roleVector, true, HD)
				l.add(p+"attn_k_norm.weight", roleVector, true, HD)
			}
		} else {
			S, R := h.ssmState, h.ssmVHeads
			conv := dim{2*S*h.ssmGroups + S*R, "2 × ssm.state_size × ssm.group_count + ssm.inner_size"}
			inner := dim{S * R, "ssm.inner_size"}
			Rd := dim{R, "ssm.time_step_rank"}
			l.add(p+"attn_qkv.weight", roleMatrix, true, E, conv)
			l.add(p+"attn_gate.weight", roleMatrix, true, E, inner)
			l.add(p+"ssm_conv1d.weight", roleConv, true, dim{h.ssmConv, "ssm.conv_kernel"}, conv)
			l.add(p+"ssm_dt.bias", roleVector, true, Rd).alt = p + "ssm_dt"
			l.add(p+"ssm_dt", roleVector, false, Rd).alt = p + "ssm_dt.bias"
			l.add(p+"ssm_a", roleVector, true, Rd)
			l.add(p+"ssm_beta.weight", roleMatrix, true, E, Rd)
			l.add(p+"ssm_alpha.weight", roleMatrix, true, E, Rd)
			l.add(p+"ssm_norm.weight", roleVector, true, dim{S, "ssm.state_size"})
			l.add(p+"ssm_out.weight", roleMatrix, true, inner, E)
		}
		if h.moe {
			X := dim{h.experts, "expert_count"}
			FE := dim{h.ffExp, "expert_feed_forward_length"}
			l.add(p+"ffn_gate_inp.weight", roleMatrix, true, E, X)
			l.add(p+"ffn_gate_exps.weight", roleExperts, true, E, FE, X)
			l.add(p+"ffn_up_exps.weight", roleExperts, true, E, FE, X)
			l.add(p+"ffn_down_exps.weight", roleExperts, true, FE, E, X)
			if c.arch == "qwen35moe" {
				FS := dim{h.ffShared, "expert_shared_feed_forward_length"}
				l.add(p+"ffn_gate_inp_shexp.weight", roleVector, true, E)
				l.add(p+"ffn_gate_shexp.weight", roleMatrix, true, E, FS)
				l.add(p+"ffn_up_shexp.weight", roleMatrix, true, E, FS)
				l.add(p+"ffn_down_shexp.weight", roleMatrix, true, FS, E)
			}
		} else {
			FF := dim{h.ff, "feed_forward_length"}
			l.add(p+"ffn_gate.weight", roleMatrix, true, E, FF)
			l.add(p+"ffn_up.weight", roleMatrix, true, E, FF)
			l.add(p+"ffn_down.weight", roleMatrix, true, FF, E)
		}
		if mtp {
			l.add(p+"nextn.eh_proj.weight", roleMatrix, true, dim{2 * h.embd, "2 × embedding_length"}, E)
			l.add(p+"nextn.enorm.weight", roleVector, true, E)
			l.add(p+"nextn.hnorm.weight", roleVector, true, E)
			l.add(p+"nextn.embed_tokens.weight", roleEmbed, false, E, V)
			l.add(p+"nextn.shared_head_head.weight", roleMatrix, false, E, V)
			l.add(p+"nextn.shared_head_norm.weight", roleVector, false, E)
		}
	}
	return l
}

// trim drops trailing dimensions of 1 (a {n} tensor may be stored as [n 1], as llama.cpp's loader accepts).
func trim(s []uint64) []uint64 {
	for len(s) > 1 && s[len(s)-1] == 1 {
		s = s[:len(s)-1]
	}
	return s
}

// checkTensors compares the tensors with the layout the hyper-parameters imply.
func (c *checker) checkTensors(h *hparams) {
	te, ok := c.tensors["token_embd.weight"]
	switch {
	case !ok:
		c.tensorf("token_embd.weight", "missing")
		return
	case len(trim(te.Shape)) != 2 || te.Shape[1] == 0:
		c.tensorf("token_embd.weight", "shape %v, want {embedding_length %d, vocabulary rows > 0}", te.Shape, h.embd)
		return
	}
	h.vocabRows = te.Shape[1]
	l := c.layout(h, h.vocabRows)
	// In the layout's order (global tensors, then block by block as the graph uses them), so the first problem
	// reported does not depend on how the file orders its tensors.
	for _, name := range l.order {
		w := l.byName[name]
		t, have := c.tensors[name]
		if !have {
			if w.alt != "" {
				if _, haveAlt := c.tensors[w.alt]; !haveAlt && w.required {
					c.tensorf(name, "missing (or %s), want shape %v = %s", w.alt, w.shape(), w.exprs())
				}
			} else if w.required {
				c.tensorf(name, "missing, want shape %v = %s", w.shape(), w.exprs())
			}
			continue
		}
		if w.alt != "" && w.required {
			if _, haveAlt := c.tensors[w.alt]; haveAlt {
				c.tensorf(name, "present together with %s (want one of the two)", w.alt)
			}
		}
		want := w.shape()
		if got := trim(t.Shape); !slices.Equal(got, want) {
			msg := fmt.Sprintf("shape %v, want %v = %s", t.Shape, want, w.exprs())
			if len(got) == 2 && len(want) == 2 && got[0] == want[1] && got[1] == want[0] {
				msg += "; it is transposed"
			}
			c.tensorf(name, "%s", msg)
			continue
		}
		if !w.role.allows(t.Type) {
			c.tensorf(name, "type %s, want %s", t.Type, w.role.types())
		}
	}
	for _, t := range c.m.Tensors {
		if _, ok := l.byName[t.Name]; !ok {
			c.unexpected(h, t.Name)
		}
	}
}

// unexpected reports a tensor that is not part of the architecture. Ollama's loader would place a tensor by the
// first number in its name (an index past block_count panics), and llama.cpp refuses extra tensors.
func (c *checker) unexpected(h *hparams, name string) {
	switch {
	case strings.HasPrefix(name, "v.") || strings.HasPrefix(name, "mm."):
		c.add(Problem{Tensor: name, Unsupported: true, Msg: "vision tower tensors are not supported in the model file (llama.cpp keeps them in a separate mmproj file)"})
		return
	case strings.HasPrefix(name, "blk."):
		rest := name[len("blk."):]
		if i := strings.IndexByte(rest, '.'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil && n >= h.nAll {
				c.tensorf(name, "layer %d is beyond block_count %d", n, h.nAll)
				return
			}
		}
	}
	c.tensorf(name, "not a tensor of a %s model with these hyper-parameters", c.arch)
}
