package eval

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// SensitivityOptions configure the per-tensor sensitivity check: which groups of tensors cost the most KLD
// when quantized with FileType's plan.
type SensitivityOptions struct {
	// Reference is the unquantized GGUF (F16, BF16 or F32) that is quantized and compared against.
	Reference string `json:"reference"`
	// FileType is the plan under study, e.g. Q4_K_M.
	FileType gguf.FileType `json:"-"`
	// Bump is the type a group is raised to in each trial; default Q8_0.
	Bump gguf.Type `json:"-"`
	// Prompts, Load, Window and MaxTokens are as in DistOptions.
	Prompts   string `json:"prompts"`
	Load      Loader `json:"-"`
	Window    int    `json:"window,omitempty"`
	MaxTokens int    `json:"max_tokens,omitempty"`
	// WorkDir holds the trial GGUFs, one at a time (default: the reference's folder); each is removed after
	// its trial.
	WorkDir string `json:"-"`
	// Suggest is how many --tensor-type rules to suggest; default 3.
	Suggest int `json:"-"`
}

// GroupSensitivity is one trial: the plan with one tensor group raised to Bump.
type GroupSensitivity struct {
	// Group is the tensor name without "blk.N." (e.g. "ffn_down.weight"); Pattern matches its tensors as a
	// --tensor-type pattern.
	Group   string `json:"group"`
	Pattern string `json:"pattern"`
	Tensors int    `json:"tensors"`
	// Type is the plan's type for the group (the most common one when layers differ).
	Type string `json:"type"`
	// MeanKLD is the candidate's mean KLD with this group at Bump; Gain is the baseline's mean KLD minus it.
	MeanKLD float64 `json:"mean_kld"`
	Gain    float64 `json:"gain"`
	// ExtraBytes is the file size this costs; GainPerMiB is Gain per MiB of it.
	ExtraBytes int64   `json:"extra_bytes"`
	GainPerMiB float64 `json:"gain_per_mib"`
}

// SensitivityResult ranks the tensor groups by how much raising them to Bump lowers the KLD.
type SensitivityResult struct {
	Reference   string             `json:"reference"`
	FileType    string             `json:"file_type"`
	Bump        string             `json:"bump"`
	BaselineKLD float64            `json:"baseline_kld"`
	Groups      []GroupSensitivity `json:"groups"` // by Gain, largest first
	// Suggestions are --tensor-type rules for the groups with the best gain per MiB.
	Suggestions []string `json:"suggestions,omitempty"`
	Seconds     float64  `json:"seconds"`
}

var blockPrefix = regexp.MustCompile(`^blk\.\d+\.`)

