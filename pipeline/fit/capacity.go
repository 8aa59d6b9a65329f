package fit

import (
	"fmt"
	"math"
	"strings"
)

// Capacity planning: how many phones a review workload needs, and what they cost.
//
// Prompt evaluation on a phone's CPU is compute-bound: a token at position i costs 2·W multiply-adds of the
// matrix weights it goes through (W = the parameters of every block's projections, a MoE's used experts only)
// plus 4·i·d over the full-attention layers (QKᵀ and AV over the i tokens before it, d = heads × head size
// summed over those layers). Evaluating tokens a..b-1 therefore costs 2·W·(b-a) + 2·d·(a+b-1)·(b-a) FLOPs. A
// phone's effective rate F (FLOP/s) comes from the profile's anchors — published prompt times of known models on
// phones of its tier — as the FLOPs of each anchor's prompt over its seconds; the anchors' spread is the range.
// A tier without anchors takes the anchored tier's F scaled by its big cores, times 0.6 to 1.0 (its cores may be
// slower; an inference, stated in the basis). The linear-attention layers' state updates (Qwen3.5) and the
// norms are left out: a few percent of the matrix work.
//
// Generation is memory-bound: each token reads the active weights and the KV cache once, at 30 to 60 % of the
// profile's theoretical bandwidth (llama.cpp on phone CPUs reaches about that; an inference, no published anchor
// for these tiers). A review is one prompt and GenerateTokens tokens; a hit evaluates only the tokens past the
// shared prefix (their attention still spans it). A phone serves reviews one after another (one slot: on a CPU
// more slots share the same cores), so it does 3600/t reviews an hour. With a latency bound L, Poisson arrivals
// and a deterministic service time t (M/D/1), the mean latency t + ρt/(2(1-ρ)) stays within L up to a load of
// ρ = 2(L-t)/(2L-t), and the phones needed grow by 1/ρ.

// Range is an estimate's low and high end.
type Range struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

func (r Range) scale(f float64) Range { return Range{r.Lo * f, r.Hi * f} }

// String prints "a–b" with sensible precision.
func (r Range) String() string {
	f := func(v float64) string {
		switch {
		case v >= 100:
			return fmt.Sprintf("%.0f", v)
		case v >= 10:
			return fmt.Sprintf("%.1f", v)
		default:
			return fmt.Sprintf("%.2f", v)
		}
	}
	if f(r.Lo) == f(r.Hi) {
		return f(r.Lo)
	}
	return f(r.Lo) + "–" + f(r.Hi)
}

// CapacityOptions describe the workload and the target.
type CapacityOptions struct {
	// PromptTokens per review (required) and GenerateTokens out (default 8).
	PromptTokens, GenerateTokens int
	// SharedTokens of each prompt are a prefix the phone's cache holds when a review hits (the rubric); 0 = no
	// reuse. HitRate is the share of reviews that hit (default 1 when SharedTokens > 0: affinity routing with
	// warm-up; 0 otherwise).
	SharedTokens int
	HitRate      float64
	// ReviewsPerHour is the target throughput; LatencySeconds, when set, bounds the mean latency of a review.
	ReviewsPerHour float64
	LatencySeconds float64
	// PricePerHour is one phone-hour's price in Currency (0: not known, no cost printed).
	PricePerHour float64
	Currency     string
	PriceBasis   string
	// Anchored, when the profile has no anchors of its own, is the tier whose anchors are scaled (default: the
	// built-in 16gb).
	Anchored *Profile
}

// Validate checks the options; errors are input errors.
func (o CapacityOptions) Validate() error {
	switch {
	case o.PromptTokens < 1 || o.PromptTokens > 1<<24:
		return capacityInput("prompt tokens %d, want 1..%d", o.PromptTokens, 1<<24)
	case o.SharedTokens < 0 || o.SharedTokens >= o.PromptTokens:
		return capacityInput("shared tokens %d, want 0..%d (fewer than the prompt's)", o.SharedTokens, o.PromptTokens-1)
	case o.GenerateTokens < 0 || o.GenerateTokens > 1<<20:
		return capacityInput("generate tokens %d out of range", o.GenerateTokens)
	case math.IsNaN(o.HitRate) || o.HitRate < 0 || o.HitRate > 1:
		return capacityInput("hit rate %v, want 0..1", o.HitRate)
	case math.IsNaN(o.ReviewsPerHour) || o.ReviewsPerHour < 0 || math.IsInf(o.ReviewsPerHour, 0):
		return capacityInput("reviews per hour %v, want >= 0", o.ReviewsPerHour)
	case math.IsNaN(o.LatencySeconds) || o.LatencySeconds < 0 || math.IsInf(o.LatencySeconds, 0):
		return capacityInput("latency bound %v, want >= 0", o.LatencySeconds)
	case math.IsNaN(o.PricePerHour) || o.PricePerHour < 0 || math.IsInf(o.PricePerHour, 0):
		return capacityInput("price %v, want >= 0", o.PricePerHour)
	}
	return nil
}

