package auto

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// Metadata keys of the mix (defined in package quantize, which reads them back).
const (
	KeyTensorTypes  = quantize.KeyTensorTypes
	KeyTarget       = quantize.KeyTarget
	KeyPredictedKLD = quantize.KeyPredictedKLD
)

// Target is what the mix must meet; exactly one field is set.
type Target struct {
	// Size is the largest output file, in bytes.
	Size int64 `json:"size,omitempty"`
	// BPW is the largest size in bits per weight (llama-quantize's: tensor bytes × 8 / values of all tensors).
	BPW float64 `json:"bpw,omitempty"`
	// MaxKLD is the largest predicted mean KL divergence; the smallest mix that meets it is chosen.
	MaxKLD float64 `json:"max_kld,omitempty"`
	// Fit is a phone profile the model must fit with FitOptions (context, slots, engine): the largest mix
	// whose estimated memory fits.
	Fit        *fit.Profile `json:"fit,omitempty"`
	FitOptions fit.Options  `json:"-"`
}

func (t Target) validate() error {
	n := 0
	for _, set := range []bool{t.Size != 0, t.BPW != 0, t.MaxKLD != 0, t.Fit != nil} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return errors.New("auto: give exactly one target: a size, bits per weight, a KLD bound or a phone")
	case t.Size < 0, t.BPW < 0 || t.BPW > 32 || math.IsNaN(t.BPW), t.MaxKLD < 0 || math.IsNaN(t.MaxKLD):
		return fmt.Errorf("auto: target %+v out of range", t)
	}
	return nil
}

// String describes the target as KeyTarget records it.
func (t Target) String() string {
	switch {
	case t.Size > 0:
		return fmt.Sprintf("size %d", t.Size)
	case t.BPW > 0:
		return fmt.Sprintf("bpw %g", t.BPW)
	case t.MaxKLD > 0:
		return fmt.Sprintf("max-kld %g", t.MaxKLD)
	case t.Fit != nil:
		return "fit " + t.Fit.Name
	}
	return ""
}

// Options configure Run.
type Options struct {
	Measure MeasureOptions
	Target  Target
	// Out is the GGUF to write; required unless DryRun.
	Out string
	// ImatrixName is recorded as quantize.imatrix.file (default: the importance matrix's path).
	ImatrixName string
	// Cache, when set, is a JSON file of the measurement: reused when it was made from the same reference,
	// prompts, importance matrix and measuring options, written otherwise.
	Cache string
	// DryRun measures and solves but writes no model.
	DryRun bool
}

// Row is one group of the chosen mix.
type Row struct {
	Group    string  `json:"group"`
	Tensors  int     `json:"tensors"`
	Type     string  `json:"type"`
	Bytes    int64   `json:"bytes"`
	DeltaKLD float64 `json:"delta_kld"`
}

// Result is the chosen mix and the file made with it.
type Result struct {
	Target       string  `json:"target"`
	Budget       int64   `json:"budget_bytes,omitempty"` // bytes the groups could use
	BaseKLD      float64 `json:"base_kld"`
	PredictedKLD float64 `json:"predicted_kld"`
	Rows         []Row   `json:"mix"`
	// Rules are the mix as --tensor-type rules (also in the file's metadata).
	Rules []string `json:"rules"`
	// FileType is general.file_type of the output: the file type whose base type holds the most bytes.
	FileType string `json:"file_type"`
	// Measured says whether the sensitivities were measured in this run (false: read from Cache).
	Measured    bool            `json:"measured"`
	Measurement *Measurement    `json:"measurement"`
	Quantize    quantize.Result `json:"quantize"`
	Seconds     float64         `json:"seconds"`
}

