package engine

import (
	"fmt"
	"math/bits"
	"sync"
)

// Constraint limits what a request may generate: a GBNF grammar, a JSON
// schema, a fixed set of answers. runtime/grammar implements it; engines only
// use this interface, so they do not depend on the grammar engine.
//
// A Constraint is immutable and may be shared by concurrent requests.
type Constraint interface {
	// NewMatcher starts matching at the beginning of the generated text,
	// for the vocabulary of the model that generates it. It fails when the
	// constraint cannot apply to that vocabulary (a token reference naming a
	// token the model does not have); such errors are the request's fault
	// and say so (InputError).
	NewMatcher(v *Vocabulary) (Matcher, error)
}

// Matcher follows one sequence's output through a Constraint, token by
// token. It is not safe for concurrent use, and neither are its clones
// together: each sequence owns one (as it owns its Sampler).
//
// End-of-generation tokens are allowed exactly when the text so far is a
// complete match. A Matcher whose internal bounds are exceeded (a hostile
// grammar's state space) reports an error from Allowed and Accept and allows
// nothing from then on.
type Matcher interface {
	// Allows reports whether token t may come next. It is the cheap check
	// of the sampler's fast path (the token the unconstrained chain picked).
	Allows(t int32) bool
	// Allowed sets in mask exactly the tokens that may come next and
	// returns their number. mask must have the vocabulary's size.
	Allowed(mask *TokenMask) (int, error)
	// Accept moves past token t; it fails, leaving the matcher unchanged,
	// when t is not allowed.
	Accept(t int32) error
	// Done reports that the text so far is a complete match and nothing
	// but an end-of-generation token may follow: generation can stop.
	Done() bool
	// Clone returns a matcher at the same position that moves on
	// independently (for speculative or tentative decoding). Clones share
	// caches, so they too must be used from one goroutine at a time.
	Clone() Matcher
}

// VocabToken describes one token of a model's vocabulary.
type VocabToken struct {
	// Piece is the exact bytes the token adds to the generated text (what
	// the engine emits): empty for control tokens, possibly a partial UTF-8
	// sequence for byte-level tokens.
	Piece string
	// Text is the token's text in the vocabulary, control tokens included
	// ("<|im_end|>"); grammars name tokens by it (llama.cpp's <think>).
	Text string
	// EOG marks end-of-generation tokens.
	EOG bool
}

// Vocabulary is what a Constraint needs to know about a model's tokens.
// Engines build one per model; it is immutable apart from the indexes
// Derived caches, and is safe for concurrent use.
type Vocabulary struct {
	toks []VocabToken
	eog  []int32

	mu      sync.Mutex
	derived map[any]*derivedEntry
}

type derivedEntry struct {
	once sync.Once
	v    any
}

// NewVocabulary returns the vocabulary of toks, indexed by token id.
func NewVocabulary(toks []VocabToken) *Vocabulary {
	v := &Vocabulary{toks: toks, derived: map[any]*derivedEntry{}}
	for i, t := range toks {
		if t.EOG {
			v.eog = append(v.eog, int32(i))
		}
	}
	return v
}

// Size is the number of tokens.
func (v *Vocabulary) Size() int { return len(v.toks) }

// Token returns token id's description; ok is false outside the vocabulary.
func (v *Vocabulary) Token(id int32) (t VocabToken, ok bool) {
	if id < 0 || int(id) >= len(v.toks) {
		return VocabToken{}, false
	}
	return v.toks[id], true
}

// Piece returns the bytes token id adds to the text ("" outside the
// vocabulary).
func (v *Vocabulary) Piece(id int32) string {
	if id < 0 || int(id) >= len(v.toks) {
		return ""
	}
	return v.toks[id].Piece
}

// IsEOG reports whether id ends generation.
func (v *Vocabulary) IsEOG(id int32) bool {
	return id >= 0 && int(id) < len(v.toks) && v.toks[id].EOG
}

// EOG lists the end-of-generation tokens in id order. The slice must not be
// modified.
func (v *Vocabulary) EOG() []int32 { return v.eog }

// Derived returns the value build makes from v, building it on first use
// only: it lets a package keep one index of a model's vocabulary (such as
// runtime/grammar's token trie) shared by every request to that model and
// freed with it. key identifies the index (use an unexported type's value);
// concurrent callers with the same key wait for the one build.
func (v *Vocabulary) Derived(key any, build func(*Vocabulary) any) any {
	v.mu.Lock()
	e := v.derived[key]
	if e == nil {
		e = &derivedEntry{}
		v.derived[key] = e
	}
	v.mu.Unlock()
	e.once.Do(func() { e.v = build(v) })
	return e.v
}

// TokenMask is a set of token ids of one vocabulary (a bit set).
type TokenMask struct {
	w []uint64
	n int
}

// NewTokenMask returns an empty mask for a vocabulary of n tokens.
func NewTokenMask(n int) *TokenMask {
	return &TokenMask{w: make([]uint64, (n+63)/64), n: n}
}

// Len is the vocabulary size the mask was made for.
func (m *TokenMask) Len() int { return m.n }

// Words exposes the bit set (bit i%64 of word i/64 is token i) for fast
// bulk operations; bits at or above Len must stay clear.
func (m *TokenMask) Words() []uint64 { return m.w }

// Set adds token t (ignored outside the vocabulary).
func (m *TokenMask) Set(t int32) {
	if t >= 0 && int(t) < m.n {
		m.w[t>>6] |= 1 << (uint(t) & 63)
	}
}

// Has reports whether t is in the mask.
func (m *TokenMask) Has(t int32) bool {
	return t >= 0 && int(t) < m.n && m.w[t>>6]&(1<<(uint(t)&63)) != 0
}

// Clear empties the mask.
func (m *TokenMask) Clear() { clear(m.w) }

// Count is the number of tokens in the mask.
func (m *TokenMask) Count() int {
	c := 0
	for _, w := range m.w {
		c += bits.OnesCount64(w)
	}
	return c
}

// CopyFrom makes m equal to o (same vocabulary size).
func (m *TokenMask) CopyFrom(o *TokenMask) {
	if m.n != o.n {
		panic(fmt.Sprintf("engine: TokenMask.CopyFrom: sizes %d and %d", m.n, o.n)) // programmer error
	}
	copy(m.w, o.w)
}

// ConstraintError reports that a constraint could not be followed during
// generation: the grammar allows no token of the vocabulary at some point
// (e.g. it requires a character no token can spell), or its state space
// outgrew the matcher's bounds. Generation stops with it.
type ConstraintError struct {
	// Generated is the number of tokens generated before the failure.
	Generated int
	Err       error
}

func (e *ConstraintError) Error() string {
	return fmt.Sprintf("engine: constrained generation failed after %d tokens: %v", e.Generated, e.Err)
}

func (e *ConstraintError) Unwrap() error { return e.Err }

// InputError marks the failure as the request's fault: its constraint cannot
// be followed with this model's vocabulary (pipeline's error contract).
func (e *ConstraintError) InputError() bool { return true }
