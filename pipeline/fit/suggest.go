package fit

import (
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"sort"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// knownFS holds the config.json values of the models Suggest may propose instead (Qwen3.5 0.8B, 4B, 9B; values
// from gguf-quant-convert.md §4.5, which quotes the public checkpoints' config.json).
//
//go:embed known/*.json
var knownFS embed.FS

// Candidate is a model Suggest may propose when the input does not fit: its name and its unquantized shape.
type Candidate struct {
	Name  string
	Shape Shape
}

// Known returns the built-in candidates, smallest first.
func Known() ([]Candidate, error) {
	entries, err := knownFS.ReadDir("known")
	if err != nil {
		return nil, err
	}
	var out []Candidate
	for _, e := range entries {
		data, err := knownFS.ReadFile(path.Join("known", e.Name()))
		if err != nil {
			return nil, err
		}
		s, err := ShapeFromConfig(data)
		if err != nil {
			return nil, fmt.Errorf("fit: known/%s: %w", e.Name(), err)
		}
		var id struct {
			Name string `json:"_name_or_path"`
		}
		_ = json.Unmarshal(data, &id)
		s.Name = id.Name
		out = append(out, Candidate{Name: id.Name, Shape: s})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, _ := out[i].Shape.WeightBytes()
		b, _ := out[j].Shape.WeightBytes()
		return a < b
	})
	return out, nil
}

// Ladder is the order in which smaller file types are tried, best quality first (peers.md §5.4).
var Ladder = []gguf.FileType{gguf.FileTypeQ8_0, gguf.FileTypeQ6_K, gguf.FileTypeQ5_K_M, gguf.FileTypeQ5_K_S,
	gguf.FileTypeQ4_K_M, gguf.FileTypeQ4_K_S, gguf.FileTypeIQ4_XS, gguf.FileTypeQ3_K_L, gguf.FileTypeQ3_K_M,
	gguf.FileTypeQ3_K_S, gguf.FileTypeQ2_K}

// Rung is one file type of the ladder for the input model.
type Rung struct {
	FileType string `json:"file_type"`
	Weights  int64  `json:"weights_bytes"`
	Needed   int64  `json:"needed_bytes"`
	Fits     bool   `json:"fits"`
}

// Suggestion says what would fit when the input does not.
type Suggestion struct {
	FileType    string `json:"file_type,omitempty"`     // best file type of the same model that fits
	Weights     int64  `json:"weights_bytes,omitempty"` // its weight size (plan OutBytes)
	Headroom    int64  `json:"headroom_bytes,omitempty"`
	Model       string `json:"model,omitempty"`           // else: largest smaller known model that fits
	ModelType   string `json:"model_file_type,omitempty"` // at this file type
	MaxCtx      int    `json:"max_ctx"`                   // the input as is: largest context that fits (0: none)
	MaxParallel int    `json:"max_parallel"`              // the input as is: most slots at the requested context
	Ladder      []Rung `json:"ladder"`
	Message     string `json:"message"`
}

// Suggest finds, for a model that does not fit p with o, the best smaller file type (from the per-tensor type
// plans, without re-quantizing), else the largest candidate model that fits at Q4_K_M, Q4_K_S or IQ4_XS, and how far
// context or slots would have to shrink instead.
func Suggest(s Shape, o Options, p Profile, candidates []Candidate) (Suggestion, error) {
	var sg Suggestion
	cur, err := s.WeightBytes()
	if err != nil {
		return sg, err
	}
	if sg.MaxCtx, err = MaxContext(s, o, p); err != nil {
		return sg, err
	}
	if sg.MaxParallel, err = MaxParallel(s, o, p); err != nil {
		return sg, err
	}
	for _, ft := range Ladder {
		q, plan, err := s.Quantize(ft)
		if err != nil {
			return sg, err
		}
		if plan.OutBytes >= cur {
			continue
		}
		b, err := EstimateShape(q, o)
		if err != nil {
			return sg, err
		}
		r := Rung{FileType: ft.String(), Weights: plan.OutBytes, Needed: b.Total, Fits: b.Total <= p.UsableBytes}
		sg.Ladder = append(sg.Ladder, r)
		if r.Fits && sg.FileType == "" {
			sg.FileType, sg.Weights, sg.Headroom = r.FileType, r.Weights, p.UsableBytes-b.Total
		}
	}
	if sg.FileType != "" {
		sg.Message = fmt.Sprintf("quantize to %s (%s of weights) to fit %s", sg.FileType, human(sg.Weights), p.Name)
		return sg, nil
	}
	for i := len(candidates) - 1; i >= 0; i-- {
		c := candidates[i]
		cw, err := c.Shape.WeightBytes()
		if err != nil {
			return sg, err
		}
		if cw == 0 {
			continue
		}
		for _, ft := range Ladder[4:7] { // Q4_K_M, Q4_K_S, IQ4_XS: below ~4.25 bpw a smaller model is the better trade
			q, plan, err := c.Shape.Quantize(ft)
			if err != nil {
				return sg, err
			}
			if plan.OutBytes >= cur {
				continue
			}
			b, err := EstimateShape(q, o)
			if err != nil {
				return sg, err
			}
			if b.Total <= p.UsableBytes {
				sg.Model, sg.ModelType = c.Name, ft.String()
				sg.Message = fmt.Sprintf("no file type of this model fits %s; %s at %s does (%s needed)",
					p.Name, c.Name, ft, human(b.Total))
				return sg, nil
			}
		}
	}
	switch {
	case sg.MaxCtx > 0:
		sg.Message = fmt.Sprintf("nothing smaller fits at this context; the model fits %s at ctx ≤ %d", p.Name, sg.MaxCtx)
	default:
		sg.Message = fmt.Sprintf("nothing fits %s", p.Name)
	}
	return sg, nil
}

// human formats bytes as GB with two decimals (decimal units, as phones are sold).
func human(n int64) string { return fmt.Sprintf("%.2f GB", float64(n)/1e9) }
