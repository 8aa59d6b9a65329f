package reference

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
)

// adapterConfig is the part of PEFT's adapter_config.json the run-time LoRA needs.
type adapterConfig struct {
	PeftType      string   `json:"peft_type"`
	Alpha         *float64 `json:"lora_alpha"`
	UseRSLoRA     bool     `json:"use_rslora"`
	UseDoRA       bool     `json:"use_dora"`
	FanInFanOut   bool     `json:"fan_in_fan_out"`
	Bias          string   `json:"bias"`
	LoraBias      bool     `json:"lora_bias"`
	ModulesToSave []string `json:"modules_to_save"`
	// alphaPattern keeps the JSON key order: PEFT's get_pattern_key takes the first key (in the dict's order,
	// which json.load preserves) whose pattern matches the module.
	alphaPattern []patternEntry
}

type patternEntry struct {
	key   string
	re    *regexp.Regexp
	value float64
}

func parseAdapterConfig(path string, data []byte) (*adapterConfig, error) {
	var ac adapterConfig
	if err := json.Unmarshal(data, &ac); err != nil {
		return nil, &FormatError{File: path, What: "invalid JSON: " + err.Error()}
	}
	var raw struct {
		AlphaPattern json.RawMessage `json:"alpha_pattern"`
	}
	_ = json.Unmarshal(data, &raw)
	if len(raw.AlphaPattern) > 0 && string(raw.AlphaPattern) != "null" {
		dec := json.NewDecoder(bytes.NewReader(raw.AlphaPattern))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return nil, &FormatError{File: path, What: "alpha_pattern: expected an object"}
		}
		for dec.More() {
			tok, err := dec.Token()
			key, ok := tok.(string)
			var v float64
			if err == nil && ok {
				err = dec.Decode(&v)
			}
			if err != nil || !ok {
				return nil, &FormatError{File: path, What: "alpha_pattern: expected string keys and numeric values"}
			}
			// PEFT matches re.match(rf"(.*\.)?({key})$", module); Go's RE2 accepts the usual module patterns.
			re, err := regexp.Compile(`^(.*\.)?(` + key + `)$`)
			if err != nil {
				return nil, &UnsupportedError{File: path, What: fmt.Sprintf("alpha_pattern key %q: %v", key, err)}
			}
			ac.alphaPattern = append(ac.alphaPattern, patternEntry{key: key, re: re, value: v})
		}
	}
	unsupported := func(what string) error { return &UnsupportedError{File: path, What: what} }
	switch {
	case ac.PeftType != "" && ac.PeftType != "LORA":
		return nil, unsupported(fmt.Sprintf("peft_type %q", ac.PeftType))
	case ac.FanInFanOut:
		return nil, unsupported("fan_in_fan_out")
	case ac.Bias != "" && ac.Bias != "none":
		return nil, unsupported(fmt.Sprintf("bias %q", ac.Bias))
	case ac.LoraBias:
		return nil, unsupported("lora_bias")
	}
	return &ac, nil
}

// scaling is PEFT's lora_alpha / r (or / √r with use_rslora) for one module, r being the stored rank.
func (ac *adapterConfig) scaling(module string, r int) float64 {
	alpha := 8.0 // LoraConfig default
	if ac.Alpha != nil {
		alpha = *ac.Alpha
	}
	for _, p := range ac.alphaPattern {
		if p.re.MatchString(module) {
			alpha = p.value
			break
		}
	}
	if ac.UseRSLoRA {
		return alpha / math.Sqrt(float64(r))
	}
	return alpha / float64(r)
}