// CapacityInputError is a capacity-planning option out of range; it is an input error (pipeline.IsInputError).
type CapacityInputError struct{ Msg string }

func (e *CapacityInputError) Error() string { return "fit: capacity: " + e.Msg }

// InputError classifies the error.
func (e *CapacityInputError) InputError() bool { return true }

func capacityInput(format string, args ...any) error {
	return &CapacityInputError{Msg: fmt.Sprintf(format, args...)}
}

// CapacityPlan is the outcome: speeds, review times, phones needed and their cost, each as a range, with the
// basis of every figure.
type CapacityPlan struct {
	Profile        string  `json:"profile"`
	Model          string  `json:"model"`
	PromptTokens   int     `json:"prompt_tokens"`
	SharedTokens   int     `json:"shared_tokens"`
	GenerateTokens int     `json:"generate_tokens"`
	HitRate        float64 `json:"hit_rate"`
	// FLOPS is the phone's effective prompt-evaluation rate; PromptTokensPerSec a whole prompt's rate and
	// DecodeTokensPerSec generation's.
	FLOPS              Range `json:"flops"`
	PromptTokensPerSec Range `json:"prompt_tokens_per_s"`
	DecodeTokensPerSec Range `json:"decode_tokens_per_s"`
	// MissSeconds is a review that evaluates its whole prompt, HitSeconds one that reuses the shared prefix,
	// ReviewSeconds the mean at HitRate.
	MissSeconds   Range `json:"miss_seconds"`
	HitSeconds    Range `json:"hit_seconds"`
	ReviewSeconds Range `json:"review_seconds"`
	// PhoneReviewsPerHour is what one phone serves (within the latency bound, when there is one).
	PhoneReviewsPerHour Range   `json:"phone_reviews_per_hour"`
	ReviewsPerHour      float64 `json:"reviews_per_hour,omitempty"`
	LatencySeconds      float64 `json:"latency_seconds,omitempty"`
	// Replicas is the phones needed for ReviewsPerHour: Lo at the fast end of the estimate, Hi at the slow end.
	Replicas struct {
		Lo int `json:"lo"`
		Hi int `json:"hi"`
	} `json:"replicas"`
	CostPerHour Range    `json:"cost_per_hour"`
	Currency    string   `json:"currency,omitempty"`
	Basis       []string `json:"basis"`
}

// work is what a model costs per token: the matrix weights a token goes through and the attention width of
// its full-attention layers.
type work struct {
	weights  float64 // parameters multiplied per token (W)
	attnDim  float64 // heads × head size, summed over the full-attention layers (d)
	kvPerTok float64 // KV bytes read per past token when generating
}

// flops is the cost of evaluating tokens a..b-1 (positions).
func (w work) flops(a, b int) float64 {
	n := float64(b - a)
	return 2*w.weights*n + 2*w.attnDim*float64(a+b-1)*n
}

// workOf derives a model's per-token work from its shape.
func workOf(s Shape) (work, error) {
	h, err := s.hparams()
	if err != nil {
		return work{}, err
	}
	var w work
	for _, t := range s.Tensors {
		if !strings.HasPrefix(t.Name, "blk.") || len(t.Shape) < 2 {
			continue
		}
		n := 1.0
		for _, d := range t.Shape {
			n *= float64(d)
		}
		if strings.Contains(t.Name, "_exps.") && h.experts > 0 && h.used > 0 && h.used < h.experts {
			n *= float64(h.used) / float64(h.experts)
		}
		w.weights += n
	}
	if w.weights == 0 {
		return work{}, &FormatError{Model: s.Name, Msg: "no block weights to count"}
	}
	for il := range h.nLayer {
		if h.recurrent[il] || h.headKV[il] == 0 {
			continue
		}
		w.attnDim += float64(h.head[il]) * float64(h.keyLen+h.valLen) / 2
	}
	return w, nil
}

// Decode efficiency: the share of the theoretical bandwidth generation reaches (see the package comment above).
var decodeEfficiency = Range{0.3, 0.6}

// coreSpread is how much slower than the anchored tier's a tier's cores may be when it has no anchors.
var coreSpread = Range{0.6, 1.0}

