package tinymodel

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// AdapterSpec describes a PEFT LoRA adapter for a generated base model.
// Unlike a freshly initialised adapter (lora_B = 0) every factor is random,
// so merging it changes the weights measurably.
type AdapterSpec struct {
	Seed  uint64
	Rank  int     // r (default 8)
	Alpha float64 // lora_alpha (default 16)
	// TargetModules are module-name suffixes as in PEFT's target_modules
	// (default q_proj, k_proj, v_proj, o_proj). "embed_tokens" adds an
	// embedding LoRA (lora_embedding_A/B), "lm_head" a LoRA on the head.
	TargetModules []string
	// RankPattern / AlphaPattern override r / alpha for modules whose name
	// matches (.*\.)?(key)$, the first matching key in sorted order.
	RankPattern   map[string]int
	AlphaPattern  map[string]float64
	Layers        []int    // layers_to_transform (nil: all layers)
	RSLoRA        bool     // use_rslora: scaling alpha/sqrt(r)
	DoRA          bool     // use_dora: adds lora_magnitude_vector per Linear
	ModulesToSave []string // full replacements: "lm_head", "embed_tokens"
	// TextOnly writes Qwen3.5 keys as a Qwen3_5ForCausalLM training run
	// would (model.layers...) instead of model.language_model.layers...
	TextOnly bool
	DType    string  // F32 (default) or BF16
	AStd     float64 // std of lora_A (default 1/sqrt(in_features))
	BStd     float64 // std of lora_B (default 0.02)
}

// peftPrefix is what PEFT puts before the model's own module path.
const peftPrefix = "base_model.model."

// adapterModule is one module a LoRA is attached to.
type adapterModule struct {
	path      string // module path as the adapter's keys spell it (no .weight)
	base      string // the base checkpoint's tensor name (with .weight)
	out, in   int64
	embedding bool
	r         int
	alpha     float64
}

// GenerateAdapter writes adapter_config.json and adapter_model.safetensors
// into dir for the base checkpoint described by base.
func GenerateAdapter(dir string, base Spec, spec AdapterSpec) error {
	b, err := base.Normalize()
	if err != nil {
		return err
	}
	a, err := spec.normalize()
	if err != nil {
		return err
	}
	mods, err := a.modules(b)
	if err != nil {
		return err
	}
	ts, err := a.tensors(b, mods)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tinymodel: %w", err)
	}
	cfg, err := a.configJSON(b)
	if err != nil {
		return fmt.Errorf("tinymodel: render adapter_config.json: %w", err)
	}
	if err := writeSafetensors(filepath.Join(dir, "adapter_model.safetensors"), a.Seed, ts); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, "adapter_config.json"), cfg)
}

func (a AdapterSpec) normalize() (AdapterSpec, error) {
	if a.Rank == 0 {
		a.Rank = 8
	}
	if a.Alpha == 0 {
		a.Alpha = 16
	}
	if a.TargetModules == nil {
		a.TargetModules = []string{"q_proj", "k_proj", "v_proj", "o_proj"}
	}
	if a.DType == "" {
		a.DType = F32
	}
	if a.BStd == 0 {
		a.BStd = 0.02
	}
	switch {
	case a.Rank < 0:
		return a, fmt.Errorf("tinymodel: adapter rank %d", a.Rank)
	case a.DType != F32 && a.DType != BF16:
		return a, fmt.Errorf("tinymodel: adapter dtype %q, want F32 or BF16", a.DType)
	}
	for _, m := range a.ModulesToSave {
		if m != "lm_head" && m != "embed_tokens" {
			return a, fmt.Errorf("tinymodel: modules_to_save %q, want lm_head or embed_tokens", m)
		}
	}
	return a, nil
}

// patternValue returns the value of the first key (sorted) of a PEFT
// rank/alpha pattern that matches module, as PEFT's get_pattern_key does.
func patternValue[V any](pattern map[string]V, module string) (V, bool) {
	keys := make([]string, 0, len(pattern))
	for k := range pattern {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if re, err := regexp.Compile(`^(.*\.)?(` + k + `)$`); err == nil && re.MatchString(module) {
			return pattern[k], true
		}
	}
	var zero V
	return zero, false
}

var layerIndex = regexp.MustCompile(`\.layers\.(\d+)\.`)

// modules lists the base model's modules the adapter targets.
func (a AdapterSpec) modules(b Spec) ([]adapterModule, error) {
	var mods []adapterModule
	for _, t := range b.tensors() {
		if len(t.shape) != 2 || !strings.HasSuffix(t.name, ".weight") ||
			strings.HasPrefix(t.name, "mtp.") || strings.HasPrefix(t.name, "model.visual.") {
			continue
		}
		path := strings.TrimSuffix(t.name, ".weight")
		matched := false
		for _, tm := range a.TargetModules {
			if path == tm || strings.HasSuffix(path, "."+tm) {
				matched = true
			}
		}
		if !matched {
			continue
		}
		if a.Layers != nil {
			m := layerIndex.FindStringSubmatch(path)
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[1])
			if !slices.Contains(a.Layers, n) {
				continue
			}
		}
		mod := adapterModule{path: a.keyPath(path), base: t.name, out: t.shape[0], in: t.shape[1], r: a.Rank, alpha: a.Alpha,
			embedding: strings.HasSuffix(path, "embed_tokens")}
		if r, ok := patternValue(a.RankPattern, mod.path); ok {
			mod.r = r
		}
		if al, ok := patternValue(a.AlphaPattern, mod.path); ok {
			mod.alpha = al
		}
		mods = append(mods, mod)
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("tinymodel: target_modules %v match no module of %s", a.TargetModules, b.Name)
	}
	return mods, nil
}

