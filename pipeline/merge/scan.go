package merge

import (
	"context"
	"fmt"
	"math"
)

// scanChunk is the number of values the adapter scan reads at a time.
const scanChunk = 1 << 20

// scan reads every adapter tensor once: a NaN or Inf is an error naming the tensor, all-zero LoRA factors are
// noted, and an adapter whose every op is a zero LoRA delta changes nothing, which is an error.
func (p *planner) scan(ctx context.Context) error {
	var buf []float32
	for ai, a := range p.adapters {
		for _, t := range a.st.Tensors() {
			if err := ctx.Err(); err != nil {
				return err
			}
			total := t.NumElements()
			allZero := true
			for off := int64(0); off < total; off += scanChunk {
				var err error
				buf, err = a.st.ReadElements(t.Name, off, min(scanChunk, total-off), buf)
				if err != nil {
					return fmt.Errorf("merge: adapter %s: %w", a.Dir, err)
				}
				for i, v := range buf {
					if v != v || math.IsInf(float64(v), 0) {
						idx := off + int64(i)
						return formatErr(a.Dir, "tensor %q %v holds %v at flat index %d: the adapter is corrupt (training diverged?)", t.Name, t.Shape, v, idx)
					}
					if v != 0 {
						allZero = false
					}
				}
			}
			if allZero {
				p.zero[zeroKey(ai, t.Name)] = true
			}
		}
	}
	for ai, a := range p.adapters {
		changes := 0
		for _, pl := range p.plans {
			for _, o := range pl.ops {
				if o.ad != ai {
					continue
				}
				if o.kind == opLoRA && (p.zero[zeroKey(ai, o.a)] || p.zero[zeroKey(ai, o.b)]) {
					p.notes = append(p.notes, fmt.Sprintf("%s: module %q has an all-zero LoRA factor (untrained?): no change", a.Dir, o.module))
					continue
				}
				changes++
			}
		}
		if changes == 0 {
			return formatErr(a.Dir, "the adapter would change nothing: every lora_A/lora_B pair has an all-zero factor (an untrained adapter?)")
		}
	}
	return nil
}

func zeroKey(ai int, key string) string { return fmt.Sprintf("%d\x00%s", ai, key) }
