package jinja

// Limits bound one render. A zero field takes its DefaultLimits value; a
// negative field means no limit (for tests and trusted templates only).
type Limits struct {
	// Steps bounds the evaluation steps of the render (one per expression,
	// statement and loop iteration evaluated).
	Steps int64
	// Iterations bounds the loop iterations of the render, summed over every
	// loop (for loops, filters that iterate, recursive loops).
	Iterations int64
	// CallDepth bounds nested calls of macros, caller() and recursive loops.
	CallDepth int
	// Nesting bounds the depth of the evaluation (expressions within
	// expressions, blocks within blocks, across calls); it keeps the Go stack
	// small whatever the template does.
	Nesting int
	// Output bounds the bytes of the rendered text.
	Output int64
	// Alloc bounds the bytes of strings, lists and dicts the render creates,
	// summed over the render (not live memory: an upper bound of it). An
	// operation that would exceed it fails before allocating.
	Alloc int64
	// Range bounds the length of one range() (jinja2's sandbox allows 100,000).
	Range int64
}

// DefaultLimits suit a server rendering a request's chat. Real templates
// need about 100 steps and a few kB per message (Qwen3.5's on a 7,000-token
// chat: under 3,000 steps, 141 kB), so these leave room for conversations of
// hundreds of thousands of tokens while a hostile template fails within a
// second or so and 80 MB.
var DefaultLimits = Limits{
	Steps:      10_000_000,
	Iterations: 1_000_000,
	CallDepth:  128,
	Nesting:    2048,
	Output:     16 << 20,
	Alloc:      64 << 20,
	Range:      100_000,
}

// maxNesting caps Limits.Nesting whatever the caller asks.
const maxNesting = 100_000

// withDefaults fills zero fields from DefaultLimits and turns negative fields
// into "unlimited".
func (l Limits) withDefaults() Limits {
	const unlimited = int64(1) << 62
	fill := func(v *int64, def int64) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			*v = unlimited
		}
	}
	fillInt := func(v *int, def int) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			*v = 1 << 30
		}
	}

	fill(&l.Steps, DefaultLimits.Steps)
	fill(&l.Iterations, DefaultLimits.Iterations)
	fillInt(&l.CallDepth, DefaultLimits.CallDepth)
	fillInt(&l.Nesting, DefaultLimits.Nesting)
	fill(&l.Output, DefaultLimits.Output)
	fill(&l.Alloc, DefaultLimits.Alloc)
	fill(&l.Range, DefaultLimits.Range)
	// Unlimited nesting would let a template grow the Go stack without bound;
	// even "no limit" keeps a generous one.
	l.Nesting = min(l.Nesting, maxNesting)
	return l
}
