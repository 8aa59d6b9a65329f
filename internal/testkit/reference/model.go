package reference

import (
	"fmt"
	"slices"
	"strings"
)

// source is where the weights come from: a safetensors checkpoint, or tensors held in memory by tests.
type source interface {
	// shape returns a tensor's shape in PyTorch order.
	shape(name string) ([]int64, bool)
	// read returns a tensor's values converted to float32.
	read(name string) ([]float32, error)
	// names lists every tensor, in a deterministic order.
	names() []string
}

// layer is one decoder layer: token mixer (attention or gated delta net) then MLP or MoE, each pre-normed.
type layer struct {
	inNorm, postNorm []float32
	attn             *attention
	lin              *deltaNet
	mlp              *mlp
	moe              *moe
}

// Model is a loaded checkpoint ready for Forward.
type Model struct {
	Config      Config
	embed       []float32 // [Vocab×Hidden]
	finalNorm   []float32
	lmHead      linear
	layers      []layer
	rope        rope
	zeroCentred bool        // Qwen3.5: every Qwen3_5RMSNorm is (1 + w)
	embedLoras  []loraDelta // embedding LoRAs: row v gains Scale·B·A[:, v], A [R×Vocab], B [Hidden×R]

	linears map[string]*linear // HF weight name → layer, for attaching LoRA adapters
	obs     *linearObs         // shared by every linear layer of the model
}

// ObserveLinears calls fn with the input of every linear layer (matrix product with a weight) Forward, Step and
// Greedy compute, before it is used: weight is the HF weight name ("model.layers.0.self_attn.q_proj.weight",
// "lm_head.weight" also when it is tied to the embedding; the experts of a fused Qwen3.5-MoE layout are named
// "<prefix>.experts.E.gate_proj.weight" and so on, as in the unfused layout). x must not be modified or kept.
// nil stops observing. Tests use it to compute the statistics an importance matrix should hold.
func (m *Model) ObserveLinears(fn func(weight string, x []float32)) { m.obs.fn = fn }

// loader reads and shape-checks tensors, remembering the first error and which tensors were used.
type loader struct {
	src  source
	file string
	used map[string]bool
	err  error
	lin  map[string]*linear
	obs  *linearObs
}

func (ld *loader) fail(format string, a ...any) {
	if ld.err == nil {
		ld.err = &FormatError{File: ld.file, What: fmt.Sprintf(format, a...)}
	}
}

func (ld *loader) has(name string) bool {
	_, ok := ld.src.shape(name)
	return ok
}

// tensor reads name and checks its shape.
func (ld *loader) tensor(name string, shape ...int) []float32 {
	if ld.err != nil {
		return nil
	}
	got, ok := ld.src.shape(name)
	if !ok {
		ld.fail("missing tensor %q", name)
		return nil
	}
	want := make([]int64, len(shape))
	n := 1
	for i, s := range shape {
		want[i] = int64(s)
		n *= s
	}
	if !slices.Equal(got, want) {
		ld.fail("tensor %q has shape %v, expected %v", name, got, want)
		return nil
	}
	v, err := ld.src.read(name)
	if err != nil {
		if ld.err == nil {
			ld.err = fmt.Errorf("reference: tensor %q: %w", name, err)
		}
		return nil
	}
	if len(v) != n {
		ld.fail("tensor %q: read %d values, expected %d", name, len(v), n)
		return nil
	}
	ld.used[name] = true
	return v
}

type biasMode int

const (
	noBias biasMode = iota
	withBias
)

// linear reads prefix.weight [out×in] (and prefix.bias [out]) and registers it for adapters.
func (ld *loader) linear(dst *linear, prefix string, out, in int, bias biasMode) {
	*dst = linear{W: ld.tensor(prefix+".weight", out, in), Out: out, In: in, name: prefix + ".weight", obs: ld.obs}
	if bias == withBias {
		dst.B = ld.tensor(prefix+".bias", out)
	}
	ld.lin[prefix+".weight"] = dst
}