// Sensitivity quantizes o.Reference with o.FileType's plan, then once more for every group of quantized
// tensors with that group raised to o.Bump, and measures each file's KLD against the reference on the
// prompts. Only one trial file exists at a time, and the reference stays loaded throughout.
func Sensitivity(ctx context.Context, o SensitivityOptions, rep pipeline.Reporter) (SensitivityResult, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if o.Reference == "" || o.Prompts == "" || o.Load == nil {
		return SensitivityResult{}, errors.New("eval: sensitivity needs a reference model, a prompt set and a loader")
	}
	if o.Window < 0 || o.MaxTokens < 0 || o.Suggest < 0 {
		return SensitivityResult{}, fmt.Errorf("eval: sensitivity: negative window %d, max tokens %d or suggestions %d", o.Window, o.MaxTokens, o.Suggest)
	}
	if o.Bump == 0 {
		o.Bump = gguf.TypeQ8_0
	}
	if o.Suggest == 0 {
		o.Suggest = 3
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Dir(o.Reference)
	}
	begin := time.Now()
	prompts, err := ReadPrompts(o.Prompts)
	if err != nil {
		return SensitivityResult{}, err
	}
	src, err := quantize.OpenGGUF(o.Reference)
	if err != nil {
		return SensitivityResult{}, fmt.Errorf("eval: sensitivity: %w", err)
	}
	base, err := quantize.MakeSourcePlan(src, o.FileType, plan.Overrides{})
	src.Close()
	if err != nil {
		return SensitivityResult{}, fmt.Errorf("eval: sensitivity: %w", err)
	}
	groups := planGroups(base, o.Bump)
	if len(groups) == 0 {
		return SensitivityResult{}, fmt.Errorf("eval: sensitivity: %s quantizes no tensor of %s below %s", o.FileType, o.Reference, o.Bump)
	}

	ref, err := o.Load(ctx, o.Reference)
	if err != nil {
		return SensitivityResult{}, fmt.Errorf("eval: load reference: %w", err)
	}
	defer ref.Close()
	dopt := DistOptions{Window: o.Window, MaxTokens: o.MaxTokens}
	// trial quantizes with the rules, measures and removes the file.
	trial := func(name string, rules []plan.TensorTypeRule) (DistResult, int64, error) {
		src, err := quantize.OpenGGUF(o.Reference)
		if err != nil {
			return DistResult{}, 0, err
		}
		f, err := os.CreateTemp(o.WorkDir, ".phonellm-sensitivity-*.gguf")
		if err != nil {
			src.Close()
			return DistResult{}, 0, fmt.Errorf("eval: sensitivity: %w", err)
		}
		path := f.Name()
		f.Close()
		defer os.Remove(path)
		q, err := quantize.Run(ctx, quantize.Options{Source: src, FileType: o.FileType, Out: path,
			Overrides: plan.Overrides{TensorTypes: rules}}, nil)
		src.Close()
		if err != nil {
			return DistResult{}, 0, fmt.Errorf("eval: sensitivity %s: %w", name, err)
		}
		cand, err := o.Load(ctx, path)
		if err != nil {
			return DistResult{}, 0, fmt.Errorf("eval: sensitivity %s: load: %w", name, err)
		}
		defer cand.Close()
		d, err := CompareDistributions(ctx, ref, cand, prompts, dopt, nil)
		if err != nil {
			return DistResult{}, 0, fmt.Errorf("eval: sensitivity %s: %w", name, err)
		}
		return d, q.Plan.OutBytes, nil
	}

	const step = "sensitivity"
	pipeline.BeginItems(rep, step, int64(len(groups)+1), "groups")
	res := SensitivityResult{Reference: o.Reference, FileType: o.FileType.String(), Bump: o.Bump.String()}
	bd, baseBytes, err := trial(o.FileType.String(), nil)
	if err != nil {
		rep.End(step, err)
		return SensitivityResult{}, err
	}
	rep.Add(1)
	res.BaselineKLD = bd.MeanKLD
	for i := range groups {
		g := &groups[i]
		rule, err := plan.ParseTensorTypeRule(g.Pattern + "=" + o.Bump.String())
		if err != nil {
			rep.End(step, err)
			return SensitivityResult{}, fmt.Errorf("eval: sensitivity %s: %w", g.Group, err)
		}
		d, bytes, err := trial(g.Group, []plan.TensorTypeRule{rule})
		if err != nil {
			rep.End(step, err)
			return SensitivityResult{}, err
		}
		g.MeanKLD, g.Gain, g.ExtraBytes = d.MeanKLD, bd.MeanKLD-d.MeanKLD, bytes-baseBytes
		if g.ExtraBytes > 0 {
			g.GainPerMiB = g.Gain / (float64(g.ExtraBytes) / (1 << 20))
		}
		rep.Add(1)
	}
	rep.End(step, nil)
	slices.SortStableFunc(groups, func(a, b GroupSensitivity) int { return cmp.Compare(b.Gain, a.Gain) })
	res.Groups = groups
	byValue := slices.Clone(groups)
	slices.SortStableFunc(byValue, func(a, b GroupSensitivity) int { return cmp.Compare(b.GainPerMiB, a.GainPerMiB) })
	for _, g := range byValue {
		if len(res.Suggestions) == o.Suggest || g.Gain <= 0 {
			break
		}
		res.Suggestions = append(res.Suggestions, g.Pattern+"="+strings.ToLower(o.Bump.String()))
	}
	res.Seconds = time.Since(begin).Seconds()
	return res, nil
}

// planGroups groups the plan's tensors quantized below bump by name without the block number.
func planGroups(p plan.Plan, bump gguf.Type) []GroupSensitivity {
	var out []GroupSensitivity
	index := map[string]int{}
	types := map[string]map[string]int{}
	for _, e := range p.Entries {
		if !e.To.Quantized() || e.To == bump || !e.Convert() {
			continue
		}
		group := blockPrefix.ReplaceAllString(e.Name, "")
		i, ok := index[group]
		if !ok {
			pat := "^" + regexp.QuoteMeta(group) + "$"
			if group != e.Name {
				pat = `^blk\.\d+\.` + regexp.QuoteMeta(group) + "$"
			}
			i = len(out)
			index[group] = i
			out = append(out, GroupSensitivity{Group: group, Pattern: strings.ToLower(pat)})
			types[group] = map[string]int{}
		}
		out[i].Tensors++
		types[group][e.ToName]++
	}
	for i := range out {
		best := 0
		for t, n := range types[out[i].Group] {
			if n > best || n == best && t < out[i].Type {
				out[i].Type, best = t, n
			}
		}
	}
	return out
}
