package merge

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// opKind is one step applied to a base tensor.
type opKind uint8

const (
	opReplace opKind = iota // the adapter's saved tensor replaces the value
	opLoRA                  // x += s·(U·V) row by row
	opDoRARow               // LoRA, then each row scaled by m[row]/‖row‖ (Linear, [out,in])
	opDoRACol               // LoRA, then each column scaled by m[col]/‖col‖ (Embedding; Conv1D layout)
	opAddVec                // x += s·v (lora_B.bias into the base bias)
)

var opNames = [...]string{"replace", "lora", "dora", "dora", "lora-bias"}

// op is one adapter's contribution to one base tensor. For LoRA kinds, row i of the delta is
// Σ_k U[i,k]·V[k,:]: U = B, V = A for a Linear stored [out,in]; U = Aᵀ, V = Bᵀ when transposed (Embedding,
// Conv1D layout).
type op struct {
	kind       opKind
	ad         int    // index of the adapter
	module     string // module path as the adapter names it
	a, b       string // adapter tensor keys (LoRA factors; a holds the replacement or the bias vector)
	mag        string // DoRA magnitude key
	transposed bool
	embedding  bool
	rank       int
	alpha      float64
	scale      float64 // weight · alpha/r (or alpha/√r), the full multiplier of U·V
	rankKey    string  // rank_pattern key that set r
	alphaKey   string  // alpha_pattern key that set alpha
}

// plan is what happens to one tensor the merged source exposes.
type plan struct {
	info pipeline.TensorInfo // name, dtype, shape as exposed
	src  string              // base tensor holding the initial value (the embedding for an untied lm_head)
	ops  []op
}

// planner builds the plans of all adapters against one base.
type planner struct {
	base      map[string]pipeline.TensorInfo
	embed     string // embedding tensor name, "" if none
	tied      bool   // base ties lm_head to the embedding and stores no lm_head.weight
	tieFlag   bool   // config.json tie_word_embeddings (transformers' default true)
	plans     map[string]*plan
	adapters  []Adapter
	notes     []string
	zero      map[string]bool // adapter tensor (adapter index + key) found all-zero by the scan
	nonFinite error
	baseDesc  string // the base's architecture, for messages (describeBase)
}

const lmHead = "lm_head.weight"

// layoutPrefixes are the paths under which Qwen checkpoints keep the text model: CausalLM ("model."),
// Qwen3.5 / VL ConditionalGeneration ("model.language_model."), and older VL layouts ("language_model.model.").
var layoutPrefixes = []string{"model.language_model.", "language_model.model.", "model."}

// resolve maps a tensor path written by an adapter to the base tensor it names, trying the other text-model
// layouts so a CausalLM adapter fits a ConditionalGeneration base and back.
func (p *planner) resolve(name string) (string, bool) {
	if _, ok := p.base[name]; ok {
		return name, true
	}
	for _, pre := range layoutPrefixes {
		if !strings.HasPrefix(name, pre) {
			continue
		}
		core := name[len(pre):]
		for _, alt := range layoutPrefixes {
			if _, ok := p.base[alt+core]; ok {
				return alt + core, true
			}
		}
		break
	}
	if rest, ok := strings.CutPrefix(name, "language_model."); ok && strings.HasPrefix(rest, "lm_head.") {
		if _, ok := p.base[rest]; ok {
			return rest, true
		}
	}
	return "", false
}

func (p *planner) planFor(name string) *plan {
	pl := p.plans[name]
	if pl == nil {
		info := p.base[name]
		pl = &plan{info: info, src: name}
		if name == lmHead && p.tied {
			pl.src = p.embed
		}
		p.plans[name] = pl
	}
	return pl
}

// modTensors gathers one module's LoRA tensors.
type modTensors struct {
	a, b, bias, embA, embB, mag *safetensors.TensorInfo
}

func (m *modTensors) set(r role, t *safetensors.TensorInfo) bool {
	slot := map[role]**safetensors.TensorInfo{roleA: &m.a, roleB: &m.b, roleBBias: &m.bias, roleEmbA: &m.embA, roleEmbB: &m.embB, roleMag: &m.mag}[r]
	if *slot != nil {
		return false
	}
	*slot = t
	return true
}