// Run measures the groups' sensitivities (or reads them from Cache), chooses the mix for the target and, unless
// DryRun, quantizes the reference with it (and the importance matrix) into Out.
func Run(ctx context.Context, o Options, rep pipeline.Reporter) (Result, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := o.Target.validate(); err != nil {
		return Result{}, err
	}
	if o.Out == "" && !o.DryRun {
		return Result{}, errors.New("auto: no output path")
	}
	begin := time.Now()
	res := Result{Target: o.Target.String()}
	m, measured, err := measurement(ctx, o, rep)
	if err != nil {
		return res, err
	}
	res.Measurement, res.Measured, res.BaseKLD = m, measured, m.BaseKLD

	src, err := quantize.OpenGGUF(o.Measure.Reference)
	if err != nil {
		return res, err
	}
	defer src.Close()
	var pick []int
	if o.Target.MaxKLD > 0 {
		if pick, err = SolveMaxKLD(m.Groups, o.Target.MaxKLD-m.BaseKLD); err != nil {
			return res, pipeline.CheckFailed(err)
		}
	} else {
		budget, err := budgetFor(o, m, src)
		if err != nil {
			return res, err
		}
		res.Budget = budget
		if pick, err = Solve(m.Groups, budget); err != nil {
			if errors.Is(err, ErrInfeasible) {
				return res, pipeline.CheckFailed(fmt.Errorf("auto: %s: even the smallest types (%d bytes for the groups) exceed the %d bytes available",
					o.Target, smallest(m.Groups), budget))
			}
			return res, err
		}
	}
	rules := make([]plan.TensorTypeRule, len(m.Groups))
	bytesByType := map[gguf.Type]int64{}
	for g, gr := range m.Groups {
		c := gr.Choices[pick[g]]
		if rules[g], err = gr.Rule(c.Type); err != nil {
			return res, err
		}
		res.Rows = append(res.Rows, Row{Group: gr.Name, Tensors: len(gr.Tensors), Type: c.Type.String(), Bytes: c.Bytes, DeltaKLD: max(c.DeltaKLD, 0)})
		res.Rules = append(res.Rules, rules[g].String())
		bytesByType[c.Type] += c.Bytes
	}
	res.PredictedKLD = m.BaseKLD + DeltaKLD(m.Groups, pick)
	ft := labelFileType(bytesByType)
	res.FileType = ft.String()
	if o.DryRun {
		res.Seconds = time.Since(begin).Seconds()
		return res, nil
	}
	meta := []gguf.KV{
		{Key: KeyTensorTypes, Value: gguf.Strings(res.Rules)},
		{Key: KeyTarget, Value: gguf.String(res.Target)},
		{Key: KeyPredictedKLD, Value: gguf.Float32(float32(res.PredictedKLD))},
	}
	q, err := quantize.Run(ctx, quantize.Options{Source: src, FileType: ft, Out: o.Out, Threads: o.Measure.Threads,
		Overrides: plan.Overrides{TensorTypes: rules}, Imatrix: o.Measure.Imatrix, ImatrixName: o.ImatrixName, Meta: meta}, rep)
	if err != nil {
		return res, err
	}
	res.Quantize = q
	if o.Target.Size > 0 && len(q.Artifacts) > 0 && q.Artifacts[0].Size > o.Target.Size {
		return res, fmt.Errorf("auto: internal error: the file has %d bytes, over the %d asked for", q.Artifacts[0].Size, o.Target.Size)
	}
	res.Seconds = time.Since(begin).Seconds()
	return res, nil
}

// measurement returns the sensitivities: from the cache file when it matches, measured otherwise.
func measurement(ctx context.Context, o Options, rep pipeline.Reporter) (*Measurement, bool, error) {
	key, err := measureKey(o.Measure)
	if err != nil {
		return nil, false, err
	}
	if o.Cache != "" {
		var c struct {
			Key         string       `json:"key"`
			Measurement *Measurement `json:"measurement"`
		}
		if raw, err := os.ReadFile(o.Cache); err == nil && json.Unmarshal(raw, &c) == nil && c.Key == key && c.Measurement != nil {
			if err := restoreTypes(c.Measurement); err == nil {
				rep.Note(pipeline.Info, fmt.Sprintf("sensitivities from %s (%d trials)", o.Cache, c.Measurement.Trials))
				return c.Measurement, false, nil
			}
		}
	}
	m, err := Measure(ctx, o.Measure, rep)
	if err != nil {
		return nil, false, err
	}
	if o.Cache != "" {
		raw, err := json.MarshalIndent(struct {
			Key         string       `json:"key"`
			Measurement *Measurement `json:"measurement"`
		}{key, m}, "", " ")
		if err == nil {
			_, err = fsx.WriteFile(o.Cache, append(raw, '\n'))
		}
		if err != nil {
			rep.Note(pipeline.Warn, fmt.Sprintf("sensitivities not saved: %v", err))
		}
	}
	return m, true, nil
}

// restoreTypes sets the Type of every choice read from JSON from its name.
func restoreTypes(m *Measurement) error {
	for gi := range m.Groups {
		for ci := range m.Groups[gi].Choices {
			c := &m.Groups[gi].Choices[ci]
			t, err := gguf.ParseType(c.TypeName)
			if err != nil {
				return err
			}
			c.Type = t
		}
		if len(m.Groups[gi].Choices) == 0 {
			return errors.New("auto: cached group without choices")
		}
	}
	return nil
}

