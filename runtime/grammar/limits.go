package grammar

// Limits bound what one grammar may cost. Grammars come from requests, so
// every dimension a stranger controls is capped; the zero value of a field
// means its default.
type Limits struct {
	// SourceBytes bounds the GBNF text (default 2 MiB).
	SourceBytes int
	// Rules bounds the rules after repetitions, groups and character
	// classes are expanded into helper rules (default 131072).
	Rules int
	// Elements bounds the total length of all rules after expansion
	// (default 2<<20; about 8 bytes each).
	Elements int
	// Repeat bounds the counts of {m}, {m,}, {m,n} (default 10000; llama.cpp
	// refuses m above 2000 and silently treats n above 2000 as unbounded —
	// here n is kept exact and refused above the bound).
	Repeat int
	// Nesting bounds parenthesis nesting (default 128).
	Nesting int
	// StackSet bounds the parse stacks one position may have, i.e. the
	// grammar's ambiguity (default 1024).
	StackSet int
	// States bounds the matcher's cache of parser states before it starts
	// a fresh cache from its current position (default 16384, with 8 times
	// as many interned stacks: about 15 MB per matcher at most; the hard
	// bound, at which a match fails, is twice this).
	States int
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.SourceBytes, 2<<20)
	def(&l.Rules, 1<<17)
	def(&l.Elements, 2<<20)
	def(&l.Repeat, 10000)
	def(&l.Nesting, 128)
	def(&l.StackSet, 1024)
	def(&l.States, 1<<14)
	return l
}
