// Package grammar is the constrained-decoding core: a GBNF grammar engine
// compatible with llama.cpp's grammar format, a JSON Schema to GBNF
// converter (the subset llama.cpp's json-schema-to-grammar supports, with
// unsupported keywords refused by name), a fixed-choices constraint, and the
// token-level matcher that the sampler (runtime/engine) uses to mask logits.
//
// A *Grammar is an engine.Constraint: compiled once per request (or shared),
// immutable, and safe for concurrent use. Its Matcher follows one
// generation. Matching works on bytes: character classes are compiled into
// UTF-8 byte automata (utf8.go), so a token may end inside a character or
// span several grammar symbols, and llama.cpp's pushdown stacks
// (machine.go) are interned and their steps memoized. The allowed-token mask
// is one pass over a byte trie of the vocabulary (trie.go, built once per
// model and shared), skipping every subtree whose prefix the grammar
// rejects; the sampler first checks only the token the unconstrained chain
// picked and computes the mask only when that token is rejected (llama.cpp's
// fast path).
//
// Every size a request controls is bounded (Limits): source length, rules,
// expanded elements, repetition counts, nesting, ambiguity, and the
// matcher's cached states. Left-recursive grammars are refused, as llama.cpp
// refuses them.
//
// Where the result differs from llama.cpp's, on purpose: characters are
// matched against a token's visible text (engine.VocabToken.Piece), so a
// control token, which shows no text, is allowed only through a token
// reference (llama.cpp matches its special text as characters); only valid
// UTF-8 is generated (llama.cpp decodes some invalid sequences to code
// points) and never NUL; a rule defined twice, a reversed range, an escape
// above U+10FFFF and a repetition bound above Limits.Repeat are errors
// (llama.cpp keeps the last definition, matches nothing, or makes a bound
// above 2000 unbounded); '_' is allowed in rule names, as its README says.
// JSON schemas: see FromJSONSchema.
package grammar
