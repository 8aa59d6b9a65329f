package auto

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// MeasureOptions configure Measure.
type MeasureOptions struct {
	// Reference is the unquantized GGUF (F16, BF16 or F32) the mix is made from and measured against.
	Reference string `json:"reference"`
	// Prompts are the calibration prompts the KL divergence is measured on.
	Prompts []eval.Prompt `json:"-"`
	// Load loads a GGUF for evaluation (the CLI passes the built-in engine).
	Load eval.Loader `json:"-"`
	// Imatrix is used for every trial quantization when set (the groups' sensitivities are those of the
	// quantization the final file will have).
	Imatrix *imatrix.Importance `json:"-"`
	// Ladder is the types measured; default DefaultLadder. Q8_0 (the reference) is always part of it, types
	// that need an importance matrix are left out without one.
	Ladder []gguf.Type `json:"-"`
	// Bands is the number of layer bands per tensor kind; default 4.
	Bands int `json:"bands"`
	// Tokens bounds the positions evaluated per measurement; default 1024.
	Tokens int `json:"tokens"`
	// Window is the context of one evaluation (eval's Window); 0 = the models' context.
	Window int `json:"window,omitempty"`
	// WorkDir holds the trial files, one at a time, and the reference's logits (default: the reference's
	// folder).
	WorkDir string `json:"-"`
	// Threads for the trial quantizations; 0 = all cores.
	Threads int `json:"-"`
}

// Measurement is the sensitivity of every group at every type of the ladder.
type Measurement struct {
	// BaseKLD is the mean KLD of the file with every quantizable tensor at Q8_0.
	BaseKLD float64 `json:"base_kld"`
	// Groups hold, per type, the group's size and the KLD its quantization adds to BaseKLD.
	Groups []Group `json:"groups"`
	// Fixed is the size of the tensors no group holds (norms, biases, the other tensors kept as they are).
	Fixed int64 `json:"fixed_bytes"`
	// Elements is the number of values of all tensors (for bits per weight).
	Elements int64 `json:"elements"`
	// Positions is the number of positions each KLD was measured on.
	Positions int     `json:"positions"`
	Trials    int     `json:"trials"`
	Seconds   float64 `json:"seconds"`
}

// Sizes fills every group's choices with their sizes for the ladder (no measurement yet) from the plans of
// the source: the reference plan has every quantizable tensor at Q8_0; a group's choice at type t is that
// plan with the group's tensors at t (after llama-quantize's row-length fallback). It returns the groups, the
// fixed size and the element count.
func Sizes(src *quantize.Source, ladder []gguf.Type, bands int, hasImatrix bool) ([]Group, int64, int64, error) {
	info, err := quantize.ModelInfo(src)
	if err != nil {
		return nil, 0, 0, err
	}
	base, err := quantize.MakeSourcePlan(src, gguf.FileTypeQ8_0, plan.Overrides{HasImatrix: hasImatrix})
	if err != nil {
		return nil, 0, 0, err
	}
	if base.Requantize {
		return nil, 0, 0, pipeline.InputError(fmt.Errorf("auto: %s is already quantized; the mix is made from the F16/BF16/F32 model", src.Name))
	}
	groups, err := Groups(base, info.BlockCount, bands)
	if err != nil {
		return nil, 0, 0, err
	}
	inGroup := map[string]bool{}
	for _, g := range groups {
		for _, t := range g.Tensors {
			inGroup[t] = true
		}
	}
	var fixed int64
	for _, e := range base.Entries {
		if !inGroup[e.Name] {
			fixed += e.Bytes
		}
	}
	if !slices.Contains(ladder, reference) {
		ladder = append(slices.Clone(ladder), reference)
	}
	for gi := range groups {
		g := &groups[gi]
		for _, t := range ladder {
			rule, err := g.Rule(t)
			if err != nil {
				return nil, 0, 0, err
			}
			p, err := quantize.MakeSourcePlan(src, gguf.FileTypeQ8_0, plan.Overrides{HasImatrix: hasImatrix, TensorTypes: []plan.TensorTypeRule{rule}})
			if err != nil {
				return nil, 0, 0, err
			}
			var bytes int64
			needs := false
			for _, e := range p.Entries {
				if inGroupOf(g, e.Name) {
					bytes += e.Bytes
					needs = needs || e.NeedsImatrix
				}
			}
			if needs && !hasImatrix {
				continue
			}
			g.Choices = append(g.Choices, Choice{Type: t, TypeName: t.String(), Bytes: bytes})
		}
		slices.SortStableFunc(g.Choices, func(a, b Choice) int { return cmp.Compare(a.Bytes, b.Bytes) })
		g.Choices = dedupe(g.Choices)
	}
	return groups, fixed, base.Elements, nil
}

func inGroupOf(g *Group, name string) bool {
	_, ok := slices.BinarySearch(g.Tensors, name)
	return ok
}

// dedupe drops choices that end up the same size as a cheaper-listed one of the same type after the
// row-length fallback (a K-quant whose rows fall back to the type below it).
func dedupe(cs []Choice) []Choice {
	out := cs[:0]
	for _, c := range cs {
		if n := len(out); n > 0 && out[n-1].Bytes == c.Bytes && out[n-1].Type == c.Type {
			continue
		}
		out = append(out, c)
	}
	return out
}

