package grammar

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSON Schema "pattern" (an ECMAScript regular expression) to GBNF over the
// content of a JSON string. Supported: literals and escapes (\d \w \s and
// their negations, \n \r \t \f \v \0 \xHH \uHHHH \u{H…} \cX, escaped
// punctuation), classes with ranges and negation, ".", groups ((…), (?:…),
// (?<name>…)), alternation, the quantifiers * + ? {n} {n,} {n,m} (lazy ones
// too: they match the same strings), and ^ / $ at the ends of the top-level
// alternatives. JSON Schema patterns are not anchored, so a missing ^ or $
// allows any text before or after (llama.cpp instead requires both).
// Refused with an error: lookaround, backreferences, word boundaries,
// Unicode property escapes, inline flags, anchors elsewhere.
//
// Each matched character is emitted in its JSON form: '"' and '\' escaped,
// control characters as \b \f \n \r \t or \u00XX, everything else as is.

const maxPatternLen = 1 << 12

type rxKind uint8

const (
	rxSet rxKind = iota
	rxSeq
	rxAlt
	rxRepeat
)

type rxNode struct {
	kind     rxKind
	set      []cpRange
	items    []*rxNode
	min, max int
}

type rxParser struct {
	src   []rune
	pos   int
	depth int
}

func (p *rxParser) errf(format string, args ...any) error {
	return fmt.Errorf("pattern %q at offset %d: %s", string(p.src), p.pos, fmt.Sprintf(format, args...))
}

