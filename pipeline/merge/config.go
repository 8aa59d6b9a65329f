package merge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// maxConfigBytes caps adapter_config.json (a rank_pattern listing every module of a large model is a few
// hundred KB).
const maxConfigBytes = 16 << 20

// maxPatterns bounds the entries of rank_pattern / alpha_pattern / target_modules / modules_to_save.
const maxPatterns = 1 << 16

// Pattern is one rank_pattern or alpha_pattern entry, kept in the JSON object's order (PEFT takes the first
// matching key of the dict, and Python dicts keep insertion order).
type Pattern struct {
	Key   string
	Value float64
	re    *regexp.Regexp
}

// Config is the part of PEFT's adapter_config.json (peft/tuners/lora/config.py LoraConfig) that decides a merge.
type Config struct {
	PeftType          string
	BaseModel         string // base_model_name_or_path as written at training time (often a local path)
	R                 int
	Alpha             float64
	RSLoRA            bool
	DoRA              bool
	FanInFanOut       bool
	TargetModules     []string // list form
	TargetRegex       string   // string form (re.fullmatch), "" when a list was given
	AllLinear         bool     // target_modules == "all-linear"
	ExcludeModules    []string
	ExcludeRegex      string
	RankPattern       []Pattern
	AlphaPattern      []Pattern
	ModulesToSave     []string
	LayersToTransform []int // nil: every layer
	LayersPattern     []string
	Bias              string // "none", "all", "lora_only"
	LoraBias          bool
	EnsureWeightTying bool

	targetRe, excludeRe *regexp.Regexp
	layerRes            []*regexp.Regexp
}

// ParseConfig parses adapter_config.json. path is used in messages only.
func ParseConfig(path string, data []byte) (*Config, error) {
	if len(data) > maxConfigBytes {
		return nil, formatErr(path, "adapter_config.json is %d bytes, more than the %d-byte limit", len(data), maxConfigBytes)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, formatErr(path, "adapter_config.json: invalid JSON: %v", err)
	}
	if raw == nil {
		return nil, formatErr(path, "adapter_config.json: want a JSON object")
	}
	c := &Config{PeftType: "LORA", R: 8, Alpha: 8, Bias: "none"}
	p := cfgParser{path: path, raw: raw}
	p.str("peft_type", &c.PeftType)
	p.str("base_model_name_or_path", &c.BaseModel)
	if p.has("r") {
		var r float64
		p.num("r", &r)
		if p.err == nil && (r != math.Trunc(r) || r < 1 || r > 1<<20) {
			p.err = formatErr(path, "adapter_config.json: r = %v, want a positive integer", r)
		}
		c.R = int(r)
	}
	p.num("lora_alpha", &c.Alpha)
	p.boolean("use_rslora", &c.RSLoRA)
	p.boolean("use_dora", &c.DoRA)
	p.boolean("fan_in_fan_out", &c.FanInFanOut)
	p.boolean("lora_bias", &c.LoraBias)
	p.boolean("ensure_weight_tying", &c.EnsureWeightTying)
	p.str("bias", &c.Bias)
	p.strOrList("target_modules", &c.TargetRegex, &c.TargetModules)
	p.strOrList("exclude_modules", &c.ExcludeRegex, &c.ExcludeModules)
	var one string
	p.strOrList("modules_to_save", &one, &c.ModulesToSave)
	if one != "" {
		c.ModulesToSave = []string{one}
	}
	p.strOrList("layers_pattern", &one, &c.LayersPattern)
	if one != "" {
		c.LayersPattern = []string{one}
	}
	p.intOrList("layers_to_transform", &c.LayersToTransform)
	c.RankPattern = p.patterns("rank_pattern")
	c.AlphaPattern = p.patterns("alpha_pattern")
	if p.err != nil {
		return nil, p.err
	}
	if c.TargetRegex == "all-linear" {
		c.TargetRegex, c.AllLinear = "", true
	}
	return c, c.check(path, raw)
}