func (ld *loader) mlp(prefix string, hidden, ff int) *mlp {
	m := &mlp{}
	ld.mlpInto(m, prefix, hidden, ff)
	return m
}

func (ld *loader) mlpInto(m *mlp, prefix string, hidden, ff int) {
	ld.linear(&m.gate, prefix+".gate_proj", ff, hidden, noBias)
	ld.linear(&m.up, prefix+".up_proj", ff, hidden, noBias)
	ld.linear(&m.down, prefix+".down_proj", hidden, ff, noBias)
}

// newModel builds a Model from a parsed config and a weight source. file names the checkpoint in errors.
func newModel(cfg Config, src source, file string) (*Model, error) {
	ld := &loader{src: src, file: file, used: map[string]bool{}, lin: map[string]*linear{}, obs: &linearObs{}}
	m := &Model{Config: cfg, linears: ld.lin, obs: ld.obs}
	c := &m.Config
	qwen35 := c.Family == FamilyQwen35 || c.Family == FamilyQwen35MoE
	m.zeroCentred = qwen35
	p := "model."
	if qwen35 && ld.has("model.language_model.embed_tokens.weight") {
		p = "model.language_model." // Qwen3_5ForConditionalGeneration
	}
	d := c.Hidden
	m.embed = ld.tensor(p+"embed_tokens.weight", c.Vocab, d)
	m.finalNorm = ld.tensor(p+"norm.weight", d)
	if c.TieEmbeddings {
		m.lmHead = linear{W: m.embed, Out: c.Vocab, In: d, name: "lm_head.weight", obs: ld.obs}
		ld.used["lm_head.weight"] = true // transformers overwrites a stored lm_head with the tied embedding
	} else {
		ld.linear(&m.lmHead, "lm_head", c.Vocab, d, noBias)
	}
	var section []int
	if qwen35 {
		section = c.MRopeSection
		if section == nil {
			section = []int{11, 11, 10} // Qwen3_5TextRotaryEmbedding default
		}
	}
	m.rope = newRope(c.RotaryDim, c.RopeTheta, section)

	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		L := &m.layers[i]
		lp := fmt.Sprintf("%slayers.%d.", p, i)
		L.inNorm = ld.tensor(lp+"input_layernorm.weight", d)
		L.postNorm = ld.tensor(lp+"post_attention_layernorm.weight", d)
		if qwen35 && c.LayerTypes[i] == "linear_attention" {
			L.lin = ld.deltaNet(lp+"linear_attn", c)
		} else {
			L.attn = ld.attention(lp+"self_attn", c)
		}
		switch {
		case c.usesMoE(i):
			L.moe = ld.moe(lp+"mlp", c)
		default:
			L.mlp = ld.mlp(lp+"mlp", d, c.Intermediate)
		}
		if ld.err != nil {
			return nil, ld.err
		}
	}
	if ld.err != nil {
		return nil, ld.err
	}
	for _, n := range src.names() {
		// Ignored as transformers ignores them: the MTP block (_keys_to_ignore_on_load_unexpected), the vision
		// tower (not part of the text model) and rotary inv_freq buffers some older saves contain.
		if ld.used[n] || strings.HasPrefix(n, "mtp.") || strings.HasPrefix(n, "model.visual.") ||
			strings.HasPrefix(n, "visual.") || strings.HasSuffix(n, ".rotary_emb.inv_freq") {
			continue
		}
		return nil, &FormatError{File: file, What: fmt.Sprintf("unexpected tensor %q (not used by %s)", n, c.Architecture)}
	}
	return m, nil
}

