package merge

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
)

// An adapter made for another architecture is refused before anything is planned: every module it holds must
// exist in the base (the first that does not is named, with both architectures), and an adapter whose modules
// stop at a layer while its own target_modules select the same modules in further layers of the base was
// trained on a model with fewer layers. Shapes are checked per module afterwards.

// layerRe finds the decoder layer index in a text-model tensor or module path.
var layerRe = regexp.MustCompile(`^(?:model\.language_model\.|language_model\.model\.|model\.)layers\.(\d+)\.`)

// layerOf returns the decoder layer of a text-model path, or -1.
func layerOf(name string) int {
	m := layerRe.FindStringSubmatch(name)
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return -1
	}
	return n
}

// describeBase says which model a base is, from its config.json and tensors, for messages:
// "Qwen3_5ForConditionalGeneration (qwen3_5), 4 layers".
func describeBase(cfg map[string]any, base map[string]pipeline.TensorInfo) string {
	var parts []string
	if a, ok := cfg["architectures"].([]any); ok && len(a) > 0 {
		if s, ok := a[0].(string); ok {
			parts = append(parts, s)
		}
	}
	mt := configString(cfg, "model_type")
	if tc, ok := cfg["text_config"].(map[string]any); ok && mt == "" {
		mt = configString(tc, "model_type")
	}
	if mt != "" {
		if len(parts) > 0 {
			parts[0] += " (" + mt + ")"
		} else {
			parts = append(parts, mt)
		}
	}
	layers := -1
	for name := range base {
		layers = max(layers, layerOf(name))
	}
	if layers >= 0 {
		parts = append(parts, fmt.Sprintf("%d layers", layers+1))
	}
	if len(parts) == 0 {
		return "unknown architecture"
	}
	return strings.Join(parts, ", ")
}

func configString(cfg map[string]any, k string) string {
	s, _ := cfg[k].(string)
	return s
}

// describeAdapter says what an adapter was made for, from its config and module paths:
// `trained on "qwen3moe", layers 0-1, per-expert MoE modules`.
func describeAdapter(a Adapter, modules []string) string {
	var parts []string
	if a.Config.BaseModel != "" {
		parts = append(parts, fmt.Sprintf("trained on %q", a.Config.BaseModel))
	}
	lo, hi := -1, -1
	for _, m := range modules {
		if l := layerOf(m + "."); l >= 0 {
			if lo < 0 || l < lo {
				lo = l
			}
			hi = max(hi, l)
		}
	}
	switch {
	case lo < 0:
	case lo == hi:
		parts = append(parts, fmt.Sprintf("layer %d", lo))
	default:
		parts = append(parts, fmt.Sprintf("layers %d-%d", lo, hi))
	}
	for _, h := range []struct{ re, what string }{
		{`\.experts\.\d+\.`, "per-expert MoE modules"},
		{`\.shared_expert\.`, "shared-expert modules"},
		{`\.linear_attn\.`, "linear-attention modules"},
	} {
		re := regexp.MustCompile(h.re)
		if slices.ContainsFunc(modules, re.MatchString) {
			parts = append(parts, h.what)
		}
	}
	if len(parts) == 0 {
		return "no architecture recorded"
	}
	return strings.Join(parts, ", ")
}

// archError is the one-line refusal of an adapter for another architecture.
func (p *planner) archError(ai int, modules []string, format string, args ...any) error {
	a := p.adapters[ai]
	return formatErr(a.Dir, "adapter for another architecture: %s (adapter: %s; base: %s)",
		fmt.Sprintf(format, args...), describeAdapter(a, modules), p.baseDesc)
}

// checkModules refuses adapter ai when one of its modules (sorted; LoRA modules and saved tensors) has no
// tensor in the base.
func (p *planner) checkModules(ai int, modules, fulls []string) error {
	var missing []string
	for _, m := range modules {
		if _, ok := p.resolve(m + ".weight"); !ok {
			missing = append(missing, m)
		}
	}
	for _, f := range fulls {
		if _, ok := p.resolve(f); !ok {
			missing = append(missing, strings.TrimSuffix(strings.TrimSuffix(f, ".weight"), ".bias"))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return p.archError(ai, modules, "module %q does not exist in the base (%d of the adapter's %d modules do not)",
		missing[0], len(missing), len(modules)+len(fulls))
}

// checkCoverage compares the base modules adapter ai's target_modules select in the decoder layers with those
// it has factors for. An adapter whose modules stop before the base's last selected layer was made for a
// model with fewer layers: refused. Other gaps (a pruned adapter) are noted.
func (p *planner) checkCoverage(ai int, modules []string) error {
	a := p.adapters[ai]
	have := map[string]bool{}
	adapterTop := -1
	for _, m := range modules {
		if n, ok := p.resolve(m + ".weight"); ok {
			have[n] = true
			adapterTop = max(adapterTop, layerOf(n))
		}
	}
	if adapterTop < 0 {
		return nil // no decoder-layer module: nothing to compare
	}
	var missing, beyond []string
	selected := 0
	for name, t := range p.base {
		l := layerOf(name)
		if l < 0 || len(t.Shape) != 2 || !strings.HasSuffix(name, ".weight") {
			continue
		}
		mod := strings.TrimSuffix(name, ".weight")
		if !p.selects(a.Config, mod) {
			continue
		}
		selected++
		if have[name] {
			continue
		}
		missing = append(missing, mod)
		if l > adapterTop {
			beyond = append(beyond, mod)
		}
	}
	slices.Sort(missing)
	slices.Sort(beyond)
	switch {
	case len(beyond) > 0:
		return p.archError(ai, modules, "its modules stop at layer %d, but its target_modules select %d modules of later layers of the base (first: %q): trained on a model with fewer layers",
			adapterTop, len(beyond), beyond[0])
	case len(missing) > 0:
		p.notes = append(p.notes, fmt.Sprintf("%s: no LoRA factors for %d of the %d base modules its target_modules select (first: %q); they stay unchanged, as PEFT would leave them — an adapter trained on this base normally has them all",
			a.Dir, len(missing), selected, missing[0]))
	}
	return nil
}

// selects reports whether cfg's target_modules select a base module, under its own name or the name it has in
// the other text-model layouts (an adapter trained on Qwen3_5ForCausalLM names model.layers.N where the
// checkpoint has model.language_model.layers.N).
func (p *planner) selects(cfg *Config, mod string) bool {
	if cfg.Targets(mod) {
		return true
	}
	for _, pre := range layoutPrefixes {
		core, ok := strings.CutPrefix(mod, pre)
		if !ok {
			continue
		}
		for _, alt := range layoutPrefixes {
			if alt != pre && cfg.Targets(alt+core) {
				return true
			}
		}
		break
	}
	return false
}
