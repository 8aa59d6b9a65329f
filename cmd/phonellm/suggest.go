package main

import "strings"

// didYouMean returns the candidate closest to s when it is close enough to be what was meant: equal but for
// case, '_' and '-' (q4km → q4_k_m), or at most two edits away (q4_k_n → q4_k_m). "" when none is.
func didYouMean(s string, candidates []string) string {
	norm := func(x string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(x))
	}
	ns := norm(s)
	best, bestD := "", 3
	for _, c := range candidates {
		nc := norm(c)
		if nc == ns {
			return c
		}
		if d := editDistance(ns, nc); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
