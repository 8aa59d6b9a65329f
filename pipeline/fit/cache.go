package fit

import "fmt"

// PromptCache is the host-memory prompt cache a phone's llama-server gets (--cache-ram). llama-server saves a
// slot's prompt state there when the slot takes another prompt and loads it back when that prompt's prefix
// returns, so a phone serving several rubrics keeps all of them, not just the one in its slot.
type PromptCache struct {
	// Bytes is the cache size, a whole number of MiB (--cache-ram takes MiB); 0 = no cache.
	Bytes int64 `json:"bytes"`
	// PromptBytes is one saved prompt: KV cells for a full slot context, the recurrent state and its
	// checkpoints (llama_state_seq_get_size of the slot).
	PromptBytes int64 `json:"prompt_bytes"`
	// Prompts is how many saved prompts Bytes holds, Wanted how many the plan asked room for.
	Prompts int `json:"prompts"`
	Wanted  int `json:"wanted"`
	// Basis says how the size was chosen.
	Basis string `json:"basis"`
}

// PlanPromptCache sizes the prompt cache of a llama-server replica estimated by b on profile p: room for one
// saved prompt per shared prefix the deployment declares (at least two: the prompt a slot just gave up and the
// one before), within what the profile leaves once the model is served with the margin that keeps the verdict
// "fits" (max(256 MiB, 5 % of the budget)). checkpoints is --ctx-checkpoints (each saved prompt keeps its
// checkpoints). A budget without room for one saved prompt gets no cache: reuse then happens in the slots only.
func PlanPromptCache(b Breakdown, p Profile, prefixes, checkpoints int) PromptCache {
	c := PromptCache{Wanted: max(prefixes, 2)}
	cells := int64(b.Ctx)
	c.PromptBytes = cells*b.KVBytesPerCell + b.StateBytes*int64(1+max(checkpoints, 0))
	if c.PromptBytes <= 0 {
		c.Basis = "the estimate has no per-slot state to save"
		return c
	}
	room := p.UsableBytes - b.Total - tightMargin(p.UsableBytes)
	c.Prompts = int(min(int64(c.Wanted), max(room, 0)/c.PromptBytes))
	c.Bytes = (int64(c.Prompts) * c.PromptBytes) &^ (1<<20 - 1)
	if c.Prompts > 0 && c.Bytes < int64(c.Prompts)*c.PromptBytes {
		c.Bytes += 1 << 20 // whole MiB, rounded up so the last prompt fits
	}
	switch {
	case c.Prompts == 0:
		c.Bytes = 0
		c.Basis = fmt.Sprintf("no room: %s of headroom beyond the margin, one saved prompt needs %s", mib(max(room, 0)), mib(c.PromptBytes))
	case c.Prompts < c.Wanted:
		c.Basis = fmt.Sprintf("%d of the %d saved prompts wanted fit the headroom (%s each: %d-token slot context)", c.Prompts, c.Wanted, mib(c.PromptBytes), b.Ctx)
	default:
		c.Basis = fmt.Sprintf("%d saved prompts of %s each (%d-token slot context), one per shared prefix", c.Prompts, mib(c.PromptBytes), b.Ctx)
	}
	return c
}

// WithPromptCache returns b with the prompt cache counted in its total, and its verdict on p.
func WithPromptCache(b Breakdown, c PromptCache, p Profile) (Breakdown, Verdict) {
	b.Total += c.Bytes
	return b, Check(b, p)
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