// addAdapter plans every tensor of adapter ai.
func (p *planner) addAdapter(ai int) error {
	a := p.adapters[ai]
	cfg := a.Config
	dir := a.Dir
	mods := map[string]*modTensors{}
	var fulls []safetensors.TensorInfo
	unprefixed := 0
	tensors := a.st.Tensors()
	for i := range tensors {
		t := &tensors[i]
		rel, ok := strings.CutPrefix(t.Name, peftPrefix)
		if !ok {
			unprefixed++
		}
		module, r, ok := classify(rel)
		if !ok {
			return formatErr(dir, "tensor %q %v is not a LoRA tensor phonellm knows (lora_A.weight, lora_B.weight, lora_B.bias, lora_embedding_A/B, lora_magnitude_vector)", t.Name, t.Shape)
		}
		if !t.DType.Float() {
			return unsupported(dir, "tensor %q has dtype %s; only F32, F16 and BF16 adapter weights can be merged", t.Name, t.DType)
		}
		if r == roleFull {
			fulls = append(fulls, *t)
			continue
		}
		m := mods[module]
		if m == nil {
			m = &modTensors{}
			mods[module] = m
		}
		if !m.set(r, t) {
			return formatErr(dir, "module %q has two tensors for the same role (second: %q)", module, t.Name)
		}
	}
	if unprefixed > 0 {
		p.notes = append(p.notes, fmt.Sprintf("%s: %d tensor keys lack PEFT's %q prefix; read as model paths", dir, unprefixed, peftPrefix))
	}
	for _, m := range cfg.ModulesToSave {
		found := false
		for _, t := range fulls {
			mod, _, _ := classify(strings.TrimPrefix(t.Name, peftPrefix))
			mod = strings.TrimSuffix(strings.TrimSuffix(mod, ".weight"), ".bias")
			found = found || mod == m || strings.HasSuffix(mod, "."+m)
		}
		if !found {
			return formatErr(dir, "adapter_config.json lists %q in modules_to_save but %s holds no saved %s tensor (incomplete adapter?)", m, AdapterWeightsName, m)
		}
	}
	names := make([]string, 0, len(mods))
	for k := range mods {
		names = append(names, k)
	}
	slices.Sort(names)
	fullNames := make([]string, len(fulls))
	for i, t := range fulls {
		fullNames[i], _, _ = classify(strings.TrimPrefix(t.Name, peftPrefix))
	}
	if err := p.checkModules(ai, names, fullNames); err != nil {
		return err
	}
	added := 0
	// Saved whole tensors first: PEFT loads them into the model before any LoRA delta is merged on top.
	for _, t := range fulls {
		if err := p.addFull(ai, t); err != nil {
			return err
		}
		added++
	}
	for _, module := range names {
		m := mods[module]
		var err error
		switch {
		case m.a != nil || m.b != nil:
			err = p.addLinear(ai, module, m)
		case m.embA != nil || m.embB != nil:
			err = p.addEmbedding(ai, module, m)
		default:
			err = formatErr(dir, "module %q has a lora_magnitude_vector or lora_B.bias but no lora_A/lora_B pair", module)
		}
		if err != nil {
			return err
		}
		added++
	}
	if added == 0 {
		return formatErr(dir, "%s holds no tensors: the adapter would change nothing", AdapterWeightsName)
	}
	// A list of target modules that names a module the base does not have means the adapter was made for
	// another architecture (or the list is wrong); PEFT itself only notices when nothing matches at all.
	for _, t := range cfg.TargetModules {
		if !p.baseHasModule(t) {
			return p.archError(ai, names, "adapter_config.json target_modules lists %q, but the base has no module of that name", t)
		}
	}
	return p.checkCoverage(ai, names)
}

func (p *planner) baseHasModule(target string) bool {
	for name := range p.base {
		mod := strings.TrimSuffix(strings.TrimSuffix(name, ".weight"), ".bias")
		if mod == target || strings.HasSuffix(mod, "."+target) {
			return true
		}
	}
	return false
}

