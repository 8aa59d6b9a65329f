package httpx

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Histogram is a Prometheus histogram over fixed bucket bounds (ascending, seconds or any unit). The zero
// value with Bounds set is ready; it is not safe for concurrent use (callers hold their metrics lock).
type Histogram struct {
	Bounds []float64
	counts []uint64 // per bucket, not cumulative: value v lands in the first bucket with v <= bound
	sum    float64
	n      uint64
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(h.Bounds))
	}
	h.n++
	h.sum += v
	if i, _ := slices.BinarySearch(h.Bounds, v); i < len(h.Bounds) {
		h.counts[i]++
	}
}

// Count is the number of values observed.
func (h *Histogram) Count() uint64 { return h.n }

// Write renders the histogram's _bucket, _sum and _count lines in the text exposition format (0.0.4).
// labels are the series' other labels, already rendered (`endpoint="/v1/models"`), or "".
func (h *Histogram) Write(b *strings.Builder, name, labels string) {
	sep := ""
	if labels != "" {
		sep = ","
	}
	var cum uint64
	for i, le := range h.Bounds {
		if h.counts != nil {
			cum += h.counts[i]
		}
		fmt.Fprintf(b, "%s_bucket{%s%sle=\"%s\"} %d\n", name, labels, sep, FormatFloat(le), cum)
	}
	fmt.Fprintf(b, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, labels, sep, h.n)
	braced := ""
	if labels != "" {
		braced = "{" + labels + "}"
	}
	fmt.Fprintf(b, "%s_sum%s %s\n%s_count%s %d\n", name, braced, FormatFloat(h.sum), name, braced, h.n)
}

// WriteFamily writes the HELP and TYPE lines of a metric family.
func WriteFamily(b *strings.Builder, name, typ, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// Label renders one label pair, escaping the value as the text format requires (backslash, double quote,
// newline).
func Label(name, value string) string {
	return name + `="` + labelEscaper.Replace(value) + `"`
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// FormatFloat formats a sample value: shortest representation, +Inf/-Inf/NaN spelled as Prometheus does.
func FormatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
