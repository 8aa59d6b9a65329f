package reference

import "unicode"

// The two Split regexes of Qwen tokenizer.json files (as stored in the JSON, after JSON unescaping). Go's regexp
// has no lookahead, so each is implemented by splitScanner, a hand-written matcher equivalent to the regex under
// Oniguruma's leftmost-first alternation with greedy backtracking (the engine Hugging Face tokenizers uses).
const (
	// Qwen2 / Qwen2.5 / Qwen3 / Qwen3-MoE (llama.cpp pre-type "qwen2").
	RegexQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen3.5 (llama.cpp pre-type "qwen35"): letters runs also take combining marks \p{M}.
	RegexQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitScanner splits text the way Split(pattern, behavior=Isolated) does with one of the regexes above: every
// match and every gap between matches becomes a piece; empty pieces are dropped.
type splitScanner struct {
	marks bool // Qwen3.5: \p{M} joins \p{L} in the letter runs and leaves the "other" class
}

// \s in Oniguruma (Unicode): U+0009–U+000D, U+0085 and the Zs/Zl/Zp categories — the White_Space property set
// that unicode.IsSpace implements.
func isSpace(r rune) bool { return unicode.IsSpace(r) }
func isNL(r rune) bool    { return r == '\r' || r == '\n' }

func (s splitScanner) isWord(r rune) bool {
	return unicode.IsLetter(r) || (s.marks && unicode.IsMark(r))
}

// isOther is [^\s\p{L}\p{N}] (Qwen2) or [^\s\p{L}\p{M}\p{N}] (Qwen3.5).
func (s splitScanner) isOther(r rune) bool {
	return !isSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) && !(s.marks && unicode.IsMark(r))
}

// isPrefix is [^\r\n\p{L}\p{N}] (both regexes).
func isPrefix(r rune) bool { return !isNL(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) }

// foldASCII lowers r for the (?i:...) contraction group. Under Unicode simple case folding U+017F (ſ) folds
// to 's', so Oniguruma's case-insensitive 's matches it too.
func foldASCII(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	if r == 'ſ' {
		return 's'
	}
	return r
}

// matchAt returns the length in runes of the regex match starting at rs[i], or 0 when no alternative matches.
func (s splitScanner) matchAt(rs []rune, i int) int {
	n := len(rs)
	// 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if rs[i] == '\'' && i+1 < n {
		c1 := foldASCII(rs[i+1])
		switch c1 {
		case 's', 't', 'm', 'd':
			return 2
		}
		if i+2 < n {
			c2 := foldASCII(rs[i+2])
			if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
				return 3
			}
		}
	}
	// 2. [^\r\n\p{L}\p{N}]?WORD+ — greedy optional first, then without it.
	if isPrefix(rs[i]) && i+1 < n && s.isWord(rs[i+1]) {
		j := i + 2
		for j < n && s.isWord(rs[j]) {
			j++
		}
		return j - i
	}
	if s.isWord(rs[i]) {
		j := i + 1
		for j < n && s.isWord(rs[j]) {
			j++
		}
		return j - i
	}
	// 3. \p{N} — a single number character.
	if unicode.IsNumber(rs[i]) {
		return 1
	}
	// 4. ' ?OTHER+[\r\n]*'
	start := i
	if rs[i] == ' ' && i+1 < n && s.isOther(rs[i+1]) {
		start = i + 1
	}
	if s.isOther(rs[start]) {
		j := start + 1
		for j < n && s.isOther(rs[j]) {
			j++
		}
		for j < n && isNL(rs[j]) {
			j++
		}
		return j - i
	}
	// The remaining alternatives start with whitespace; w is the maximal whitespace run [i, end).
	if !isSpace(rs[i]) {
		return 0
	}
	end := i + 1
	for end < n && isSpace(rs[end]) {
		end++
	}
	// 5. \s*[\r\n]+ — backtracking \s* leaves the last newline of the run to [\r\n]+, so the match ends just
	// after the last \r or \n of the run.
	for j := end - 1; j >= i; j-- {
		if isNL(rs[j]) {
			return j + 1 - i
		}
	}
	// 6. \s+(?!\S) — the whole run at the end of the text, otherwise the run minus its last character.
	if end == n {
		return end - i
	}
	if end-1 > i {
		return end - 1 - i
	}
	// 7. \s+
	return end - i
}

// split returns the pieces of text (matches and the gaps between them, none empty), in order.
func (s splitScanner) split(text string) []string {
	if text == "" {
		return nil
	}
	rs := []rune(text)
	// Byte offset of each rune, so pieces are slices of text (invalid UTF-8 stays byte-identical).
	offs := make([]int, 0, len(rs)+1)
	for i := range text {
		offs = append(offs, i)
	}
	offs = append(offs, len(text))
	var out []string
	gap := -1
	for i := 0; i < len(rs); {
		if l := s.matchAt(rs, i); l > 0 {
			if gap >= 0 {
				out = append(out, text[offs[gap]:offs[i]])
				gap = -1
			}
			out = append(out, text[offs[i]:offs[i+l]])
			i += l
			continue
		}
		if gap < 0 {
			gap = i
		}
		i++
	}
	if gap >= 0 {
		out = append(out, text[offs[gap]:])
	}
	return out
}
