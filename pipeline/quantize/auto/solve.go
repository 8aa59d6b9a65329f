package auto

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Choice is one type a group can take: its size and the KL divergence it adds.
type Choice struct {
	Type     gguf.Type `json:"-"`
	TypeName string    `json:"type"`
	Bytes    int64     `json:"bytes"`
	// DeltaKLD is the measured increase of the mean KLD when this group alone takes this type (everything
	// else at the reference type); 0 for the reference type itself.
	DeltaKLD float64 `json:"delta_kld"`
}

// Group is a set of tensors that get one type together, with the types it can take.
type Group struct {
	Name    string   `json:"name"`
	Tensors []string `json:"tensors"`
	Choices []Choice `json:"choices"`
}

// units bounds the dynamic program's byte axis: sizes are counted in units of ⌈budget / units⌉ bytes,
// rounded up, so a solution that fits in units always fits in bytes.
const units = 1 << 13

// ErrInfeasible is returned when even the smallest choice of every group exceeds the budget.
var ErrInfeasible = errors.New("auto: even the smallest type of every group does not fit the budget")

// table is the multiple-choice knapsack over groups: best[g][b] is the least total DeltaKLD of groups 0..g
// whose rounded sizes sum to at most b units; pick[g][b] the choice of group g in that solution.
type table struct {
	quantum int64
	sizes   [][]int64 // rounded sizes in units, per group and choice
	best    [][]float64
	pick    [][]uint8
}

// solveTable runs the dynamic program for budgets up to maxBytes.
func solveTable(groups []Group, maxBytes int64) (*table, error) {
	if maxBytes <= 0 {
		return nil, ErrInfeasible
	}
	for _, g := range groups {
		if len(g.Choices) == 0 || len(g.Choices) > 255 {
			return nil, fmt.Errorf("auto: group %s has %d choices", g.Name, len(g.Choices))
		}
		for _, c := range g.Choices {
			if c.Bytes < 0 || math.IsNaN(c.DeltaKLD) || math.IsInf(c.DeltaKLD, 0) {
				return nil, fmt.Errorf("auto: group %s: invalid choice %+v", g.Name, c)
			}
		}
	}
	q := (maxBytes + units - 1) / units
	n := int(maxBytes / q) // budget in units (rounded down: never more than maxBytes)
	t := &table{quantum: q, sizes: make([][]int64, len(groups)), best: make([][]float64, len(groups)),
		pick: make([][]uint8, len(groups))}
	inf := math.Inf(1)
	prev := make([]float64, n+1) // zero groups: KLD 0 for any budget
	for gi, g := range groups {
		t.sizes[gi] = make([]int64, len(g.Choices))
		for ci, c := range g.Choices {
			t.sizes[gi][ci] = (c.Bytes + q - 1) / q
		}
		cur := make([]float64, n+1)
		pk := make([]uint8, n+1)
		for b := range cur {
			cur[b] = inf
			for ci, c := range g.Choices {
				w := t.sizes[gi][ci]
				if w > int64(b) || math.IsInf(prev[b-int(w)], 1) {
					continue
				}
				if v := prev[b-int(w)] + max(c.DeltaKLD, 0); v < cur[b] {
					cur[b], pk[b] = v, uint8(ci)
				}
			}
		}
		t.best[gi], t.pick[gi] = cur, pk
		prev = cur
	}
	return t, nil
}

// choices reconstructs the choice of every group for a budget of b units.
func (t *table) choices(b int) []int {
	out := make([]int, len(t.pick))
	for g := len(t.pick) - 1; g >= 0; g-- {
		out[g] = int(t.pick[g][b])
		b -= int(t.sizes[g][out[g]]) // the rounded size the table subtracted
	}
	return out
}

// Solve chooses one type per group so that the groups' total size is at most budget bytes and the sum of
// their DeltaKLD is the least possible (a multiple-choice knapsack, solved exactly by dynamic programming on
// sizes rounded up to budget/8192 bytes), then spends what the rounding left over on the upgrades that lower
// the predicted KLD most per byte. It returns the index of the chosen Choice of every group.
func Solve(groups []Group, budget int64) ([]int, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	t, err := solveTable(groups, budget)
	if err != nil {
		return nil, err
	}
	b := len(t.best[len(t.best)-1]) - 1
	if math.IsInf(t.best[len(groups)-1][b], 1) {
		return nil, ErrInfeasible
	}
	pick := t.choices(b)
	fill(groups, pick, budget)
	return pick, nil
}

// SolveMaxKLD chooses one type per group so that the sum of their DeltaKLD is at most maxDelta and the total
// size is the least possible (within the rounding of Solve: the smallest budget, in steps of maxBytes/8192,
// whose best solution meets maxDelta). maxBytes bounds the search (the size with every group at its largest
// choice).
func SolveMaxKLD(groups []Group, maxDelta float64) ([]int, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	var maxBytes int64
	for _, g := range groups {
		var m int64
		for _, c := range g.Choices {
			m = max(m, c.Bytes)
		}
		maxBytes += m
	}
	// Room for every group's rounding, so that the largest choice of every group is always feasible.
	t, err := solveTable(groups, maxBytes+int64(len(groups))*(maxBytes/units+1))
	if err != nil {
		return nil, err
	}
	last := t.best[len(groups)-1]
	b := sort.Search(len(last), func(b int) bool { return last[b] <= maxDelta })
	if b == len(last) {
		return nil, fmt.Errorf("auto: no choice of types keeps the predicted KLD increase under %g (the least is %g)", maxDelta, last[len(last)-1])
	}
	return t.choices(b), nil
}

// fill upgrades groups while the exact total stays within budget, best KLD decrease per extra byte first.
func fill(groups []Group, pick []int, budget int64) {
	total := Bytes(groups, pick)
	for {
		bestG, bestC, bestGain := -1, -1, 0.0
		for g, gr := range groups {
			cur := gr.Choices[pick[g]]
			for c, ch := range gr.Choices {
				extra := ch.Bytes - cur.Bytes
				gain := max(cur.DeltaKLD, 0) - max(ch.DeltaKLD, 0)
				if gain <= 0 || total+extra > budget {
					continue
				}
				rate := gain / float64(max(extra, 1))
				if rate > bestGain {
					bestG, bestC, bestGain = g, c, rate
				}
			}
		}
		if bestG < 0 {
			return
		}
		total += groups[bestG].Choices[bestC].Bytes - groups[bestG].Choices[pick[bestG]].Bytes
		pick[bestG] = bestC
	}
}

// Bytes is the total size of a choice of types.
func Bytes(groups []Group, pick []int) int64 {
	var n int64
	for g, gr := range groups {
		n += gr.Choices[pick[g]].Bytes
	}
	return n
}

// DeltaKLD is the predicted KLD increase of a choice of types (the sum over groups, negative measurements
// counted as 0).
func DeltaKLD(groups []Group, pick []int) float64 {
	var d float64
	for g, gr := range groups {
		d += max(gr.Choices[pick[g]].DeltaKLD, 0)
	}
	return d
}