func (p *planner) missingBase(ai int, key string, shape []int64, want string) error {
	return formatErr(p.adapters[ai].Dir, "adapter tensor %q %v needs base tensor %q, which the base checkpoint does not have (adapter for another architecture, or a different model layout?)", key, shape, want)
}

func (p *planner) addFull(ai int, t safetensors.TensorInfo) error {
	a := p.adapters[ai]
	module, _, _ := classify(strings.TrimPrefix(t.Name, peftPrefix))
	name, ok := p.resolve(module)
	if !ok {
		return p.missingBase(ai, t.Name, t.Shape, module)
	}
	bi := p.base[name]
	if !slices.Equal(bi.Shape, t.Shape) {
		return formatErr(a.Dir, "saved tensor %q is %v but base tensor %q is %v (resized vocabulary or another model size?)", t.Name, t.Shape, name, bi.Shape)
	}
	if a.Weight != 1 {
		return unsupported(a.Dir, "adapter weight %v with a saved full tensor (%q): a replacement has no weighted form", a.Weight, t.Name)
	}
	pl := p.planFor(name)
	pl.ops = append(pl.ops, op{kind: opReplace, ad: ai, module: module, a: t.Name})
	return nil
}

// rankAlpha checks the factors' rank against the config and returns r, alpha and the scale.
func (p *planner) rankAlpha(ai int, module string, aT, bT *safetensors.TensorInfo, aRank, bRank int64) (op, error) {
	a := p.adapters[ai]
	if aRank != bRank {
		return op{}, formatErr(a.Dir, "rank mismatch in module %q: %q is %v (rank %d) but %q is %v (rank %d)", module, aT.Name, aT.Shape, aRank, bT.Name, bT.Shape, bRank)
	}
	want, rkey := a.Config.RankFor(module)
	if int64(want) != aRank {
		src := "r"
		if rkey != "" {
			src = fmt.Sprintf("rank_pattern[%q]", rkey)
		}
		return op{}, formatErr(a.Dir, "rank mismatch in module %q: adapter_config.json %s = %d but %q is %v", module, src, want, aT.Name, aT.Shape)
	}
	alpha, akey := a.Config.AlphaFor(module)
	s := a.Weight * a.Config.Scaling(want, alpha)
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return op{}, formatErr(a.Dir, "module %q: scaling %v is not finite", module, s)
	}
	return op{ad: ai, module: module, rank: want, alpha: alpha, scale: s, rankKey: rkey, alphaKey: akey}, nil
}

func (p *planner) checkTarget(ai int, module, key string) error {
	a := p.adapters[ai]
	if !a.Config.Targets(module) {
		return formatErr(a.Dir, "tensor %q belongs to module %q, which adapter_config.json (target_modules, layers_to_transform, exclude_modules) does not select; PEFT would not load it", key, module)
	}
	return nil
}

func (p *planner) addLinear(ai int, module string, m *modTensors) error {
	a := p.adapters[ai]
	dir := a.Dir
	if m.a == nil || m.b == nil {
		have := m.a
		if have == nil {
			have = m.b
		}
		return formatErr(dir, "module %q has %q but not its partner lora_A/lora_B tensor", module, have.Name)
	}
	if len(m.a.Shape) != 2 || len(m.b.Shape) != 2 {
		return formatErr(dir, "module %q: lora_A %v and lora_B %v must both be 2-D ([r,in] and [out,r])", module, m.a.Shape, m.b.Shape)
	}
	if err := p.checkTarget(ai, module, m.a.Name); err != nil {
		return err
	}
	o, err := p.rankAlpha(ai, module, m.a, m.b, m.a.Shape[0], m.b.Shape[1])
	if err != nil {
		return err
	}
	in, out := m.a.Shape[1], m.b.Shape[0]
	name, ok := p.resolve(module + ".weight")
	if !ok {
		return p.missingBase(ai, m.a.Name, m.a.Shape, module+".weight")
	}
	bi := p.base[name]
	if len(bi.Shape) != 2 {
		return formatErr(dir, "module %q: base tensor %q is %v, want a 2-D Linear weight", module, name, bi.Shape)
	}
	normal := bi.Shape[0] == out && bi.Shape[1] == in
	trans := bi.Shape[0] == in && bi.Shape[1] == out
	switch {
	case !normal && !trans:
		return formatErr(dir, "shape mismatch in module %q: lora_B %v · lora_A %v is [%d %d] but base tensor %q is %v (adapter for another model size?)", module, m.b.Shape, m.a.Shape, out, in, name, bi.Shape)
	case !normal && !a.Config.FanInFanOut:
		return formatErr(dir, "module %q: base tensor %q is %v, stored [in,out] (Conv1D), but adapter_config.json has fan_in_fan_out=false", module, name, bi.Shape)
	case !trans && a.Config.FanInFanOut:
		p.notes = append(p.notes, fmt.Sprintf("%s: fan_in_fan_out=true ignored for %q: the base stores it [out,in] (nn.Linear), and PEFT resets the flag for nn.Linear", dir, name))
	}
	o.transposed = trans && (!normal || a.Config.FanInFanOut)
	o.a, o.b = m.a.Name, m.b.Name
	o.kind = opLoRA
	if err := p.addDoRA(ai, &o, m, out); err != nil {
		return err
	}
	pl := p.planFor(name)
	pl.ops = append(pl.ops, o)
	if m.bias != nil || a.Config.LoraBias {
		return p.addBias(ai, module, m, o, out)
	}
	return nil
}

