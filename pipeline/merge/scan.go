package merge

import (
	"context"
	"fmt"
	"math"

	"github.com/phonellm/phonellm/pipeline/safetensors"
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
			rows, rowLen, err := safetensors.Rows(t)
			if err != nil {
				return fmt.Errorf("merge: adapter %s: %w", a.Dir, err)
			}
			step := max(1, scanChunk/max(rowLen, 1))
			allZero := true
			for r0 := int64(0); r0 < rows; r0 += step {
				n := min(step, rows-r0)
				buf, err = a.st.ReadRows(t.Name, r0, n, buf)
				if err != nil {
					return fmt.Errorf("merge: adapter %s: %w", a.Dir, err)
				}
				for i, v := range buf {
					if v != v || math.IsInf(float64(v), 0) {
						idx := r0*rowLen + int64(i)
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