// phoneFLOPS is the effective prompt rate of profile p, from its anchors or from the anchored tier's.
func phoneFLOPS(p Profile, anchored *Profile) (Range, []string, error) {
	src := p
	if len(p.Anchors) == 0 {
		if anchored == nil {
			a, err := Builtin().Lookup("16gb")
			if err != nil {
				return Range{}, nil, err
			}
			anchored = &a
		}
		src = *anchored
	}
	if len(src.Anchors) == 0 {
		return Range{}, nil, fmt.Errorf("fit: capacity: profile %q has no speed anchors to calibrate with", src.Name)
	}
	known, err := Known()
	if err != nil {
		return Range{}, nil, err
	}
	r := Range{math.Inf(1), 0}
	var basis []string
	for _, a := range src.Anchors {
		var shape *Shape
		for i := range known {
			if known[i].Name == a.Model {
				shape = &known[i].Shape
			}
		}
		if shape == nil {
			return Range{}, nil, fmt.Errorf("fit: capacity: profile %q: anchor model %q is not a known model", src.Name, a.Model)
		}
		w, err := workOf(*shape)
		if err != nil {
			return Range{}, nil, err
		}
		f := w.flops(0, a.PromptTokens) / a.PromptSeconds
		r.Lo, r.Hi = min(r.Lo, f), max(r.Hi, f)
		basis = append(basis, fmt.Sprintf("%s %s: %d prompt tokens in %.0f s = %.0f GFLOP/s (%s)", a.Model, a.Quant, a.PromptTokens,
			a.PromptSeconds, f/1e9, a.Source))
	}
	if src.Name != p.Name {
		if src.BigCores <= 0 || p.BigCores <= 0 {
			return Range{}, nil, fmt.Errorf("fit: capacity: profile %q has no big-core count to scale the %s anchors by", p.Name, src.Name)
		}
		k := float64(p.BigCores) / float64(src.BigCores)
		r = Range{r.Lo * k * coreSpread.Lo, r.Hi * k * coreSpread.Hi}
		basis = append(basis, fmt.Sprintf("%s has no anchors: %s's rate scaled by big cores (%d/%d) and ×%.1f–%.1f for possibly slower cores [inference]",
			p.Name, src.Name, p.BigCores, src.BigCores, coreSpread.Lo, coreSpread.Hi))
	}
	return r, basis, nil
}

