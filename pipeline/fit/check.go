package fit

// Status is the verdict in one word.
type Status string

// Verdict statuses.
const (
	Fits  Status = "fits"
	Tight Status = "tight" // fits with less than max(256 MiB, 5 % of the budget) to spare
	No    Status = "no"
)

// tightMargin is the headroom below which a fit is called tight.
func tightMargin(usable int64) int64 { return max(256<<20, usable/20) }

// Verdict is the answer for one phone profile.
type Verdict struct {
	Profile          string `json:"profile"`
	Status           Status `json:"status"`
	Fits             bool   `json:"fits"`
	Usable           int64  `json:"usable_bytes"`
	Needed           int64  `json:"needed_bytes"`
	Headroom         int64  `json:"headroom_bytes"` // usable − needed; negative when it does not fit
	MinRamTotalBytes int64  `json:"min_ram_total_bytes"`
	Threads          int    `json:"threads"` // big cores: the thread count to run with
	// MaxTokensPerSec is the profile's memory bandwidth over the weights read per decoded token: an upper
	// bound on decoding speed, given only when that many bytes bound it (ActiveWeights ≥ MinBandwidthBound), 0
	// otherwise. BytesPerToken and BandwidthGBps say what it is based on.
	MaxTokensPerSec float64 `json:"max_decode_tokens_per_s,omitempty"`
	BytesPerToken   int64   `json:"bytes_per_token"`
	BandwidthGBps   float64 `json:"bandwidth_gbps"`
	Tight           bool    `json:"tight,omitempty"`
}

// Check compares an estimate with a phone profile.
func Check(b Breakdown, p Profile) Verdict {
	v := Verdict{Profile: p.Name, Usable: p.UsableBytes, Needed: b.Total, Headroom: p.UsableBytes - b.Total,
		MinRamTotalBytes: p.MinRamTotalBytes(), Threads: p.BigCores}
	switch {
	case v.Headroom < 0:
		v.Status = No
	case v.Headroom < tightMargin(p.UsableBytes):
		v.Status, v.Fits, v.Tight = Tight, true, true
	default:
		v.Status, v.Fits = Fits, true
	}
	v.BytesPerToken, v.BandwidthGBps = b.ActiveWeights, p.BandwidthGBps
	if b.ActiveWeights >= MinBandwidthBound && p.BandwidthGBps > 0 {
		v.MaxTokensPerSec = p.BandwidthGBps * 1e9 / float64(b.ActiveWeights)
	}
	return v
}

// MinBandwidthBound is the smallest weight read per token for which memory bandwidth bounds decoding. Below it
// the weights stay in the SoC's caches and the per-token work besides the weights (graph building, thread
// synchronisation, sampling) dominates, so bandwidth / bytes would promise absurd speeds (issue 13: "decode at
// most ~26915 tokens/s" for the 2 MB demo model).
const MinBandwidthBound = 64 << 20

// MaxContext returns the largest per-slot context (a multiple of 256, at most the training context when known)
// at which the model fits p with o's other settings, or 0 when not even 256 tokens fit.
func MaxContext(s Shape, o Options, p Profile) (int, error) {
	limit := 1 << 24
	h, err := s.hparams()
	if err != nil {
		return 0, err
	}
	if h.trainCtx > 0 {
		limit = int(min(h.trainCtx, int64(limit)))
	}
	fits := func(ctx int) (bool, error) {
		o.Ctx = ctx
		b, err := EstimateShape(s, o)
		if err != nil {
			return false, err
		}
		return b.Total <= p.UsableBytes, nil
	}
	if limit < 256 { // a tiny training context: only the full context is worth checking
		ok, err := fits(limit)
		if err != nil || !ok {
			return 0, err
		}
		return limit, nil
	}
	return search(256, limit, 256, fits)
}

// MaxParallel returns the largest slot count (at most 256) at which the model fits p with o's context, or 0.
func MaxParallel(s Shape, o Options, p Profile) (int, error) {
	fits := func(n int) (bool, error) {
		o.Parallel = n
		b, err := EstimateShape(s, o)
		if err != nil {
			return false, err
		}
		return b.Total <= p.UsableBytes, nil
	}
	return search(1, 256, 1, fits)
}

// search finds the largest multiple of step in [lo, hi] for which fits holds (memory grows with the argument),
// or 0 when none does.
func search(lo, hi, step int, fits func(int) (bool, error)) (int, error) {
	lo, hi = lo/step, hi/step
	ok, err := fits(lo * step)
	if err != nil || !ok {
		return 0, err
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		ok, err := fits(mid * step)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo * step, nil
}