// attachAdapter reads a PEFT adapter and hooks it onto the model: lora_A/lora_B pairs (with DoRA magnitudes)
// onto the linears they target, lora_embedding_A/B onto the token embedding, and modules_to_save tensors
// (embed_tokens, lm_head) as replacements. A tied lm_head follows the embedding, as it does after
// merge_and_unload (the merged embedding tensor is the head's weight too).
func (m *Model) attachAdapter(a Adapter) error {
	cfgPath := filepath.Join(a.Dir, "adapter_config.json")
	data, err := readCapped(cfgPath, 16<<20)
	if err != nil {
		return err
	}
	ac, err := parseAdapterConfig(cfgPath, data)
	if err != nil {
		return err
	}
	f, err := openAdapterWeights(a.Dir)
	if err != nil {
		return err
	}
	defer f.Close()
	src := fileSource{f}
	wfile := filepath.Join(a.Dir, "adapter_model.safetensors")
	ld := &loader{src: src, file: wfile, used: map[string]bool{}, lin: map[string]*linear{}}
	mult := a.Scale
	if mult == 0 {
		mult = 1
	}
	bad := func(format string, args ...any) error {
		return &FormatError{File: wfile, What: fmt.Sprintf(format, args...)}
	}
	rank := func(name string, dim int) (int, error) {
		sh, _ := src.shape(name)
		if len(sh) != 2 || sh[dim] <= 0 || sh[dim] > maxDim {
			return 0, bad("tensor %q has shape %v: expected a 2-D LoRA factor", name, sh)
		}
		return int(sh[dim]), nil
	}
	c := &m.Config
	for _, name := range src.names() {
		switch {
		case strings.HasSuffix(name, ".lora_A.weight"):
			module := strings.TrimSuffix(name, ".lora_A.weight")
			base := strings.TrimPrefix(module, "base_model.model.")
			target := m.findLinear(base + ".weight")
			if target == nil {
				return bad("%q targets %q, which is not a linear layer of the base model", name, base)
			}
			r, err := rank(name, 0)
			if err != nil {
				return err
			}
			d := loraDelta{A: ld.tensor(name, r, target.In), B: ld.tensor(module+".lora_B.weight", target.Out, r), R: r,
				Scale: mult * ac.scaling(base, r)}
			if ld.err != nil {
				return ld.err
			}
			if ac.UseDoRA {
				mag := ld.tensor(module+".lora_magnitude_vector", target.Out)
				if ld.err != nil {
					return ld.err
				}
				if len(target.loras) > 0 || target.doraMag != nil {
					return &UnsupportedError{File: wfile, What: fmt.Sprintf("DoRA on %q together with another adapter", base)}
				}
				target.doraMag = doraScale(target, d, mag)
			}
			target.loras = append(target.loras, d)
		case strings.HasSuffix(name, ".lora_embedding_A"):
			module := strings.TrimSuffix(name, ".lora_embedding_A")
			base := strings.TrimPrefix(module, "base_model.model.")
			if !m.isEmbedding(base + ".weight") {
				return bad("%q targets %q, which is not the token embedding", name, base)
			}
			r, err := rank(name, 0)
			if err != nil {
				return err
			}
			// nn.Embedding LoRA: ΔE = s·(B A)ᵀ, A [r×vocab], B [hidden×r]; row v of E gains s·B·A[:, v].
			A := ld.tensor(name, r, c.Vocab)
			B := ld.tensor(module+".lora_embedding_B", c.Hidden, r)
			if ld.err != nil {
				return ld.err
			}
			s := mult * ac.scaling(base, r)
			m.embedLoras = append(m.embedLoras, loraDelta{A: A, B: B, R: r, Scale: s})
			if c.TieEmbeddings {
				// logits gain ΔE h = s·Aᵀ(Bᵀ h): a LoRA on the head with factors Bᵀ [r×hidden] and Aᵀ [vocab×r].
				m.lmHead.loras = append(m.lmHead.loras, loraDelta{A: transpose(B, c.Hidden, r),
					B: transpose(A, r, c.Vocab), R: r, Scale: s})
			}
		case strings.HasSuffix(name, ".lora_B.weight") || strings.HasSuffix(name, ".lora_embedding_B") ||
			strings.HasSuffix(name, ".lora_magnitude_vector"):
			// consumed with their lora_A / lora_embedding_A; an orphan is reported below
		default:
			base := strings.TrimPrefix(name, "base_model.model.")
			switch {
			case m.isEmbedding(base):
				w := ld.tensor(name, c.Vocab, c.Hidden)
				if ld.err != nil {
					return ld.err
				}
				m.embed = w
				if c.TieEmbeddings {
					m.lmHead.W = w
				}
			case base == "lm_head.weight" && !c.TieEmbeddings:
				m.lmHead.W = ld.tensor(name, c.Vocab, c.Hidden)
				if ld.err != nil {
					return ld.err
				}
			default:
				return &UnsupportedError{File: wfile, What: fmt.Sprintf("tensor %q (only LoRA factors, DoRA magnitudes "+
					"and modules_to_save embed_tokens / lm_head)", name)}
			}
		}
	}
	for _, name := range src.names() {
		if !ld.used[name] {
			return bad("tensor %q has no matching lora_A / lora_embedding_A", name)
		}
	}
	return nil
}

// doraScale returns m_o / ‖W_o + s·(B A)_o‖₂ for every output row (PEFT DoraLinearLayer.get_weight_norm).
func doraScale(l *linear, d loraDelta, mag []float32) []float64 {
	out := make([]float64, l.Out)
	row := make([]float64, l.In)
	for o := 0; o < l.Out; o++ {
		for i := 0; i < l.In; i++ {
			var ba float64
			for k := 0; k < d.R; k++ {
				ba += float64(d.B[o*d.R+k]) * float64(d.A[k*l.In+i])
			}
			row[i] = float64(l.W[o*l.In+i]) + d.Scale*ba
		}
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		out[o] = float64(mag[o]) / math.Sqrt(ss)
	}
	return out
}

func transpose(x []float32, rows, cols int) []float32 {
	y := make([]float32, len(x))
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			y[c*rows+r] = x[r*cols+c]
		}
	}
	return y
}

// isEmbedding reports whether name is the token embedding in either spelling (ForCausalLM or
// ForConditionalGeneration).
func (m *Model) isEmbedding(name string) bool {
	return name == "model.embed_tokens.weight" || name == "model.language_model.embed_tokens.weight"
}

// findLinear resolves an adapter's module name against the base model, accepting adapters trained on the
// ForConditionalGeneration class (model.language_model.…) for a ForCausalLM checkpoint and the reverse.
func (m *Model) findLinear(name string) *linear {
	if l := m.linears[name]; l != nil {
		return l
	}
	if rest, ok := strings.CutPrefix(name, "model.language_model."); ok {
		return m.linears["model."+rest]
	}
	if rest, ok := strings.CutPrefix(name, "model."); ok {
		return m.linears["model.language_model."+rest]
	}
	return nil
}