// PlanCapacity estimates what the workload needs on phones of profile p serving the model of shape s (its
// memory estimate b gives the bytes generation reads per token).
func PlanCapacity(s Shape, b Breakdown, p Profile, o CapacityOptions) (CapacityPlan, error) {
	if err := o.Validate(); err != nil {
		return CapacityPlan{}, err
	}
	if o.GenerateTokens == 0 {
		o.GenerateTokens = 8
	}
	if o.HitRate == 0 && o.SharedTokens > 0 {
		o.HitRate = 1
	}
	if o.SharedTokens == 0 {
		o.HitRate = 0
	}
	w, err := workOf(s)
	if err != nil {
		return CapacityPlan{}, err
	}
	F, basis, err := phoneFLOPS(p, o.Anchored)
	if err != nil {
		return CapacityPlan{}, err
	}
	c := CapacityPlan{Profile: p.Name, Model: s.Name, PromptTokens: o.PromptTokens, SharedTokens: o.SharedTokens,
		GenerateTokens: o.GenerateTokens, HitRate: o.HitRate, FLOPS: F, ReviewsPerHour: o.ReviewsPerHour,
		LatencySeconds: o.LatencySeconds, Currency: o.Currency}
	basis = append(basis, fmt.Sprintf("prompt work: %.2f G weights per token, attention width %.0f over the full-attention layers", w.weights/1e9, w.attnDim))
	// Seconds are inverse to the rate: the fast end of F gives the low end of every time.
	secs := func(flops float64) Range { return Range{flops / F.Hi, flops / F.Lo} }
	full := secs(w.flops(0, o.PromptTokens))
	c.PromptTokensPerSec = Range{float64(o.PromptTokens) / full.Hi, float64(o.PromptTokens) / full.Lo}
	// Generation reads the active weights and the KV cache of the prompt once per token.
	bytesPerTok := float64(b.ActiveWeights) + float64(b.KVBytesPerCell)*float64(o.PromptTokens)
	if p.BandwidthGBps <= 0 || bytesPerTok <= 0 {
		return CapacityPlan{}, fmt.Errorf("fit: capacity: profile %q has no bandwidth (or the model no weights) to estimate generation", p.Name)
	}
	bw := decodeEfficiency.scale(p.BandwidthGBps * 1e9)
	c.DecodeTokensPerSec = Range{bw.Lo / bytesPerTok, bw.Hi / bytesPerTok}
	gen := Range{float64(o.GenerateTokens) / c.DecodeTokensPerSec.Hi, float64(o.GenerateTokens) / c.DecodeTokensPerSec.Lo}
	basis = append(basis, fmt.Sprintf("generation: %.2f GB read per token at %.0f–%.0f %% of %.0f GB/s [inference]", bytesPerTok/1e9,
		100*decodeEfficiency.Lo, 100*decodeEfficiency.Hi, p.BandwidthGBps))
	c.MissSeconds = Range{full.Lo + gen.Lo, full.Hi + gen.Hi}
	tail := secs(w.flops(o.SharedTokens, o.PromptTokens))
	c.HitSeconds = Range{tail.Lo + gen.Lo, tail.Hi + gen.Hi}
	h := o.HitRate
	c.ReviewSeconds = Range{h*c.HitSeconds.Lo + (1-h)*c.MissSeconds.Lo, h*c.HitSeconds.Hi + (1-h)*c.MissSeconds.Hi}
	if o.SharedTokens > 0 {
		basis = append(basis, fmt.Sprintf("%.0f %% of reviews reuse the %d shared tokens (affinity routing, warm-up); the others evaluate all %d",
			100*h, o.SharedTokens, o.PromptTokens))
	}
	// Per phone: one review after another; with a latency bound, the M/D/1 load that keeps the mean within it.
	rho := Range{1, 1}
	if L := o.LatencySeconds; L > 0 {
		load := func(t float64) float64 {
			if t >= L {
				return 0
			}
			return 2 * (L - t) / (2*L - t)
		}
		rho = Range{load(c.ReviewSeconds.Hi), load(c.ReviewSeconds.Lo)}
		basis = append(basis, fmt.Sprintf("latency bound %.0f s: a phone is loaded to at most %.0f–%.0f %% (M/D/1 mean latency)", L, 100*rho.Lo, 100*rho.Hi))
	}
	c.PhoneReviewsPerHour = Range{3600 / c.ReviewSeconds.Hi * rho.Lo, 3600 / c.ReviewSeconds.Lo * rho.Hi}
	if o.ReviewsPerHour > 0 {
		if c.PhoneReviewsPerHour.Lo <= 0 {
			return c, &CapacityError{Msg: fmt.Sprintf("a review takes %.0f–%.0f s on %s, longer than the latency bound of %.0f s", c.ReviewSeconds.Lo,
				c.ReviewSeconds.Hi, p.Name, o.LatencySeconds)}
		}
		c.Replicas.Lo = int(math.Ceil(o.ReviewsPerHour / c.PhoneReviewsPerHour.Hi))
		c.Replicas.Hi = int(math.Ceil(o.ReviewsPerHour / c.PhoneReviewsPerHour.Lo))
		if o.PricePerHour > 0 {
			c.CostPerHour = Range{float64(c.Replicas.Lo) * o.PricePerHour, float64(c.Replicas.Hi) * o.PricePerHour}
			basis = append(basis, fmt.Sprintf("price %.4g %s per phone-hour (%s)", o.PricePerHour, o.Currency, o.PriceBasis))
		}
	}
	c.Basis = basis
	return c, nil
}

// CapacityError is a target the phones cannot meet (a latency bound shorter than one review); it is a failed
// check.
type CapacityError struct{ Msg string }

func (e *CapacityError) Error() string { return "fit: capacity: " + e.Msg }

// CheckFailed classifies the error (pipeline.IsCheckFailed).
func (e *CapacityError) CheckFailed() bool { return true }

// RunCapacity is capacity planning as a stage: the model of o (a GGUF, or a config.json at o.FileType) on the
// phone profile o.Phone (default 16gb), its memory estimated with o (the bytes generation reads), planned with
// co. Bad input is an input error, as in Run.
func RunCapacity(o Options, co CapacityOptions) (CapacityPlan, error) {
	if err := o.Validate(); err != nil {
		return CapacityPlan{}, err
	}
	if err := co.Validate(); err != nil {
		return CapacityPlan{}, err
	}
	profiles, err := LoadProfiles(o.ProfilesFile)
	if err != nil {
		return CapacityPlan{}, err
	}
	phone := o.Phone
	if phone == "" {
		phone = "16gb"
	}
	prof, err := profiles.Lookup(phone)
	if err != nil {
		return CapacityPlan{}, err
	}
	if co.Anchored == nil && len(prof.Anchors) == 0 {
		// Scale from the anchored tier of the same set (a user's --profiles may re-anchor 16gb).
		for i := range profiles {
			if len(profiles[i].Anchors) > 0 && (co.Anchored == nil || profiles[i].Name == "16gb") {
				co.Anchored = &profiles[i]
			}
		}
	}
	s, err := loadShape(o)
	if err != nil {
		return CapacityPlan{}, err
	}
	b, err := EstimateShape(s, o)
	if err != nil {
		return CapacityPlan{}, err
	}
	return PlanCapacity(s, b, prof, co)
}