// check rejects what has no exact merge and compiles the patterns.
func (c *Config) check(path string, raw map[string]json.RawMessage) error {
	if c.PeftType != "LORA" {
		return unsupported(path, "peft_type %q: only LoRA adapters (peft_type \"LORA\") can be merged", c.PeftType)
	}
	if math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0) {
		return formatErr(path, "adapter_config.json: lora_alpha = %v", c.Alpha)
	}
	switch c.Bias {
	case "none", "all", "lora_only":
	default:
		return formatErr(path, "adapter_config.json: bias %q, want \"none\", \"all\" or \"lora_only\"", c.Bias)
	}
	// Features that change what a module computes in ways a weight merge cannot reproduce, or that this
	// package does not implement exactly.
	for _, k := range []string{"target_parameters", "trainable_token_indices", "layer_replication", "alora_invocation_tokens"} {
		v, ok := raw[k]
		if !ok {
			continue
		}
		t := strings.TrimSpace(string(v))
		if t == "null" || t == "[]" || t == "{}" || t == "" {
			continue
		}
		return unsupported(path, "adapter_config.json sets %s = %s, which phonellm cannot merge exactly (fused-parameter LoRA, trainable tokens, layer replication and aLoRA are not supported)", k, clip(t, 80))
	}
	if v, ok := raw["use_qalora"]; ok && strings.TrimSpace(string(v)) == "true" {
		return unsupported(path, "adapter_config.json sets use_qalora: QA-LoRA adapters have no exact 16-bit merge")
	}
	var err error
	if c.TargetRegex != "" {
		if c.targetRe, err = compileUser(`^(?:` + c.TargetRegex + `)$`); err != nil {
			return unsupported(path, "target_modules regex %q: %v", c.TargetRegex, err)
		}
	}
	if c.ExcludeRegex != "" {
		if c.excludeRe, err = compileUser(`^(?:` + c.ExcludeRegex + `)$`); err != nil {
			return unsupported(path, "exclude_modules regex %q: %v", c.ExcludeRegex, err)
		}
	}
	for _, ps := range [][]Pattern{c.RankPattern, c.AlphaPattern} {
		for i := range ps {
			// PEFT utils/other.py get_pattern_key: re.match(rf"(.*\.)?({key})$", module).
			if ps[i].re, err = compileUser(`^(?:.*\.)?(?:` + ps[i].Key + `)$`); err != nil {
				return unsupported(path, "rank/alpha pattern key %q: %v", ps[i].Key, err)
			}
		}
	}
	for _, r := range c.RankPattern {
		if r.Value != math.Trunc(r.Value) || r.Value < 1 || r.Value > 1<<20 {
			return formatErr(path, "adapter_config.json: rank_pattern[%q] = %v, want a positive integer", r.Key, r.Value)
		}
	}
	if len(c.LayersPattern) == 0 {
		// PEFT tuners_utils check_target_module_exists: re.match(r".*\.[^.]*\.(\d+)\.", key).
		c.layerRes = []*regexp.Regexp{regexp.MustCompile(`^.*\.[^.]*\.(\d+)\.`)}
	}
	for _, lp := range c.LayersPattern {
		re, err := compileUser(`^.*\.(?:` + lp + `)\.(\d+)\.`)
		if err != nil {
			return unsupported(path, "layers_pattern %q: %v", lp, err)
		}
		c.layerRes = append(c.layerRes, re)
	}
	return nil
}

// compileUser compiles a pattern from a config file. Python's re and Go's RE2 agree on the syntax PEFT configs
// use (alternation, classes, repetition); lookaround and backreferences are rejected rather than guessed.
func compileUser(expr string) (*regexp.Regexp, error) {
	if len(expr) > 1<<16 {
		return nil, errors.New("pattern longer than 64 KiB")
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("not a regular expression Go's RE2 can evaluate (%v)", err)
	}
	return re, nil
}

// RankFor returns r for a module (its path inside the model, e.g. "model.layers.0.self_attn.q_proj") and the
// rank_pattern key that set it ("" for the default r).
func (c *Config) RankFor(module string) (int, string) {
	if p, ok := firstMatch(c.RankPattern, module); ok {
		return int(p.Value), p.Key
	}
	return c.R, ""
}

// AlphaFor returns lora_alpha for a module and the alpha_pattern key that set it.
func (c *Config) AlphaFor(module string) (float64, string) {
	if p, ok := firstMatch(c.AlphaPattern, module); ok {
		return p.Value, p.Key
	}
	return c.Alpha, ""
}

func firstMatch(ps []Pattern, module string) (Pattern, bool) {
	for _, p := range ps {
		if p.re != nil && p.re.MatchString(module) {
			return p, true
		}
	}
	return Pattern{}, false
}

// Scaling is PEFT's LoraLayer.update_layer scaling: alpha/r, or alpha/√r with use_rslora.
func (c *Config) Scaling(r int, alpha float64) float64 {
	if c.RSLoRA {
		return alpha / math.Sqrt(float64(r))
	}
	return alpha / float64(r)
}

