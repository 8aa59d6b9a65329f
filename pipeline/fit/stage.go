package fit

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
)

// Row is one profile of the --all table.
type Row struct {
	Verdict
	MaxCtx      int `json:"max_ctx"`
	MaxParallel int `json:"max_parallel"`
}

// Result is the outcome of the fit stage.
type Result struct {
	Model       string      `json:"model"`
	Arch        string      `json:"architecture"`
	FileType    string      `json:"file_type,omitempty"`
	Breakdown   Breakdown   `json:"breakdown"`
	Verdict     Verdict     `json:"verdict"`
	Headroom    int64       `json:"headroom_bytes"`
	MaxCtx      int         `json:"max_ctx"`      // largest per-slot context that fits with Parallel slots
	MaxParallel int         `json:"max_parallel"` // most slots that fit at Ctx
	Suggestion  *Suggestion `json:"suggestion,omitempty"`
	Table       []Row       `json:"table,omitempty"` // every profile, when All
}

// Run estimates the memory of serving o.Model (or a model described by o.Config) and checks it against the phone
// profile o.Phone: verdict, headroom, the largest context and slot count that fit, and when it does not fit, what
// would. Non-GGUF input fails with a *gguf.FormatError naming the file.
func Run(ctx context.Context, o Options, rep pipeline.Reporter) (Result, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if (o.Model == "") == (o.Config == "") {
		return Result{}, errors.New("fit: give exactly one of a GGUF model or a config.json")
	}
	profiles, err := LoadProfiles(o.ProfilesFile)
	if err != nil {
		return Result{}, err
	}
	phone := o.Phone
	if phone == "" {
		phone = "16gb"
	}
	prof, err := profiles.Lookup(phone)
	if err != nil {
		return Result{}, err
	}
	s, err := loadShape(o)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	rep.Begin("fit", -1)
	res, err := check(ctx, s, o, prof, profiles)
	rep.End("fit", err)
	if err != nil {
		return Result{}, err
	}
	for _, n := range res.Breakdown.Notes {
		rep.Note(pipeline.Warn, n)
	}
	return res, nil
}

func loadShape(o Options) (Shape, error) {
	if o.Model != "" {
		f, err := gguf.OpenFile(o.Model)
		if err != nil {
			var fe *gguf.FormatError
			if errors.As(err, &fe) {
				return Shape{}, fmt.Errorf("fit: %s is not a GGUF model: %w", o.Model, err)
			}
			return Shape{}, fmt.Errorf("fit: %w", err)
		}
		defer f.Close()
		// A file the engines cannot load does not "fit": refuse it (an input error) before estimating, with the
		// same checks serve runs (for the built-in engine also its own limits, such as no MTP block).
		if err := modelcheck.CheckFile(f, modelcheck.Options{Serve: o.Engine == GoEngine, KVCacheType: o.KVType}); err != nil {
			return Shape{}, fmt.Errorf("fit: %w", err)
		}
		return ShapeOf(f), nil
	}
	data, err := os.ReadFile(o.Config)
	if err != nil {
		return Shape{}, fmt.Errorf("fit: %w", err)
	}
	if len(data) > 16<<20 {
		return Shape{}, fmt.Errorf("fit: %s: %d bytes is too large for a config.json", o.Config, len(data))
	}
	s, err := ShapeFromConfig(data)
	if err != nil {
		return Shape{}, fmt.Errorf("%w (in %s)", err, o.Config)
	}
	s.Name = o.Config
	ft := o.FileType
	if ft == 0 {
		ft = gguf.FileTypeQ4_K_M
	}
	if ft == gguf.FileTypeBF16 {
		return s, nil
	}
	q, _, err := s.Quantize(ft)
	return q, err
}

func check(ctx context.Context, s Shape, o Options, prof Profile, profiles Profiles) (Result, error) {
	b, err := EstimateShape(s, o)
	if err != nil {
		return Result{}, err
	}
	r := Result{Model: s.Name, Arch: s.Arch, Breakdown: b, Verdict: Check(b, prof)}
	if s.FileType != 0 || s.KV["general.file_type"] != nil {
		r.FileType = s.FileType.String()
	}
	r.Headroom = r.Verdict.Headroom
	// The maxima are for the settings the estimate used (defaults filled in).
	eo := o
	eo.Ctx, eo.Parallel, eo.UBatch = b.Ctx, b.Parallel, 0
	if o.UBatch != 0 {
		eo.UBatch = o.UBatch
	}
	if r.MaxCtx, err = MaxContext(s, eo, prof); err != nil {
		return Result{}, err
	}
	if r.MaxParallel, err = MaxParallel(s, eo, prof); err != nil {
		return Result{}, err
	}
	if !r.Verdict.Fits {
		cands, err := Known()
		if err != nil {
			return Result{}, err
		}
		sg, err := Suggest(s, eo, prof, cands)
		if err != nil {
			return Result{}, err
		}
		r.Suggestion = &sg
	}
	if o.All {
		for _, p := range profiles {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			row := Row{Verdict: Check(b, p)}
			if row.MaxCtx, err = MaxContext(s, eo, p); err != nil {
				return Result{}, err
			}
			if row.MaxParallel, err = MaxParallel(s, eo, p); err != nil {
				return Result{}, err
			}
			r.Table = append(r.Table, row)
		}
	}
	return r, nil
}