// measureKey fingerprints what a measurement depends on.
func measureKey(o MeasureOptions) (string, error) {
	st, err := os.Stat(o.Reference)
	if err != nil {
		return "", fmt.Errorf("auto: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "ref %s %d %d\n", filepath.Base(o.Reference), st.Size(), st.ModTime().UnixNano())
	prompts, _ := json.Marshal(o.Prompts)
	h.Write(prompts)
	if o.Imatrix != nil {
		fmt.Fprintf(h, "imatrix %s %d\n", o.Imatrix.SHA256, o.Imatrix.Len())
	}
	ladder := o.Ladder
	if ladder == nil {
		ladder = DefaultLadder
	}
	fmt.Fprintf(h, "ladder %v bands %d tokens %d window %d\n", ladder, o.Bands, o.Tokens, o.Window)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// budgetFor is the size the groups may take for a size, bits-per-weight or phone target.
func budgetFor(o Options, m *Measurement, src *quantize.Source) (int64, error) {
	t := o.Target
	switch {
	case t.BPW > 0:
		return int64(t.BPW*float64(m.Elements)/8) - m.Fixed, nil
	case t.Size > 0:
		header, err := headerBound(src, m, o)
		if err != nil {
			return 0, err
		}
		return t.Size - header - m.Fixed, nil
	}
	// A phone: what the estimate leaves for the weights after the cache, compute buffers and overhead.
	f, err := gguf.OpenFile(o.Measure.Reference)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := fit.Estimate(f, t.FitOptions)
	if err != nil {
		return 0, err
	}
	return t.Fit.UsableBytes - (b.Total - b.Weights) - m.Fixed, nil
}

// headerBound bounds the bytes of the output file besides the tensor data: the metadata with the keys Run adds
// (the rules taken at their longest type names), the tensor infos, and the alignment padding of every tensor.
func headerBound(src *quantize.Source, m *Measurement, o Options) (int64, error) {
	w := gguf.NewWriter()
	for _, kv := range src.KVs {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			return 0, err
		}
	}
	var rules []string
	for _, g := range m.Groups {
		rules = append(rules, g.Pattern()+"=iq2_xxs") // the longest type name
	}
	long := strings.Repeat("x", 128)
	for _, kv := range []gguf.KV{
		{Key: plan.KeyQuantizationVersion, Value: gguf.Uint32(0)}, {Key: plan.KeyFileType, Value: gguf.Uint32(0)},
		{Key: quantize.KeyImatrixFile, Value: gguf.String(long)}, {Key: quantize.KeyImatrixDataset, Value: gguf.String(long)},
		{Key: quantize.KeyImatrixEntries, Value: gguf.Uint32(0)}, {Key: quantize.KeyImatrixChunks, Value: gguf.Uint32(0)},
		{Key: quantize.KeyImatrixSHA256, Value: gguf.String(strings.Repeat("0", 64))},
		{Key: KeyTensorTypes, Value: gguf.Strings(rules)}, {Key: KeyTarget, Value: gguf.String(long)},
		{Key: KeyPredictedKLD, Value: gguf.Float32(0)},
	} {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			return 0, err
		}
	}
	for _, t := range src.Tensors {
		if err := w.AddTensor(t.Name, gguf.TypeF32, slices.Clone(t.Shape)); err != nil {
			return 0, err
		}
	}
	dataOffset, _ := w.Layout()
	return dataOffset + int64(gguf.DefaultAlignment)*int64(len(src.Tensors)), nil
}

// labelFileType is the file type recorded for a mix: the classic file type whose base type holds the most bytes.
func labelFileType(bytes map[gguf.Type]int64) gguf.FileType {
	var top gguf.Type
	var most int64 = -1
	for t, n := range bytes {
		if n > most || n == most && t < top {
			top, most = t, n
		}
	}
	switch top {
	case gguf.TypeQ2_K:
		return gguf.FileTypeQ2_K
	case gguf.TypeQ3_K:
		return gguf.FileTypeQ3_K_M
	case gguf.TypeQ4_K:
		return gguf.FileTypeQ4_K_M
	case gguf.TypeQ5_K:
		return gguf.FileTypeQ5_K_M
	case gguf.TypeQ6_K:
		return gguf.FileTypeQ6_K
	case gguf.TypeIQ4_XS:
		return gguf.FileTypeIQ4_XS
	case gguf.TypeIQ4_NL:
		return gguf.FileTypeIQ4_NL
	}
	for _, ft := range gguf.FileTypes() {
		if d, ok := plan.DefaultType(ft); ok && d == top {
			return ft
		}
	}
	return gguf.FileTypeQ8_0
}

func smallest(groups []Group) int64 {
	var n int64
	for _, g := range groups {
		n += g.Choices[0].Bytes
	}
	return n
}