// Measure computes the sensitivity of every group (see the package documentation): one all-Q8_0 file, then one
// file per group and lower type, each measured against the reference on the prompts. The reference's logits
// are computed once and replayed from a file in WorkDir. Only one trial file exists at a time.
func Measure(ctx context.Context, o MeasureOptions, rep pipeline.Reporter) (*Measurement, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if o.Reference == "" || len(o.Prompts) == 0 || o.Load == nil {
		return nil, errors.New("auto: measuring needs a reference model, calibration prompts and a loader")
	}
	if o.Bands == 0 {
		o.Bands = 4
	}
	if o.Tokens == 0 {
		o.Tokens = 1024
	}
	if o.Ladder == nil {
		o.Ladder = DefaultLadder
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Dir(o.Reference)
	}
	begin := time.Now()
	ref, err := quantize.OpenGGUF(o.Reference)
	if err != nil {
		return nil, err
	}
	defer ref.Close()
	hasIm := o.Imatrix != nil && o.Imatrix.Len() > 0
	groups, fixed, elements, err := Sizes(ref, o.Ladder, o.Bands, hasIm)
	if err != nil {
		return nil, err
	}
	m := &Measurement{Groups: groups, Fixed: fixed, Elements: elements}
	trials := 1
	for _, g := range groups {
		trials += len(g.Choices) - 1
	}

	// The reference model, its logits cached for every trial.
	refModel, err := o.Load(ctx, o.Reference)
	if err != nil {
		return nil, fmt.Errorf("auto: load %s: %w", o.Reference, err)
	}
	cache, err := eval.NewLogitCache(refModel, o.WorkDir)
	if err != nil {
		refModel.Close()
		return nil, err
	}
	defer cache.Close()

	// The all-Q8_0 file every trial starts from.
	basePath, err := tempPath(o.WorkDir, "base")
	if err != nil {
		return nil, err
	}
	defer os.Remove(basePath)
	if _, err := quantize.Run(ctx, quantize.Options{Source: ref, FileType: gguf.FileTypeQ8_0, Out: basePath, Threads: o.Threads}, nil); err != nil {
		return nil, fmt.Errorf("auto: reference-type file: %w", err)
	}
	base, err := quantize.OpenGGUF(basePath)
	if err != nil {
		return nil, err
	}
	defer base.Close()

	const step = "sensitivity"
	pipeline.BeginItems(rep, step, int64(trials), "trials")
	measure := func(path string) (eval.DistResult, error) {
		cand, err := o.Load(ctx, path)
		if err != nil {
			return eval.DistResult{}, err
		}
		defer cand.Close()
		return eval.CompareDistributions(ctx, cache, cand, o.Prompts, eval.DistOptions{Window: o.Window, MaxTokens: o.Tokens}, nil)
	}
	d, err := measure(basePath)
	if err != nil {
		rep.End(step, err)
		return nil, fmt.Errorf("auto: measure the Q8_0 file: %w", err)
	}
	m.BaseKLD, m.Positions = d.MeanKLD, d.Positions
	rep.Add(1)
	m.Trials = 1
	for gi := range m.Groups {
		g := &m.Groups[gi]
		for ci := range g.Choices {
			c := &g.Choices[ci]
			if c.Type == reference {
				continue
			}
			kld, err := trial(ctx, o, ref, base, g, c.Type, measure)
			if err != nil {
				rep.End(step, err)
				return nil, fmt.Errorf("auto: %s at %s: %w", g.Name, c.Type, err)
			}
			c.DeltaKLD = kld - m.BaseKLD
			m.Trials++
			rep.Add(1)
		}
	}
	rep.End(step, nil)
	m.Seconds = time.Since(begin).Seconds()
	return m, nil
}

// trial writes the file with g's tensors at t (from the reference) and every other tensor as in base, and
// measures it.
func trial(ctx context.Context, o MeasureOptions, ref, base *quantize.Source, g *Group, t gguf.Type,
	measure func(string) (eval.DistResult, error)) (float64, error) {
	src, err := overlay(base, ref, g.Tensors)
	if err != nil {
		return 0, err
	}
	rule, err := g.Rule(t)
	if err != nil {
		return 0, err
	}
	path, err := tempPath(o.WorkDir, "trial")
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	_, err = quantize.Run(ctx, quantize.Options{Source: src, FileType: gguf.FileTypeQ8_0, Out: path, Threads: o.Threads,
		Overrides: plan.Overrides{TensorTypes: []plan.TensorTypeRule{rule}}, Imatrix: o.Imatrix}, nil)
	if err != nil {
		return 0, err
	}
	d, err := measure(path)
	if err != nil {
		return 0, err
	}
	return d.MeanKLD, nil
}

// overlay is base with the named tensors taken from ref instead.
func overlay(base, ref *quantize.Source, names []string) (*quantize.Source, error) {
	out := &quantize.Source{Name: base.Name, Arch: base.Arch, KVs: base.KVs, Close: func() error { return nil }}
	byName := make(map[string]*quantize.SourceTensor, len(ref.Tensors))
	for i := range ref.Tensors {
		byName[ref.Tensors[i].Name] = &ref.Tensors[i]
	}
	take := map[string]bool{}
	for _, n := range names {
		if byName[n] == nil {
			return nil, fmt.Errorf("auto: the reference has no tensor %s", n)
		}
		take[n] = true
	}
	for _, t := range base.Tensors {
		if take[t.Name] {
			t = *byName[t.Name]
		}
		out.Tensors = append(out.Tensors, t)
	}
	return out, nil
}

func tempPath(dir, what string) (string, error) {
	f, err := os.CreateTemp(dir, ".phonellm-auto-"+what+"-*.gguf")
	if err != nil {
		return "", fmt.Errorf("auto: %w", err)
	}
	name := f.Name()
	f.Close()
	return name, nil
}
