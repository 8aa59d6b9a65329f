package merge

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// baseNotes compares each adapter's base_model_name_or_path with the base being merged into and returns notes
// for a real mismatch only: the adapter names a model of another family, or a MoE where the base is dense (or
// the reverse), by the base's config.json; or both sides name a model (the base by its config's _name_or_path,
// its Hugging Face cache folder, or a folder named like a model) and the names differ. A name that says
// nothing about the model (a local training path, a folder called "base") is not a mismatch. A training base
// that was quantized (QLoRA) is noted too: merging into the 16-bit weights is right, but the result can differ
// slightly from the training-time model.
func baseNotes(base string, cfg map[string]any, ads []Adapter) []string {
	var notes []string
	names := baseNames(base, cfg)
	fb := familyFromConfig(cfg)
	for _, a := range ads {
		bm := a.Config.BaseModel
		if bm == "" {
			continue
		}
		lowerBM := strings.ToLower(bm)
		if strings.Contains(lowerBM, "bnb") || strings.Contains(lowerBM, "4bit") || strings.Contains(lowerBM, "gptq") || strings.Contains(lowerBM, "awq") {
			notes = append(notes, fmt.Sprintf("%s was trained on a quantized base (%s); it is merged into the 16-bit weights of %s, as it should be, so the merged model can differ slightly from the QLoRA training-time model", a.Dir, bm, base))
		}
		id := normalizeID(bm)
		if id == "" {
			continue
		}
		fa := familyFromID(bm)
		fbase := fb
		if fbase.name == "" {
			for _, n := range names {
				if f := familyFromID(n.raw); f.name != "" {
					fbase = f
					break
				}
			}
		}
		if fa.differs(fbase) {
			notes = append(notes, fmt.Sprintf("%s was trained on %q (%s), but the base here is %s (%s): an adapter for another model changes the wrong weights",
				a.Dir, bm, fa, fbase, fbase.source))
			continue
		}
		if sameName(id, names) {
			continue
		}
		if fa.name == "" && !strings.Contains(bm, "/") || filepath.IsAbs(bm) || strings.HasPrefix(bm, ".") {
			continue // a local path or a bare name that says nothing about the model
		}
		for _, n := range names {
			if n.informative {
				notes = append(notes, fmt.Sprintf("%s was trained on %q, and the base here is %s: check that it is the same model", a.Dir, bm, n.raw))
				break
			}
		}
	}
	return notes
}

// baseName is one name the base goes by.
type baseName struct {
	raw, id     string
	informative bool // a model id (config, Hub cache) or a folder named after a model family
}

// baseNames lists the names of the base: config.json's _name_or_path (also in text_config), the repository of
// a Hugging Face cache path (models--Org--Name), and the folder's own name.
func baseNames(base string, cfg map[string]any) []baseName {
	var out []baseName
	add := func(raw string, informative bool) {
		if id := normalizeID(raw); id != "" {
			out = append(out, baseName{raw: raw, id: id, informative: informative})
		}
	}
	add(configString(cfg, "_name_or_path"), true)
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		add(configString(tc, "_name_or_path"), true)
	}
	slash := filepath.ToSlash(abs(base))
	for _, seg := range strings.Split(slash, "/") {
		if rest, ok := strings.CutPrefix(seg, "models--"); ok {
			add(strings.ReplaceAll(rest, "--", "/"), true)
		}
	}
	folder := filepath.Base(slash)
	add(folder, familyFromID(folder).name != "")
	return out
}

// sameName reports whether the adapter's normalized id names one of the base's names (either contains the
// other: "qwen359b" and "qwen359bfrauddemo").
func sameName(id string, names []baseName) bool {
	for _, n := range names {
		if strings.Contains(n.id, id) || strings.Contains(id, n.id) {
			return true
		}
	}
	return false
}

// quantSuffixes are what quantized re-uploads append to a model name.
var quantSuffixes = []string{"-bnb-4bit", "-bnb-8bit", "-4bit", "-8bit", "-awq", "-gptq", "-unsloth"}

