package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the pre-tokenizer regexes (RegexQwen2, RegexQwen35). A character is in at most one of letter,
// number, mark and space (their general categories are disjoint); newline marks \r and \n, which are also
// spaces.
const (
	cLetter  uint8 = 1 << iota // \p{L}
	cNumber                    // \p{N}
	cMark                      // \p{M}
	cSpace                     // \s: the White_Space property, what Oniguruma's \s and Go's unicode.IsSpace match
	cNewline                   // [\r\n]
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = classOf(r)
	}
	return t
}()

func classOf(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return cSpace | cNewline
	case unicode.IsLetter(r):
		return cLetter
	case unicode.IsNumber(r):
		return cNumber
	case unicode.IsMark(r):
		return cMark
	case unicode.IsSpace(r):
		return cSpace
	}
	return 0
}

// at returns the class and the byte length of the character at s[i]. A byte that does not start valid UTF-8
// is one character of class 0, like the U+FFFD it decodes to.
func at(s string, i int) (uint8, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		return 0, 1
	}
	return classOf(r), n
}

// pretok is the Split pre-tokenizer of Qwen's tokenizers, a hand-written scanner equal to the regex (no
// backtracking, so linear in the text), tested against a regex engine in FuzzPretokenize.
type pretok struct {
	word  uint8 // classes of letter runs: \p{L}, or [\p{L}\p{M}] for Qwen3.5
	other uint8 // classes that are not "other" ([^\s\p{L}\p{N}], Qwen3.5 also excluding \p{M})
}

func newPretok(marks bool) pretok {
	if marks {
		return pretok{word: cLetter | cMark, other: cSpace | cLetter | cNumber | cMark}
	}
	return pretok{word: cLetter, other: cSpace | cLetter | cNumber}
}

// run returns the end of the run of characters of the given classes that starts at i.
func run(s string, i int, classes uint8) int {
	for i < len(s) {
		c, n := at(s, i)
		if c&classes == 0 {
			break
		}
		i += n
	}
	return i
}

// runNot returns the end of the run of characters of none of the given classes that starts at i.
func runNot(s string, i int, classes uint8) int {
	for i < len(s) {
		c, n := at(s, i)
		if c&classes != 0 {
			break
		}
		i += n
	}
	return i
}

// next returns the end of the piece that starts at s[i] (i < len(s)): the match of the regex there. Every
// character starts a match of some alternative, so pieces are never empty and there are no gaps between
// matches. The alternatives, tried in order as Oniguruma's leftmost-first alternation does:
//
//  1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
//  2. [^\r\n\p{L}\p{N}]?\p{L}+           (Qwen3.5: [\p{L}\p{M}]+)
//  3. \p{N}
//  4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'        (Qwen3.5: also not \p{M})
//  5. \s*[\r\n]+
//  6. \s+(?!\S)
//  7. \s+
func (p pretok) next(s string, i int) int {
	if s[i] == '\'' {
		if e := contraction(s, i+1); e > 0 {
			return e
		}
	}
	c0, n0 := at(s, i)
	j := i + n0
	var c1 uint8
	n1 := 0
	if j < len(s) {
		c1, n1 = at(s, j)
	}
	// 2: the optional prefix is greedy, so it is taken whenever a letter follows it.
	if c0&(cNewline|cLetter|cNumber) == 0 && n1 > 0 && c1&p.word != 0 {
		return run(s, j+n1, p.word)
	}
	if c0&p.word != 0 {
		return run(s, j, p.word)
	}
	// 3
	if c0&cNumber != 0 {
		return j
	}
	// 4
	start := -1
	switch {
	case s[i] == ' ' && n1 > 0 && c1&p.other == 0:
		start = j + n1
	case c0&p.other == 0:
		start = j
	}
	if start >= 0 {
		e := runNot(s, start, p.other)
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	// c0 is whitespace. Let the maximal whitespace run be [i, end).
	end, lastNL, last := j, -1, i
	if c0&cNewline != 0 {
		lastNL = i
	}
	for end < len(s) {
		c, n := at(s, end)
		if c&cSpace == 0 {
			break
		}
		if c&cNewline != 0 {
			lastNL = end
		}
		last = end
		end += n
	}
	switch {
	case lastNL >= 0: // 5: \s* backtracks to leave the run's last newline to [\r\n]+
		return lastNL + 1
	case end == len(s): // 6 at the end of the text
		return end
	case last > i: // 6: all but the last character, which is followed by \S
		return last
	}
	return end // 7: a single whitespace character before \S
}

// contraction matches (?i:s|t|re|ve|m|ll|d) at s[i:] (after an apostrophe) and returns the end of the match,
// or 0. Under Unicode simple case folding the only non-ASCII character that folds to one of these letters is
// U+017F (ſ), which folds to 's'.
func contraction(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	// b|0x20 lower-cases an ASCII letter and maps no other byte onto one.
	switch s[i] | 0x20 {
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && s[i+1]|0x20 == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && s[i+1]|0x20 == 'l' {
			return i + 2
		}
	}
	if len(s) >= i+2 && s[i] == 0xC5 && s[i+1] == 0xBF { // ſ
		return i + 2
	}
	return 0
}

// split calls fn with each piece of s in order.
func (p pretok) split(s string, fn func(piece string)) {
	for i := 0; i < len(s); {
		e := p.next(s, i)
		fn(s[i:e])
		i = e
	}
}
