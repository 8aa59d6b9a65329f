package convert

import "sort"

// archSpec describes one GGUF architecture: the HF classes converted to it, its place in upstream's class chain
// (which decides the modify_tensors transforms and extra KVs), and its per-block tensor name map.
type archSpec struct {
	name    string   // GGUF architecture
	classes []string // config.json architectures[0] values
	hfArch  string   // the class of the checkpoint being converted (set by archFor)

	moe    bool // Qwen2MoeModel is in the chain: per-expert stacking, fused gate_up split, expert ff KVs
	next   bool // Qwen3NextModel is in the chain: A_log, dt_bias, conv1d squeeze, norm +1, ssm.* KVs
	qwen35 bool // the Qwen3.5 mixins: V-head reorder, default MRoPE sections, MTP

	// layer maps a per-block HF name (after "model.layers.N.", without .weight/.bias) to its GGUF name
	// (after "blk.N."); gguf-py tensor_mapping.py restricted to MODEL_TENSORS[arch].
	layer map[string]string
	// defaults are config values transformers fills in when config.json omits them (AutoConfig.to_dict,
	// which upstream reads), for keys whose absence would change the output.
	defaults map[string]int64
	// setup reads architecture-specific config before tensors are processed.
	setup func(b *builder) error
	// extraKVs appends the KVs the architecture's set_gguf_parameters adds after TextModel's.
	extraKVs func(b *builder, k *kvList) error
}

var archs = []*archSpec{&qwen2Arch, &qwen3Arch, &qwen3moeArch, &qwen35Arch, &qwen35moeArch}

// archFor returns a copy of the spec converting HF class hf, or nil.
func archFor(hf string) *archSpec {
	for _, a := range archs {
		for _, c := range a.classes {
			if c == hf {
				s := *a
				s.hfArch = hf
				return &s
			}
		}
	}
	return nil
}

// supportedArchitectures lists the HF classes this package converts, sorted.
func supportedArchitectures() []string {
	var out []string
	for _, a := range archs {
		out = append(out, a.classes...)
	}
	sort.Strings(out)
	return out
}

// mergeMaps returns the union of maps, later ones winning.
func mergeMaps(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func noSetup(*builder) error { return nil }