// regex returns the GBNF of the JSON string contents matching pattern.
func (c *schemaConv) regex(pattern string) (string, error) {
	if len(pattern) > maxPatternLen {
		return "", fmt.Errorf("pattern longer than %d bytes", maxPatternLen)
	}
	if !utf8.ValidString(pattern) {
		return "", errors.New("pattern is not valid UTF-8")
	}
	p := &rxParser{src: []rune(pattern)}
	var alts []string
	for {
		start := false
		if p.peek() == '^' {
			p.pos++
			start = true
		}
		seq, end, err := p.seq(true)
		if err != nil {
			return "", err
		}
		body, err := rxGBNF(seq)
		if err != nil {
			return "", p.errf("%v", err)
		}
		if !start {
			body = c.primitive("char", "char") + "* " + body
		}
		if !end {
			body += " " + c.primitive("char", "char") + "*"
		}
		alts = append(alts, strings.TrimSpace(body))
		if p.pos >= len(p.src) {
			break
		}
		if p.src[p.pos] != '|' {
			return "", p.errf("unbalanced ')'")
		}
		p.pos++
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return "(" + strings.Join(alts, " | ") + ")", nil
}

func (p *rxParser) peek() rune {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return -1
}

// alt parses alternatives up to ')' or the end.
func (p *rxParser) alt() (*rxNode, error) {
	var items []*rxNode
	for {
		seq, _, err := p.seq(false)
		if err != nil {
			return nil, err
		}
		items = append(items, seq)
		if p.peek() != '|' {
			break
		}
		p.pos++
	}
	if len(items) == 1 {
		return items[0], nil
	}
	return &rxNode{kind: rxAlt, items: items}, nil
}

// seq parses a sequence up to '|', ')' or the end. At the top level a
// final '$' is allowed and reported.
func (p *rxParser) seq(top bool) (*rxNode, bool, error) {
	seq := &rxNode{kind: rxSeq}
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		var atom *rxNode
		switch c {
		case '|', ')':
			return seq, false, nil
		case '$':
			p.pos++
			if top && (p.pos == len(p.src) || p.src[p.pos] == '|') {
				return seq, true, nil
			}
			return nil, false, p.errf("anchor $ inside the pattern is not supported")
		case '^':
			return nil, false, p.errf("anchor ^ inside the pattern is not supported")
		case '(':
			if p.depth >= maxSchemaDepth {
				return nil, false, p.errf("groups nested deeper than %d", maxSchemaDepth)
			}
			p.pos++
			if p.peek() == '?' {
				switch {
				case p.pos+1 < len(p.src) && p.src[p.pos+1] == ':':
					p.pos += 2
				case p.pos+2 < len(p.src) && p.src[p.pos+1] == '<' && p.src[p.pos+2] != '=' && p.src[p.pos+2] != '!':
					end := p.pos + 2
					for end < len(p.src) && p.src[end] != '>' {
						end++
					}
					if end == len(p.src) {
						return nil, false, p.errf("unterminated group name")
					}
					p.pos = end + 1
				default:
					return nil, false, p.errf("lookaround and inline flags (?…) are not supported")
				}
			}
			p.depth++
			inner, err := p.alt()
			if err != nil {
				return nil, false, err
			}
			p.depth--
			if p.peek() != ')' {
				return nil, false, p.errf("missing ')'")
			}
			p.pos++
			atom = inner
		case '[':
			set, err := p.class()
			if err != nil {
				return nil, false, err
			}
			atom = &rxNode{kind: rxSet, set: set}
		case '.':
			p.pos++
			atom = &rxNode{kind: rxSet, set: normalizeRegexSet([]cpRange{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true)}
		case '*', '+', '?':
			return nil, false, p.errf("nothing to repeat")
		case '{':
			if _, _, ok := p.braces(); ok {
				return nil, false, p.errf("nothing to repeat")
			}
			p.pos++
			atom = &rxNode{kind: rxSet, set: []cpRange{{'{', '{'}}}
		case '\\':
			set, err := p.escape(false)
			if err != nil {
				return nil, false, err
			}
			atom = &rxNode{kind: rxSet, set: set}
		default:
			p.pos++
			atom = &rxNode{kind: rxSet, set: normalizeRegexSet([]cpRange{{uint32(c), uint32(c)}}, false)}
		}
		atom, err := p.quantified(atom)
		if err != nil {
			return nil, false, err
		}
		seq.items = append(seq.items, atom)
	}
	return seq, false, nil
}

// braces reads {n}, {n,} or {n,m} at pos without consuming it.
func (p *rxParser) braces() (lo, hi int, ok bool) {
	i := p.pos + 1
	num := func() (int, bool) {
		s := i
		for i < len(p.src) && p.src[i] >= '0' && p.src[i] <= '9' {
			i++
		}
		if i == s {
			return 0, false
		}
		n, err := strconv.Atoi(string(p.src[s:i]))
		if err != nil {
			n = 1 << 30
		}
		return n, true
	}
	lo, ok = num()
	if !ok {
		return 0, 0, false
	}
	hi = lo
	if i < len(p.src) && p.src[i] == ',' {
		i++
		hi = -1
		if n, ok := num(); ok {
			hi = n
		}
	}
	if i >= len(p.src) || p.src[i] != '}' {
		return 0, 0, false
	}
	return lo, hi, true
}

func (p *rxParser) quantified(atom *rxNode) (*rxNode, error) {
	for p.pos < len(p.src) {
		lo, hi := 0, 0
		switch p.src[p.pos] {
		case '*':
			lo, hi = 0, -1
			p.pos++
		case '+':
			lo, hi = 1, -1
			p.pos++
		case '?':
			lo, hi = 0, 1
			p.pos++
		case '{':
			var ok bool
			if lo, hi, ok = p.braces(); !ok {
				return atom, nil
			}
			for p.src[p.pos] != '}' {
				p.pos++
			}
			p.pos++
			limit := Limits{}.withDefaults().Repeat
			if lo > limit || hi > limit {
				return nil, p.errf("repetition count above %d", limit)
			}
			if hi >= 0 && hi < lo {
				return nil, p.errf("repetition {%d,%d}: maximum below minimum", lo, hi)
			}
		default:
			return atom, nil
		}
		if p.peek() == '?' { // lazy: the same strings match
			p.pos++
		}
		if c := p.peek(); c == '*' || c == '+' || c == '?' || c == '{' {
			if _, _, ok := p.braces(); c != '{' || ok {
				return nil, p.errf("nothing to repeat")
			}
		}
		atom = &rxNode{kind: rxRepeat, items: []*rxNode{atom}, min: lo, max: hi}
	}
	return atom, nil
}

var (
	rxDigit = []cpRange{{'0', '9'}}
	rxWord  = []cpRange{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	rxSpace = []cpRange{{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
		{0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}}
)

// normalizeRegexSet sorts and merges a set of code points (complemented
// when neg) and drops surrogates; NUL stays (JSON writes it as \u0000).
func normalizeRegexSet(rs []cpRange, neg bool) []cpRange {
	out := mergeRanges(append([]cpRange(nil), rs...))
	if neg {
		var comp []cpRange
		next := uint32(0)
		for _, r := range out {
			if r.lo > next {
				comp = append(comp, cpRange{next, r.lo - 1})
			}
			next = r.hi + 1
		}
		if next <= maxRune {
			comp = append(comp, cpRange{next, maxRune})
		}
		out = comp
	}
	return subtractRange(out, 0xD800, 0xDFFF)
}

// escape reads a backslash escape; inClass selects class rules ([\b] is
// backspace).
func (p *rxParser) escape(inClass bool) ([]cpRange, error) {
	p.pos++ // '\'
	if p.pos >= len(p.src) {
		return nil, p.errf("pattern ends with '\\'")
	}
	c := p.src[p.pos]
	p.pos++
	single := func(r rune) ([]cpRange, error) { return []cpRange{{uint32(r), uint32(r)}}, nil }
	switch c {
	case 'd':
		return rxDigit, nil
	case 'D':
		return normalizeRegexSet(rxDigit, true), nil
	case 'w':
		return rxWord, nil
	case 'W':
		return normalizeRegexSet(rxWord, true), nil
	case 's':
		return rxSpace, nil
	case 'S':
		return normalizeRegexSet(rxSpace, true), nil
	case 'n':
		return single('\n')
	case 'r':
		return single('\r')
	case 't':
		return single('\t')
	case 'f':
		return single('\f')
	case 'v':
		return single('\v')
	case '0':
		if d := p.peek(); d >= '0' && d <= '9' {
			return nil, p.errf("octal escapes are not supported")
		}
		return single(0)
	case 'b':
		if inClass {
			return single('\b')
		}
		return nil, p.errf("word boundaries (\\b) are not supported")
	case 'B':
		return nil, p.errf("word boundaries (\\B) are not supported")
	case 'c':
		if l := p.peek(); l >= 'a' && l <= 'z' || l >= 'A' && l <= 'Z' {
			p.pos++
			return single(l % 32)
		}
		return nil, p.errf("\\c needs a letter")
	case 'x', 'u':
		n := 2
		if c == 'u' {
			n = 4
			if p.peek() == '{' {
				end := p.pos + 1
				for end < len(p.src) && p.src[end] != '}' {
					end++
				}
				v, err := strconv.ParseUint(string(p.src[p.pos+1:end]), 16, 32)
				if end == len(p.src) || err != nil || v > maxRune {
					return nil, p.errf("bad \\u{…} escape")
				}
				p.pos = end + 1
				return single(rune(v))
			}
		}
		if p.pos+n > len(p.src) {
			return nil, p.errf("\\%c needs %d hex digits", c, n)
		}
		v, err := strconv.ParseUint(string(p.src[p.pos:p.pos+n]), 16, 32)
		if err != nil {
			return nil, p.errf("\\%c needs %d hex digits", c, n)
		}
		p.pos += n
		return single(rune(v))
	case 'p', 'P':
		return nil, p.errf("Unicode property escapes (\\%c{…}) are not supported", c)
	case 'k':
		return nil, p.errf("backreferences are not supported")
	}
	switch {
	case c >= '1' && c <= '9':
		return nil, p.errf("backreferences are not supported")
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return nil, p.errf("unsupported escape \\%c", c)
	}
	return single(c)
}

// class reads a [...] class.
func (p *rxParser) class() ([]cpRange, error) {
	start := p.pos
	p.pos++
	neg := false
	if p.peek() == '^' {
		neg = true
		p.pos++
	}
	var set []cpRange
	// item reads one class atom: a single code point (ok) or a class escape.
	item := func() (r rune, multi []cpRange, err error) {
		if p.peek() == '\\' {
			s, err := p.escape(true)
			if err != nil {
				return 0, nil, err
			}
			if len(s) == 1 && s[0].lo == s[0].hi {
				return rune(s[0].lo), nil, nil
			}
			return 0, s, nil
		}
		r = p.src[p.pos]
		p.pos++
		return r, nil, nil
	}
	for {
		if p.pos >= len(p.src) {
			p.pos = start
			return nil, p.errf("unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, multi, err := item()
		if err != nil {
			return nil, err
		}
		if multi != nil {
			set = append(set, multi...)
			continue
		}
		if p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
			save := p.pos
			p.pos++
			hi, multi, err := item()
			if err != nil {
				return nil, err
			}
			if multi != nil { // [a-\d]: '-' is literal (Annex B)
				p.pos = save
				set = append(set, cpRange{uint32(lo), uint32(lo)})
				continue
			}
			if hi < lo {
				return nil, p.errf("class range %q-%q is reversed", lo, hi)
			}
			set = append(set, cpRange{uint32(lo), uint32(hi)})
			continue
		}
		set = append(set, cpRange{uint32(lo), uint32(lo)})
	}
	return normalizeRegexSet(set, neg), nil
}

// rxGBNF writes a regex node as GBNF over JSON string content.
func rxGBNF(n *rxNode) (string, error) {
	switch n.kind {
	case rxSet:
		return jsonCharSet(n.set)
	case rxSeq:
		var parts []string
		for _, it := range n.items {
			s, err := rxGBNF(it)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		if len(parts) == 0 {
			return `""`, nil
		}
		return strings.Join(parts, " "), nil
	case rxAlt:
		var parts []string
		for _, it := range n.items {
			s, err := rxGBNF(it)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return "(" + strings.Join(parts, " | ") + ")", nil
	case rxRepeat:
		s, err := rxGBNF(n.items[0])
		if err != nil {
			return "", err
		}
		if n.max == 0 {
			return `""`, nil
		}
		return "(" + s + ")" + quantifier(n.min, n.max), nil
	}
	return "", errors.New("unknown pattern node")
}

// jsonCharSet matches one character of set in its JSON string form.
func jsonCharSet(set []cpRange) (string, error) {
	if len(set) == 0 {
		return "", errors.New("a character class matches nothing")
	}
	var alts []string
	raw := subtractRange(subtractRange(subtractRange(set, 0, 0x1F), '"', '"'), '\\', '\\')
	if len(raw) > 0 {
		var sb strings.Builder
		sb.WriteByte('[')
		for _, r := range raw {
			sb.WriteString(classChar(rune(r.lo)))
			if r.hi != r.lo {
				sb.WriteByte('-')
				sb.WriteString(classChar(rune(r.hi)))
			}
		}
		sb.WriteByte(']')
		alts = append(alts, sb.String())
	}
	for _, r := range window(set, 0, 0x5C) {
		for c := r.lo; c <= r.hi; c++ {
			if c >= 0x20 && c != '"' && c != '\\' {
				continue
			}
			alts = append(alts, Literal(jsonString(string(rune(c)))[1:len(jsonString(string(rune(c))))-1]))
		}
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return "(" + strings.Join(alts, " | ") + ")", nil
}