// addDoRA turns o into a DoRA op when the module has a magnitude vector of n entries.
func (p *planner) addDoRA(ai int, o *op, m *modTensors, n int64) error {
	a := p.adapters[ai]
	switch {
	case m.mag == nil && a.Config.DoRA:
		return formatErr(a.Dir, "adapter_config.json has use_dora=true but module %q has no lora_magnitude_vector", o.module)
	case m.mag == nil:
		return nil
	case !a.Config.DoRA:
		return formatErr(a.Dir, "module %q has %q but adapter_config.json has use_dora=false", o.module, m.mag.Name)
	case len(m.mag.Shape) != 1 || m.mag.Shape[0] != n:
		return formatErr(a.Dir, "module %q: DoRA magnitude %q is %v, want [%d]", o.module, m.mag.Name, m.mag.Shape, n)
	case a.Weight != 1:
		return unsupported(a.Dir, "adapter weight %v with DoRA (module %q): DoRA renormalises the weight, so a weighted merge is not defined", a.Weight, o.module)
	}
	o.mag = m.mag.Name
	if o.transposed {
		o.kind = opDoRACol
	} else {
		o.kind = opDoRARow
	}
	return nil
}

func (p *planner) addBias(ai int, module string, m *modTensors, o op, out int64) error {
	a := p.adapters[ai]
	switch {
	case m.bias == nil:
		return formatErr(a.Dir, "adapter_config.json has lora_bias=true but module %q has no lora_B.bias", module)
	case !a.Config.LoraBias:
		return formatErr(a.Dir, "module %q has %q but adapter_config.json has lora_bias=false", module, m.bias.Name)
	case len(m.bias.Shape) != 1 || m.bias.Shape[0] != out:
		return formatErr(a.Dir, "module %q: %q is %v, want [%d]", module, m.bias.Name, m.bias.Shape, out)
	}
	name, ok := p.resolve(module + ".bias")
	if !ok {
		return formatErr(a.Dir, "module %q has %q but the base Linear has no bias tensor %q to add it to", module, m.bias.Name, module+".bias")
	}
	if bi := p.base[name]; len(bi.Shape) != 1 || bi.Shape[0] != out {
		return formatErr(a.Dir, "module %q: base bias %q is %v, want [%d]", module, name, bi.Shape, out)
	}
	o.kind, o.a, o.b, o.mag = opAddVec, m.bias.Name, "", ""
	pl := p.planFor(name)
	pl.ops = append(pl.ops, o)
	return nil
}

