package main

import (
	"fmt"
	"io"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/deploy/acurast"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/spf13/cobra"
)

// capacityFlags are fit's (and ship's) capacity-planning flags.
type capacityFlags struct {
	reviews        float64
	prompt, shared int
	gen            int
	hitRate, price float64
	latency        time.Duration
}

func (c *capacityFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Float64Var(&c.reviews, "reviews-per-hour", 0, "capacity planning: reviews the fleet must serve per hour")
	f.IntVar(&c.prompt, "prompt-tokens", 7000, "capacity planning: tokens per review prompt")
	f.IntVar(&c.shared, "shared-tokens", 0, "capacity planning: tokens of each prompt that are a shared prefix (the rubric) the phone's cache reuses")
	f.IntVar(&c.gen, "gen-tokens", 8, "capacity planning: tokens generated per review")
	f.Float64Var(&c.hitRate, "hit-rate", 0, "capacity planning: share of reviews that reuse the shared prefix (default 1 with --shared-tokens)")
	f.DurationVar(&c.latency, "latency", 0, "capacity planning: bound on a review's mean latency (queueing included)")
	f.Float64Var(&c.price, "price-per-hour", 0, "capacity planning: ACU per phone-hour (default: the Acurast plan's)")
}

// active reports whether any capacity flag was given.
func (c *capacityFlags) active(cmd *cobra.Command) bool {
	for _, n := range []string{"reviews-per-hour", "prompt-tokens", "shared-tokens", "latency", "hit-rate", "price-per-hour", "gen-tokens"} {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

func (c *capacityFlags) options(cmd *cobra.Command) (fit.CapacityOptions, error) {
	if c.latency < 0 {
		return fit.CapacityOptions{}, usageError("--latency must not be negative")
	}
	o := fit.CapacityOptions{PromptTokens: c.prompt, SharedTokens: c.shared, GenerateTokens: c.gen, HitRate: c.hitRate,
		ReviewsPerHour: c.reviews, LatencySeconds: c.latency.Seconds(), Currency: "ACU"}
	if cmd.Flags().Changed("price-per-hour") {
		o.PricePerHour, o.PriceBasis = c.price, "--price-per-hour"
	} else {
		o.PricePerHour, o.PriceBasis = acurast.Options{}.PricePerHour()
	}
	if err := o.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// fitOutput is fit's --json output: the fit result, the phones' prompt cache ship would give them (llama.cpp)
// and the verdict counting it, and the capacity plan when one was asked for.
type fitOutput struct {
	fit.Result
	PromptCache     *fit.PromptCache  `json:"prompt_cache,omitempty"`
	WithPromptCache *fit.Verdict      `json:"verdict_with_prompt_cache,omitempty"`
	Capacity        *fit.CapacityPlan `json:"capacity,omitempty"`
}

// promptCachePlan is the host-memory prompt cache ship gives phones running this model (one saved prompt per
// shared prefix of the workspace's warm: list, at least two), and the verdict with it.
func promptCachePlan(o fit.Options, res fit.Result, prefixes int) (*fit.PromptCache, *fit.Verdict, error) {
	profiles, err := fit.LoadProfiles(o.ProfilesFile)
	if err != nil {
		return nil, nil, err
	}
	prof, err := profiles.Lookup(res.Verdict.Profile)
	if err != nil {
		return nil, nil, err
	}
	pc := fit.PlanPromptCache(res.Breakdown, prof, prefixes, deploy.DefaultCtxCheckpoints)
	_, v := fit.WithPromptCache(res.Breakdown, pc, prof)
	return &pc, &v, nil
}

func printPromptCache(w io.Writer, pc fit.PromptCache, v fit.Verdict) {
	if pc.Bytes == 0 {
		fmt.Fprintf(w, "  prompt cache (llama-server --cache-ram): none — %s\n", pc.Basis)
		return
	}
	fmt.Fprintf(w, "  prompt cache (llama-server --cache-ram %d): %s; with it the phone needs %s (headroom %s, %s)\n",
		pc.Bytes>>20, pc.Basis, humanBytes(v.Needed), humanBytes(v.Headroom), v.Status)
}

func printCapacity(w io.Writer, c fit.CapacityPlan) {
	shared := ""
	if c.SharedTokens > 0 {
		shared = fmt.Sprintf(", %d shared", c.SharedTokens)
	}
	fmt.Fprintf(w, "capacity on a %s phone: reviews of %d prompt tokens%s, %d out\n", c.Profile, c.PromptTokens, shared, c.GenerateTokens)
	fmt.Fprintf(w, "  prompt %s tokens/s from zero (%s GFLOP/s), generation %s tokens/s\n", c.PromptTokensPerSec, fit.Range{Lo: c.FLOPS.Lo / 1e9, Hi: c.FLOPS.Hi / 1e9}, c.DecodeTokensPerSec)
	if c.SharedTokens > 0 {
		fmt.Fprintf(w, "  a review: %s s reusing the shared prefix, %s s evaluating it all; %s s at a %.0f %% hit rate\n",
			c.HitSeconds, c.MissSeconds, c.ReviewSeconds, 100*c.HitRate)
	} else {
		fmt.Fprintf(w, "  a review: %s s\n", c.MissSeconds)
	}
	within := ""
	if c.LatencySeconds > 0 {
		within = fmt.Sprintf(" within a %.0f s mean latency", c.LatencySeconds)
	}
	fmt.Fprintf(w, "  one phone serves %s reviews per hour%s\n", c.PhoneReviewsPerHour, within)
	if c.ReviewsPerHour > 0 {
		phones := fmt.Sprintf("%d", c.Replicas.Lo)
		if c.Replicas.Hi != c.Replicas.Lo {
			phones = fmt.Sprintf("%d–%d", c.Replicas.Lo, c.Replicas.Hi)
		}
		line := fmt.Sprintf("  %.0f reviews per hour need %s phones", c.ReviewsPerHour, phones)
		if c.CostPerHour.Hi > 0 {
			line += fmt.Sprintf(", %s %s per hour", c.CostPerHour, c.Currency)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "  basis:")
	for _, b := range c.Basis {
		fmt.Fprintf(w, "    - %s\n", b)
	}
}

func humanBytes(n int64) string { return signedBytes(n) }
