package auto

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

func ch(bytes int64, d float64) Choice { return Choice{Bytes: bytes, DeltaKLD: d} }

// Three groups with hand-computed optima. Sizes are small integers, so one DP unit is one byte and the
// solutions are exact.
//
//	A: 10 B → 0.30, 20 B → 0.10, 40 B → 0.00
//	B:  5 B → 0.50, 10 B → 0.05, 20 B → 0.00
//	C: 30 B → 0.20, 60 B → 0.00
var hand = []Group{
	{Name: "A", Choices: []Choice{ch(10, 0.30), ch(20, 0.10), ch(40, 0)}},
	{Name: "B", Choices: []Choice{ch(5, 0.50), ch(10, 0.05), ch(20, 0)}},
	{Name: "C", Choices: []Choice{ch(30, 0.20), ch(60, 0)}},
}

func TestSolveHandComputed(t *testing.T) {
	for _, c := range []struct {
		budget int64
		want   []int
		kld    float64
	}{
		// 45 B: only the smallest of all (10+5+30).
		{45, []int{0, 0, 0}, 1.00},
		// 50 B: B to 10 B (−0.45 for 5 B) beats A to 20 B (−0.20 for 10 B).
		{50, []int{0, 1, 0}, 0.55},
		// 60 B: A 20 + B 10 + C 30 = 60 → 0.10+0.05+0.20 = 0.35.
		{60, []int{1, 1, 0}, 0.35},
		// 80 B: A 40 + B 10 + C 30 → 0.25; A 20 + B 20 + C 30 → 0.30; A 10 + B 10 + C 60 → 0.35: first wins.
		{80, []int{2, 1, 0}, 0.25},
		// 90 B: A 20 + B 10 + C 60 = 90 → 0.15 beats A 40 + B 20 + C 30 = 90 → 0.20.
		{90, []int{1, 1, 1}, 0.15},
		// 120 B: everything at its largest.
		{120, []int{2, 2, 1}, 0},
	} {
		got, err := Solve(hand, c.budget)
		if err != nil {
			t.Fatalf("budget %d: %v", c.budget, err)
		}
		if !reflect.DeepEqual(got, c.want) || math.Abs(DeltaKLD(hand, got)-c.kld) > 1e-12 || Bytes(hand, got) > c.budget {
			t.Errorf("budget %d: %v (%d B, ΔKLD %g), want %v (ΔKLD %g)", c.budget, got, Bytes(hand, got), DeltaKLD(hand, got), c.want, c.kld)
		}
	}
	if _, err := Solve(hand, 44); !errors.Is(err, ErrInfeasible) {
		t.Errorf("budget 44: %v, want ErrInfeasible", err)
	}
}

func TestSolveMaxKLDHandComputed(t *testing.T) {
	for _, c := range []struct {
		max   float64
		want  []int
		bytes int64
	}{
		{1.0, []int{0, 0, 0}, 45},
		{0.6, []int{0, 1, 0}, 50},  // 0.55 at 50 B
		{0.36, []int{1, 1, 0}, 60}, // 0.35 at 60 B
		{0.2, []int{1, 1, 1}, 90},  // 0.15 at 90 B (0.25 at 80 B is over)
		{0, []int{2, 2, 1}, 120},
	} {
		got, err := SolveMaxKLD(hand, c.max)
		if err != nil {
			t.Fatalf("max %g: %v", c.max, err)
		}
		if !reflect.DeepEqual(got, c.want) || Bytes(hand, got) != c.bytes {
			t.Errorf("max %g: %v (%d B), want %v (%d B)", c.max, got, Bytes(hand, got), c.want, c.bytes)
		}
	}
	if _, err := SolveMaxKLD(hand, -1); err == nil {
		t.Error("a negative bound was met")
	}
}

// TestSolveMatchesBruteForce: on random instances with large sizes (so the DP rounds), Solve's answer fits,
// and its predicted KLD is within the rounding of the exhaustive optimum: never worse than the optimum at a
// budget smaller by the rounding slack (one unit per group).
func TestSolveMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		groups := make([]Group, 2+rng.IntN(4))
		var maxTotal int64
		for g := range groups {
			n := 2 + rng.IntN(3)
			var b int64 = 1 + rng.Int64N(1e6)
			d := 0.1 + rng.Float64()
			var cs []Choice
			for range n {
				cs = append(cs, ch(b, d))
				b += 1 + rng.Int64N(2e6)
				d *= rng.Float64()
			}
			cs[len(cs)-1].DeltaKLD = 0
			groups[g] = Group{Choices: cs}
			maxTotal += b
		}
		budget := rng.Int64N(maxTotal)
		best, bestBytes := brute(groups, budget)
		got, err := Solve(groups, budget)
		if best == nil {
			if !errors.Is(err, ErrInfeasible) && err == nil && Bytes(groups, got) > budget {
				t.Fatalf("trial %d: infeasible, Solve gave %v", trial, got)
			}
			continue
		}
		if err != nil {
			// Rounding can make a budget that fits only exactly look infeasible.
			slack := int64(len(groups)) * ((budget + units - 1) / units)
			if bestBytes+slack <= budget {
				t.Fatalf("trial %d: %v, but %v fits with room", trial, err, best)
			}
			continue
		}
		if Bytes(groups, got) > budget {
			t.Fatalf("trial %d: %d bytes over budget %d", trial, Bytes(groups, got), budget)
		}
		slack := int64(len(groups)) * ((budget + units - 1) / units)
		if lower, _ := brute(groups, budget-slack); lower != nil && DeltaKLD(groups, got) > DeltaKLD(groups, lower)+1e-12 {
			t.Fatalf("trial %d: ΔKLD %g worse than the optimum %g of the budget less the rounding", trial,
				DeltaKLD(groups, got), DeltaKLD(groups, lower))
		}
	}
}

// brute returns the best choice by exhaustive search (nil when nothing fits) and its size.
func brute(groups []Group, budget int64) ([]int, int64) {
	var best []int
	bestD := math.Inf(1)
	pick := make([]int, len(groups))
	var rec func(g int, bytes int64, d float64)
	rec = func(g int, bytes int64, d float64) {
		if bytes > budget {
			return
		}
		if g == len(groups) {
			if d < bestD {
				bestD, best = d, append([]int(nil), pick...)
			}
			return
		}
		for c, x := range groups[g].Choices {
			pick[g] = c
			rec(g+1, bytes+x.Bytes, d+x.DeltaKLD)
		}
	}
	rec(0, 0, 0)
	if best == nil {
		return nil, 0
	}
	return best, Bytes(groups, best)
}

func TestSolveRejectsBadInput(t *testing.T) {
	if _, err := Solve([]Group{{Name: "x"}}, 10); err == nil {
		t.Error("group without choices accepted")
	}
	if _, err := Solve([]Group{{Name: "x", Choices: []Choice{ch(1, math.NaN())}}}, 10); err == nil {
		t.Error("NaN accepted")
	}
	if got, err := Solve(nil, 10); err != nil || got != nil {
		t.Errorf("no groups: %v %v", got, err)
	}
}