func (ld *loader) attention(prefix string, c *Config) *attention {
	qwen35 := c.Family == FamilyQwen35 || c.Family == FamilyQwen35MoE
	a := &attention{heads: c.Heads, kv: c.KVHeads, headDim: c.HeadDim, eps: c.Eps, gated: qwen35, zeroCentred: qwen35}
	qOut := c.Heads * c.HeadDim
	if a.gated {
		qOut *= 2
	}
	qkvBias, oBias := noBias, noBias
	switch {
	case c.Family == FamilyQwen2:
		qkvBias = withBias // Qwen2Attention: q/k/v bias=True, o_proj bias=False
	case c.AttentionBias:
		qkvBias, oBias = withBias, withBias
	}
	ld.linear(&a.q, prefix+".q_proj", qOut, c.Hidden, qkvBias)
	ld.linear(&a.k, prefix+".k_proj", c.KVHeads*c.HeadDim, c.Hidden, qkvBias)
	ld.linear(&a.v, prefix+".v_proj", c.KVHeads*c.HeadDim, c.Hidden, qkvBias)
	ld.linear(&a.o, prefix+".o_proj", c.Hidden, c.Heads*c.HeadDim, oBias)
	if c.Family != FamilyQwen2 {
		a.qNorm = ld.tensor(prefix+".q_norm.weight", c.HeadDim)
		a.kNorm = ld.tensor(prefix+".k_norm.weight", c.HeadDim)
	}
	return a
}

func (ld *loader) deltaNet(prefix string, c *Config) *deltaNet {
	dn := &deltaNet{convK: c.ConvKernel, kHeads: c.LinKHeads, vHeads: c.LinVHeads, kDim: c.LinKDim,
		vDim: c.LinVDim, eps: c.Eps}
	keyDim, valDim := c.LinKHeads*c.LinKDim, c.LinVHeads*c.LinVDim
	convDim := 2*keyDim + valDim
	ld.linear(&dn.qkv, prefix+".in_proj_qkv", convDim, c.Hidden, noBias)
	ld.linear(&dn.z, prefix+".in_proj_z", valDim, c.Hidden, noBias)
	ld.linear(&dn.b, prefix+".in_proj_b", c.LinVHeads, c.Hidden, noBias)
	ld.linear(&dn.a, prefix+".in_proj_a", c.LinVHeads, c.Hidden, noBias)
	dn.conv = ld.tensor(prefix+".conv1d.weight", convDim, 1, c.ConvKernel)
	dn.dtBias = ld.tensor(prefix+".dt_bias", c.LinVHeads)
	dn.aLog = ld.tensor(prefix+".A_log", c.LinVHeads)
	dn.norm = ld.tensor(prefix+".norm.weight", c.LinVDim)
	ld.linear(&dn.out, prefix+".out_proj", c.Hidden, valDim, noBias)
	return dn
}

func (ld *loader) moe(prefix string, c *Config) *moe {
	m := &moe{topK: c.TopK, normTopK: c.NormTopK, experts: make([]mlp, c.Experts)}
	d, ff := c.Hidden, c.MoEIntermediate
	ld.linear(&m.router, prefix+".gate", c.Experts, d, noBias)
	if ld.has(prefix + ".experts.gate_up_proj") {
		// transformers v5 fused layout: gate_up_proj [E, 2·ff, d] (gate rows first), down_proj [E, d, ff].
		gu := ld.tensor(prefix+".experts.gate_up_proj", c.Experts, 2*ff, d)
		dn := ld.tensor(prefix+".experts.down_proj", c.Experts, d, ff)
		if ld.err != nil {
			return m
		}
		for e := range m.experts {
			base := e * 2 * ff * d
			ep := fmt.Sprintf("%s.experts.%d.", prefix, e)
			m.experts[e] = mlp{
				gate: linear{W: gu[base : base+ff*d], Out: ff, In: d, name: ep + "gate_proj.weight", obs: ld.obs},
				up:   linear{W: gu[base+ff*d : base+2*ff*d], Out: ff, In: d, name: ep + "up_proj.weight", obs: ld.obs},
				down: linear{W: dn[e*d*ff : (e+1)*d*ff], Out: d, In: ff, name: ep + "down_proj.weight", obs: ld.obs},
			}
		}
	} else {
		for e := range m.experts {
			ld.mlpInto(&m.experts[e], fmt.Sprintf("%s.experts.%d", prefix, e), d, ff)
		}
	}
	if c.Family == FamilyQwen35MoE {
		m.shared = ld.mlp(prefix+".shared_expert", d, c.SharedIntermediate)
		m.sharedGate = &linear{}
		ld.linear(m.sharedGate, prefix+".shared_expert_gate", 1, d, noBias)
	}
	return m
}