func (p *planner) addEmbedding(ai int, module string, m *modTensors) error {
	a := p.adapters[ai]
	dir := a.Dir
	if m.embA == nil || m.embB == nil || m.a != nil || m.b != nil || m.bias != nil {
		return formatErr(dir, "module %q: an embedding LoRA needs exactly lora_embedding_A and lora_embedding_B", module)
	}
	if len(m.embA.Shape) != 2 || len(m.embB.Shape) != 2 {
		return formatErr(dir, "module %q: lora_embedding_A %v and lora_embedding_B %v must both be 2-D ([r,vocab] and [dim,r])", module, m.embA.Shape, m.embB.Shape)
	}
	if err := p.checkTarget(ai, module, m.embA.Name); err != nil {
		return err
	}
	o, err := p.rankAlpha(ai, module, m.embA, m.embB, m.embA.Shape[0], m.embB.Shape[1])
	if err != nil {
		return err
	}
	vocab, dim := m.embA.Shape[1], m.embB.Shape[0]
	name, ok := p.resolve(module + ".weight")
	if !ok {
		return p.missingBase(ai, m.embA.Name, m.embA.Shape, module+".weight")
	}
	bi := p.base[name]
	if len(bi.Shape) != 2 || bi.Shape[0] != vocab || bi.Shape[1] != dim {
		return formatErr(dir, "shape mismatch in module %q: (lora_embedding_B %v · lora_embedding_A %v)ᵀ is [%d %d] but base tensor %q is %v", module, m.embB.Shape, m.embA.Shape, vocab, dim, name, bi.Shape)
	}
	// peft/tuners/lora/layer.py Embedding.get_delta_weight: transpose(B @ A, True) * scaling.
	o.kind, o.transposed, o.embedding = opLoRA, true, true
	o.a, o.b = m.embA.Name, m.embB.Name
	if err := p.addDoRA(ai, &o, m, dim); err != nil {
		return err
	}
	pl := p.planFor(name)
	pl.ops = append(pl.ops, o)
	return nil
}

// finishTied unties (or keeps tied) the head of a tied-embedding base after every adapter is planned. It
// returns whether the merged source is untied.
func (p *planner) finishTied() (bool, error) {
	if !p.tied {
		// A checkpoint that stores lm_head.weight but still says tie_word_embeddings=true is re-tied by
		// transformers on load, which would undo a change to either tensor: untie it in the config.
		head, emb := p.plans[lmHead], p.plans[p.embed]
		if p.tieFlag && p.embed != "" && (head != nil && len(head.ops) > 0 || emb != nil && len(emb.ops) > 0) {
			p.notes = append(p.notes, fmt.Sprintf("base stores lm_head.weight but sets tie_word_embeddings=true, and the adapter changes %s: the merged config sets tie_word_embeddings=false so loading does not re-tie them", describeTied(head, emb)))
			return true, nil
		}
		return false, nil
	}
	head, emb := p.plans[lmHead], p.plans[p.embed]
	if (head == nil || len(head.ops) == 0) && (emb == nil || len(emb.ops) == 0) {
		delete(p.plans, lmHead)
		return false, nil
	}
	keep := true
	for _, pl := range []*plan{head, emb} {
		if pl == nil {
			continue
		}
		for _, o := range pl.ops {
			if o.kind != opReplace || !p.adapters[o.ad].Config.EnsureWeightTying {
				keep = false
			}
		}
	}
	if keep {
		// ensure_weight_tying: PEFT trained one shared copy for both; keep them tied.
		if head != nil {
			e := p.planFor(p.embed)
			e.ops = append(e.ops, head.ops...)
			delete(p.plans, lmHead)
		}
		p.notes = append(p.notes, fmt.Sprintf("base ties lm_head to %s and the adapter was trained with ensure_weight_tying: the saved tensor replaces the shared weight, which stays tied", p.embed))
		return false, nil
	}
	h := p.planFor(lmHead)
	h.info = p.base[p.embed]
	h.info.Name = lmHead
	h.info.Shape = slices.Clone(h.info.Shape)
	h.src = p.embed
	p.notes = append(p.notes, fmt.Sprintf("base ties lm_head to %s and the adapter changes %s: the merged model is untied (lm_head.weight written separately, tie_word_embeddings=false)", p.embed, describeTied(head, emb)))
	return true, nil
}

func describeTied(head, emb *plan) string {
	var parts []string
	if head != nil && len(head.ops) > 0 {
		parts = append(parts, "the head")
	}
	if emb != nil && len(emb.ops) > 0 {
		parts = append(parts, "the embedding")
	}
	return strings.Join(parts, " and ")
}