func (a AdapterSpec) keyPath(path string) string {
	if a.TextOnly {
		return strings.Replace(path, "model.language_model.", "model.", 1)
	}
	return path
}

// tensors plans adapter_model.safetensors, sorted by key.
func (a AdapterSpec) tensors(b Spec, mods []adapterModule) ([]plannedTensor, error) {
	es := elemSize(a.DType)
	var ts []plannedTensor
	add := func(name string, std float64, values func() ([]float32, error), shape ...int64) {
		t := tensorSpec{name: name, shape: shape, std: std}
		ts = append(ts, plannedTensor{tensorSpec: t, dtype: a.DType, size: t.numElements() * es, values: values})
	}
	for _, m := range mods {
		key := peftPrefix + m.path
		r := int64(m.r)
		aStd := a.AStd
		if aStd == 0 {
			aStd = 1 / math.Sqrt(float64(m.in))
		}
		if m.embedding {
			// nn.Embedding weight is [num_embeddings, dim]: A [r, num], B [dim, r].
			add(key+".lora_embedding_A", aStd, nil, r, m.out)
			add(key+".lora_embedding_B", a.BStd, nil, m.in, r)
			continue
		}
		add(key+".lora_A.weight", aStd, nil, r, m.in)
		add(key+".lora_B.weight", a.BStd, nil, m.out, r)
		if a.DoRA {
			baseName := m.base
			out, in, seed, key := m.out, m.in, a.Seed, key
			add(key+".lora_magnitude_vector", 0, func() ([]float32, error) {
				w, _, err := b.TensorValues(baseName)
				if err != nil {
					return nil, err
				}
				r := streamFor(seed, key+".lora_magnitude_vector")
				mag := make([]float32, out)
				for o := range out {
					var ss float64
					for _, x := range w[o*in : (o+1)*in] {
						ss += float64(x) * float64(x)
					}
					mag[o] = float32(math.Sqrt(ss) * (1 + 0.05*r.normal()))
				}
				return mag, nil
			}, out)
		}
	}
	embedBase := "model.embed_tokens.weight"
	if b.isQwen35() {
		embedBase = "model.language_model.embed_tokens.weight"
	}
	for _, m := range a.ModulesToSave {
		var key, baseName string
		switch m {
		case "lm_head":
			if b.TiedEmbeddings {
				return nil, fmt.Errorf("tinymodel: modules_to_save lm_head on %s, whose embeddings are tied", b.Name)
			}
			key, baseName = peftPrefix+"lm_head.weight", "lm_head.weight"
		case "embed_tokens":
			key, baseName = peftPrefix+a.keyPath(embedBase), embedBase
		}
		seed, key, baseName := a.Seed, key, baseName
		add(key, 0, func() ([]float32, error) {
			w, _, err := b.TensorValues(baseName)
			if err != nil {
				return nil, err
			}
			r := streamFor(seed, key)
			for i := range w {
				w[i] += float32(0.01 * r.normal())
			}
			return w, nil
		}, int64(b.VocabSize), int64(b.HiddenSize))
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	return ts, nil
}

func (a AdapterSpec) configJSON(b Spec) ([]byte, error) {
	targets := slices.Clone(a.TargetModules)
	sort.Strings(targets)
	var toSave any
	if len(a.ModulesToSave) > 0 {
		toSave = a.ModulesToSave
	}
	var layers any
	if a.Layers != nil {
		layers = a.Layers
	}
	rp, ap := map[string]int{}, map[string]float64{}
	for k, v := range a.RankPattern {
		rp[k] = v
	}
	for k, v := range a.AlphaPattern {
		ap[k] = v
	}
	return indentJSON(map[string]any{
		"alpha_pattern":           ap,
		"auto_mapping":            nil,
		"base_model_name_or_path": b.Name,
		"bias":                    "none",
		"fan_in_fan_out":          false,
		"inference_mode":          true,
		"init_lora_weights":       true,
		"layer_replication":       nil,
		"layers_pattern":          nil,
		"layers_to_transform":     layers,
		"lora_alpha":              a.Alpha,
		"lora_bias":               false,
		"lora_dropout":            0.05,
		"modules_to_save":         toSave,
		"peft_type":               "LORA",
		"r":                       a.Rank,
		"rank_pattern":            rp,
		"revision":                nil,
		"target_modules":          targets,
		"task_type":               "CAUSAL_LM",
		"use_dora":                a.DoRA,
		"use_rslora":              a.RSLoRA,
	})
}