// normalizeID reduces a model name or path to its last segment, lower case, without quantization suffixes
// or punctuation: "unsloth/Qwen3.5-9B-unsloth-bnb-4bit" → "qwen359b".
func normalizeID(s string) string {
	s = strings.ToLower(filepath.Base(filepath.ToSlash(strings.TrimRight(s, "/"))))
	if rest, ok := strings.CutPrefix(s, "models--"); ok {
		s = rest[strings.LastIndex(rest, "--")+len("--"):]
	}
	for changed := true; changed; {
		changed = false
		for _, q := range quantSuffixes {
			if t := strings.TrimSuffix(s, q); t != s {
				s, changed = t, true
			}
		}
	}
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	if b.Len() < 3 || s == "." {
		return ""
	}
	return b.String()
}

// family is what a name or a config says about a model: its family ("qwen2" for Qwen2 and 2.5, "qwen3",
// "qwen3.5", "qwen3next", or another family's name), whether it is a mixture of experts when that is known,
// and where it was read.
type family struct {
	name     string
	moe      bool
	moeKnown bool
	source   string
}

func (f family) String() string {
	if f.name == "" {
		return "an unknown model"
	}
	kind := ""
	if f.moeKnown {
		kind = "dense "
		if f.moe {
			kind = "MoE "
		}
	}
	return "a " + kind + f.name + " model"
}

// differs reports whether f and g are known to be different models.
func (f family) differs(g family) bool {
	if f.name == "" || g.name == "" {
		return false
	}
	return f.name != g.name || f.moeKnown && g.moeKnown && f.moe != g.moe
}

var (
	qwenVersion = regexp.MustCompile(`qwen(\d)(?:\.(\d)|(\d))?`)
	activeB     = regexp.MustCompile(`[-_]a\d+(?:\.\d+)?b(?:$|[^a-z])`) // Qwen3-30B-A3B: active parameters, a MoE
	// otherFamilies are model families whose names identify an adapter's base as not Qwen.
	otherFamilies = []string{"llama", "mistral", "mixtral", "gemma", "phi", "deepseek", "glm", "baichuan", "falcon",
		"olmo", "internlm", "smollm", "granite", "starcoder", "yi-"}
)

// familyFromID reads the family from a model name: Qwen versions (qwen35 is read as 3.5, as the demo model
// is named; 2.5 belongs to the qwen2 architecture), MoE markers (moe, -A3B), or another family's name.
func familyFromID(id string) family {
	l := strings.ToLower(id)
	f := family{source: "its name"}
	if m := qwenVersion.FindStringSubmatch(l); m != nil {
		minor := m[2] + m[3]
		switch v := m[1] + "." + minor; {
		case m[1] == "2":
			f.name = "qwen2"
		case m[1] == "3" && strings.Contains(l, "next"):
			f.name = "qwen3next"
		case minor == "":
			f.name = "qwen" + m[1]
		default:
			f.name = "qwen" + v
		}
		f.moe = strings.Contains(l, "moe") || activeB.MatchString(l) || f.name == "qwen3next"
		f.moeKnown = true // Qwen names every MoE release as one
		return f
	}
	for _, o := range otherFamilies {
		if strings.Contains(l, o) {
			f.name = strings.TrimSuffix(o, "-")
			return f
		}
	}
	return family{}
}

// familyFromConfig reads the family from config.json's model_type (text_config's for multimodal checkpoints).
func familyFromConfig(cfg map[string]any) family {
	mt := configString(cfg, "model_type")
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		if t := configString(tc, "model_type"); t != "" {
			mt = t
		}
	}
	f := family{source: "config.json model_type " + mt, moeKnown: true}
	switch strings.TrimSuffix(mt, "_text") {
	case "qwen2", "qwen2_5":
		f.name = "qwen2"
	case "qwen2_moe":
		f.name, f.moe = "qwen2", true
	case "qwen3":
		f.name = "qwen3"
	case "qwen3_moe":
		f.name, f.moe = "qwen3", true
	case "qwen3_5":
		f.name = "qwen3.5"
	case "qwen3_5_moe":
		f.name, f.moe = "qwen3.5", true
	case "qwen3_next":
		f.name, f.moe = "qwen3next", true
	default:
		f = familyFromID(mt)
		f.source = "config.json model_type " + mt
	}
	if mt == "" {
		return family{}
	}
	return f
}