// Targets reports whether adapter_config.json selects a module for LoRA, following PEFT's
// check_target_module_exists: a string is a full-match regex, a list entry matches the name or a dotted
// suffix of it, layers_to_transform then filters by layer index (list form only); exclude_modules wins.
func (c *Config) Targets(module string) bool {
	if c.excluded(module) {
		return false
	}
	switch {
	case c.AllLinear:
		return !strings.HasSuffix(module, "lm_head")
	case c.targetRe != nil:
		return c.targetRe.MatchString(module)
	}
	found := false
	for _, t := range c.TargetModules {
		if module == t {
			return true
		}
		if strings.HasSuffix(module, "."+t) {
			found = true
		}
	}
	if !found || c.LayersToTransform == nil {
		return found
	}
	for _, re := range c.layerRes {
		m := re.FindStringSubmatch(module)
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return false
		}
		for _, l := range c.LayersToTransform {
			if l == n {
				return true
			}
		}
		return false
	}
	return false
}

func (c *Config) excluded(module string) bool {
	if c.excludeRe != nil {
		return c.excludeRe.MatchString(module)
	}
	for _, e := range c.ExcludeModules {
		if module == e || strings.HasSuffix(module, "."+e) {
			return true
		}
	}
	return false
}

// cfgParser decodes fields one by one so every error names the field; the first error sticks.
type cfgParser struct {
	path string
	raw  map[string]json.RawMessage
	err  error
}

func (p *cfgParser) has(k string) bool {
	v, ok := p.raw[k]
	return ok && strings.TrimSpace(string(v)) != "null"
}

func (p *cfgParser) decode(k string, dst any, want string) {
	if p.err != nil || !p.has(k) {
		return
	}
	if err := json.Unmarshal(p.raw[k], dst); err != nil {
		p.err = formatErr(p.path, "adapter_config.json: %s = %s, want %s", k, clip(string(p.raw[k]), 60), want)
	}
}

func (p *cfgParser) str(k string, dst *string)   { p.decode(k, dst, "a string") }
func (p *cfgParser) num(k string, dst *float64)  { p.decode(k, dst, "a number") }
func (p *cfgParser) boolean(k string, dst *bool) { p.decode(k, dst, "true or false") }
func (p *cfgParser) strOrList(k string, s *string, l *[]string) {
	if p.err != nil || !p.has(k) {
		return
	}
	v := bytes.TrimSpace(p.raw[k])
	if len(v) > 0 && v[0] == '"' {
		p.decode(k, s, "a string or a list of strings")
		return
	}
	p.decode(k, l, "a string or a list of strings")
	if p.err == nil && len(*l) > maxPatterns {
		p.err = formatErr(p.path, "adapter_config.json: %s has %d entries, more than %d", k, len(*l), maxPatterns)
	}
}

func (p *cfgParser) intOrList(k string, dst *[]int) {
	if p.err != nil || !p.has(k) {
		return
	}
	v := bytes.TrimSpace(p.raw[k])
	if len(v) > 0 && v[0] != '[' {
		var n int
		p.decode(k, &n, "an integer or a list of integers")
		*dst = []int{n}
		return
	}
	p.decode(k, dst, "an integer or a list of integers")
	if p.err == nil && *dst == nil {
		*dst = []int{}
	}
}

// patterns decodes a JSON object in key order.
func (p *cfgParser) patterns(k string) []Pattern {
	if p.err != nil || !p.has(k) {
		return nil
	}
	bad := func(msg string) []Pattern {
		p.err = formatErr(p.path, "adapter_config.json: %s: %s", k, msg)
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(p.raw[k]))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return bad("want an object of pattern → number")
	}
	var out []Pattern
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return bad("want an object of pattern → number")
		}
		t, err = dec.Token()
		num, ok := t.(json.Number)
		if err != nil || !ok {
			return bad(fmt.Sprintf("value of %q is not a number", key))
		}
		f, err := num.Float64()
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return bad(fmt.Sprintf("value of %q is not a finite number", key))
		}
		if seen[key] {
			return bad(fmt.Sprintf("key %q appears twice", key))
		}
		seen[key] = true
		if len(out) >= maxPatterns {
			return bad(fmt.Sprintf("more than %d entries", maxPatterns))
		}
		out = append(out, Pattern{Key: key, Value: f})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return bad("want an object of pattern → number")
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("trailing data after the object")
	}
	return out
}

// clip shortens a JSON fragment for a one-line message.
func clip(s string, n int) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) == nil {
		s = b.String()
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