// Session is an incremental decoding state: the KV caches of the attention layers and the conv history and
// delta-rule state of the linear-attention layers. Feeding tokens one by one through Step gives exactly the
// logits of Forward over the whole sequence (each position only sees itself and earlier positions).
type Session struct {
	m     *Model
	pos   int
	attn  []attnCache
	delta []*deltaState
}

// NewSession starts decoding at position 0.
func (m *Model) NewSession() *Session {
	s := &Session{m: m, attn: make([]attnCache, len(m.layers)), delta: make([]*deltaState, len(m.layers))}
	for i := range m.layers {
		if m.layers[i].lin != nil {
			s.delta[i] = m.layers[i].lin.newState()
		}
	}
	return s
}

// Len is the number of tokens fed so far.
func (s *Session) Len() int { return s.pos }

// Step feeds the next token and returns the logits (Vocab wide) for the token after it. A token outside
// [0, Vocab) is a programmer error and panics.
func (s *Session) Step(token int) []float32 {
	m := s.m
	c := &m.Config
	d := c.Hidden
	if token < 0 || token >= c.Vocab {
		panic(fmt.Sprintf("reference: token %d at position %d outside vocabulary of %d", token, s.pos, c.Vocab))
	}
	x := slices.Clone(m.embed[token*d : (token+1)*d])
	for _, e := range m.embedLoras {
		for j := 0; j < d; j++ {
			var sum float64
			for r := 0; r < e.R; r++ {
				sum += float64(e.B[j*e.R+r]) * float64(e.A[r*c.Vocab+token])
			}
			x[j] = float32(float64(x[j]) + e.Scale*sum)
		}
	}
	for i := range m.layers {
		L := &m.layers[i]
		h := m.norm(x, L.inNorm)
		if L.lin != nil {
			addInto(x, L.lin.step(h, s.delta[i]))
		} else {
			addInto(x, L.attn.step(h, &s.attn[i], &m.rope))
		}
		h = m.norm(x, L.postNorm)
		if L.moe != nil {
			addInto(x, L.moe.apply(h))
		} else {
			addInto(x, L.mlp.apply(h))
		}
	}
	s.pos++
	return m.lmHead.apply(m.norm(x, m.finalNorm))
}

func (m *Model) norm(x, w []float32) []float32 {
	if m.zeroCentred {
		return rmsNormZC(x, w, m.Config.Eps)
	}
	return rmsNorm(x, w, m.Config.Eps)
}

// Forward returns the logits (Vocab wide) at every position of tokens, as Qwen*ForCausalLM.forward with
// position ids 0..T-1 (computed position by position through a Session). A token outside [0, Vocab) is a
// programmer error and panics.
func (m *Model) Forward(tokens []int) [][]float32 {
	s := m.NewSession()
	logits := make([][]float32, len(tokens))
	for t, id := range tokens {
		logits[t] = s.Step(id)
	}
	return logits
}

// Greedy appends n argmax tokens to prompt and returns the n new tokens. Ties pick the lowest token id, as
// torch.argmax does.
func (m *Model) Greedy(prompt []int, n int) []int {
	if len(prompt) == 0 {
		panic("reference: Greedy needs a non-empty prompt")
	}
	s := m.NewSession()
	var last []float32
	for _, id := range prompt {
		last = s.Step(id)
	}
	out := make([]int, 0, n)
	for range n {
		next := Argmax(last)
		out = append(out, next)
		if len(out) < n {
			last = s.Step(next)
		}
	}
	return out
}

// Argmax returns the index of the largest value (the first one on ties).
func Argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
