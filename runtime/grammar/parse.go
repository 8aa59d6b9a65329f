package grammar

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The GBNF syntax is llama.cpp's (grammars/README.md, src/llama-grammar.cpp
// llama_grammar_parser): rules "name ::= alternatives", one per line (a
// newline ends a rule except inside parentheses and after "|"), "#"
// comments, string literals and character classes with \x \u \U \t \r \n
// \\ \" \[ \] \- escapes, "." for any character, groups, * + ? {m} {m,}
// {m,n}, and token references <[id]>, <text>, !<[id]>, !<text>. Rule names
// are letters, digits and '-' (llama.cpp's set) and, as its README allows,
// '_'. Where llama.cpp is silent or lax this parser is strict: a rule defined
// twice, a reversed range, a code point above U+10FFFF, a surrogate or NUL
// in a literal, invalid UTF-8 are errors, not surprises at generation time.

type exprKind uint8

const (
	xSeq    exprKind = iota // items in order (none: the empty string)
	xAlt                    // items are alternatives (a parenthesized group)
	xLit                    // runes in order
	xClass                  // one code point in ranges (negated: not in ranges)
	xAny                    // "." — any code point
	xRef                    // the rule called name
	xToken                  // one token: tokenID, or the token whose text is name; neg: any other token
	xRepeat                 // items[0] between min and max times (max < 0: unbounded)
)

type runeRange struct{ lo, hi rune }

type expr struct {
	kind     exprKind
	items    []*expr
	runes    []rune
	ranges   []runeRange
	neg      bool
	name     string
	tokenID  int32 // xToken with an id (name empty)
	min, max int
	line     int
	col      int
}

type ruleDef struct {
	name      string
	body      *expr // xAlt with at least one alternative (each an xSeq)
	line, col int
}

type syntaxTree struct {
	rules []*ruleDef
	index map[string]int
}

type parser struct {
	src       []byte
	pos       int
	line, col int // of pos
	lim       Limits
	depth     int
}

func parseGBNF(src string, lim Limits) (*syntaxTree, error) {
	lim = lim.withDefaults()
	if len(src) > lim.SourceBytes {
		return nil, &Error{Msg: fmt.Sprintf("grammar of %d bytes exceeds the %d-byte limit", len(src), lim.SourceBytes)}
	}
	p := &parser{src: []byte(src), line: 1, col: 1, lim: lim}
	if !utf8.Valid(p.src) {
		i := 0
		for i < len(p.src) {
			r, n := utf8.DecodeRune(p.src[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		p.advanceTo(i)
		return nil, p.errf("invalid UTF-8")
	}
	t := &syntaxTree{index: map[string]int{}}
	p.space(true)
	for !p.eof() {
		r, err := p.rule()
		if err != nil {
			return nil, err
		}
		if i, dup := t.index[r.name]; dup {
			first := t.rules[i]
			return nil, &SyntaxError{Line: r.line, Col: r.col, Msg: fmt.Sprintf("rule %q defined twice (first at %d:%d)", r.name, first.line, first.col)}
		}
		t.index[r.name] = len(t.rules)
		t.rules = append(t.rules, r)
	}
	return t, nil
}

func (p *parser) eof() bool { return p.pos >= len(p.src) }

func (p *parser) peek(off int) byte {
	if p.pos+off < len(p.src) {
		return p.src[p.pos+off]
	}
	return 0
}

// advanceTo moves pos forward to i keeping line and column.
func (p *parser) advanceTo(i int) {
	for p.pos < i && p.pos < len(p.src) {
		if p.src[p.pos] == '\n' {
			p.line++
			p.col = 1
		} else {
			p.col++
		}
		p.pos++
	}
}

func (p *parser) advance(n int) { p.advanceTo(p.pos + n) }

func (p *parser) errf(format string, args ...any) error {
	return &SyntaxError{Line: p.line, Col: p.col, Msg: fmt.Sprintf(format, args...)}
}

// space skips blanks and comments, and newlines when newlineOK.
func (p *parser) space(newlineOK bool) {
	for !p.eof() {
		c := p.src[p.pos]
		switch {
		case c == ' ' || c == '\t':
			p.advance(1)
		case c == '#':
			for !p.eof() && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.advance(1)
			}
		case newlineOK && (c == '\n' || c == '\r'):
			p.advance(1)
		default:
			return
		}
	}
}

func isWordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *parser) name() (string, error) {
	start := p.pos
	for !p.eof() && isWordChar(p.src[p.pos]) {
		p.advance(1)
	}
	if p.pos == start {
		return "", p.errf("expecting a rule name, found %s", p.describe())
	}
	return string(p.src[start:p.pos]), nil
}

// describe names what is at pos for error messages.
func (p *parser) describe() string {
	if p.eof() {
		return "end of input"
	}
	r, _ := utf8.DecodeRune(p.src[p.pos:])
	switch r {
	case '\n':
		return "end of line"
	case '\r':
		return "end of line"
	}
	return strconv.QuoteRune(r)
}

func (p *parser) rule() (*ruleDef, error) {
	line, col := p.line, p.col
	name, err := p.name()
	if err != nil {
		return nil, err
	}
	p.space(false)
	if p.peek(0) != ':' || p.peek(1) != ':' || p.peek(2) != '=' {
		return nil, p.errf("expecting ::= after rule name %q, found %s", name, p.describe())
	}
	p.advance(3)
	p.space(true)
	body, err := p.alternates(false)
	if err != nil {
		return nil, err
	}
	switch {
	case p.peek(0) == '\r':
		p.advance(1)
		if p.peek(0) == '\n' {
			p.advance(1)
		}
	case p.peek(0) == '\n':
		p.advance(1)
	case !p.eof():
		return nil, p.errf("expecting end of line after rule %q, found %s", name, p.describe())
	}
	p.space(true)
	return &ruleDef{name: name, body: body, line: line, col: col}, nil
}

func (p *parser) alternates(nested bool) (*expr, error) {
	alt := &expr{kind: xAlt, line: p.line, col: p.col}
	for {
		seq, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		alt.items = append(alt.items, seq)
		if p.peek(0) != '|' {
			return alt, nil
		}
		p.advance(1)
		p.space(true)
	}
}

func (p *parser) sequence(nested bool) (*expr, error) {
	seq := &expr{kind: xSeq, line: p.line, col: p.col}
	for !p.eof() {
		line, col := p.line, p.col
		c := p.src[p.pos]
		var item *expr
		switch {
		case c == '"':
			p.advance(1)
			lit := &expr{kind: xLit, line: line, col: col}
			for p.peek(0) != '"' {
				if p.eof() {
					return nil, p.errf("unterminated string literal (opened at %d:%d)", line, col)
				}
				r, err := p.char()
				if err != nil {
					return nil, err
				}
				if r == 0 {
					return nil, p.errf("NUL in a string literal can never be generated")
				}
				if r >= 0xD800 && r <= 0xDFFF {
					return nil, p.errf("surrogate U+%04X in a string literal cannot appear in UTF-8 text", r)
				}
				lit.runes = append(lit.runes, r)
			}
			p.advance(1)
			item = lit
		case c == '[':
			cls, err := p.class()
			if err != nil {
				return nil, err
			}
			item = cls
		case c == '<' || c == '!':
			tok, err := p.token()
			if err != nil {
				return nil, err
			}
			item = tok
		case isWordChar(c):
			name, _ := p.name()
			item = &expr{kind: xRef, name: name, line: line, col: col}
		case c == '(':
			if p.depth >= p.lim.Nesting {
				return nil, p.errf("parentheses nested deeper than %d", p.lim.Nesting)
			}
			p.depth++
			p.advance(1)
			p.space(true)
			group, err := p.alternates(true)
			if err != nil {
				return nil, err
			}
			if p.peek(0) != ')' {
				return nil, p.errf("expecting ')' to close the group opened at %d:%d, found %s", line, col, p.describe())
			}
			p.depth--
			p.advance(1)
			group.line, group.col = line, col
			item = group
		case c == '.':
			p.advance(1)
			item = &expr{kind: xAny, line: line, col: col}
		case c == '*' || c == '+' || c == '?' || c == '{':
			if len(seq.items) == 0 {
				return nil, p.errf("expecting an item before %q", c)
			}
			lo, hi, err := p.quantifier()
			if err != nil {
				return nil, err
			}
			last := len(seq.items) - 1
			seq.items[last] = &expr{kind: xRepeat, items: []*expr{seq.items[last]}, min: lo, max: hi, line: line, col: col}
			p.space(nested)
			continue
		default:
			return seq, nil
		}
		seq.items = append(seq.items, item)
		p.space(nested)
	}
	return seq, nil
}

func (p *parser) quantifier() (lo, hi int, err error) {
	switch p.src[p.pos] {
	case '*':
		p.advance(1)
		return 0, -1, nil
	case '+':
		p.advance(1)
		return 1, -1, nil
	case '?':
		p.advance(1)
		return 0, 1, nil
	}
	line, col := p.line, p.col
	p.advance(1) // '{'
	p.space(true)
	if lo, err = p.count(); err != nil {
		return 0, 0, err
	}
	p.space(true)
	switch p.peek(0) {
	case '}':
		p.advance(1)
		hi = lo
	case ',':
		p.advance(1)
		p.space(true)
		hi = -1
		if c := p.peek(0); c >= '0' && c <= '9' {
			if hi, err = p.count(); err != nil {
				return 0, 0, err
			}
			p.space(true)
		}
		if p.peek(0) != '}' {
			return 0, 0, p.errf("expecting '}' to close the repetition opened at %d:%d, found %s", line, col, p.describe())
		}
		p.advance(1)
	default:
		return 0, 0, p.errf("expecting ',' or '}' in the repetition opened at %d:%d, found %s", line, col, p.describe())
	}
	if hi >= 0 && hi < lo {
		return 0, 0, &SyntaxError{Line: line, Col: col, Msg: fmt.Sprintf("repetition {%d,%d}: maximum below minimum", lo, hi)}
	}
	return lo, hi, nil
}

func (p *parser) count() (int, error) {
	start := p.pos
	line, col := p.line, p.col
	for !p.eof() && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.advance(1)
	}
	if p.pos == start {
		return 0, p.errf("expecting a number, found %s", p.describe())
	}
	digits := string(p.src[start:p.pos])
	n, err := strconv.Atoi(digits)
	if err != nil || n > p.lim.Repeat {
		return 0, &SyntaxError{Line: line, Col: col, Msg: fmt.Sprintf("repetition count %s exceeds the limit of %d", digits, p.lim.Repeat)}
	}
	return n, nil
}

// char reads one literal or class character with its escapes.
func (p *parser) char() (rune, error) {
	if p.peek(0) != '\\' {
		r, n := utf8.DecodeRune(p.src[p.pos:])
		p.advance(n)
		return r, nil
	}
	line, col := p.line, p.col
	if p.pos+1 >= len(p.src) {
		return 0, p.errf("unexpected end of input after '\\'")
	}
	esc := p.peek(1)
	p.advance(2)
	hex := 0
	switch esc {
	case 'x':
		hex = 2
	case 'u':
		hex = 4
	case 'U':
		hex = 8
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'n':
		return '\n', nil
	case '\\', '"', '[', ']', '-':
		return rune(esc), nil
	default:
		r, _ := utf8.DecodeRune(p.src[p.pos-1:])
		return 0, &SyntaxError{Line: line, Col: col, Msg: fmt.Sprintf("unknown escape \\%c", r)}
	}
	var v uint64
	for i := range hex {
		c := p.peek(0)
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, p.errf("escape \\%c needs %d hex digits, found %d", esc, hex, i)
		}
		v = v<<4 | uint64(d)
		p.advance(1)
	}
	if v > utf8.MaxRune {
		return 0, &SyntaxError{Line: line, Col: col, Msg: fmt.Sprintf("code point U+%X above U+10FFFF", v)}
	}
	return rune(v), nil
}

func (p *parser) class() (*expr, error) {
	line, col := p.line, p.col
	p.advance(1) // '['
	cls := &expr{kind: xClass, line: line, col: col}
	if p.peek(0) == '^' {
		cls.neg = true
		p.advance(1)
	}
	for p.peek(0) != ']' {
		if p.eof() {
			return nil, &SyntaxError{Line: line, Col: col, Msg: "unterminated character class"}
		}
		rl, rc := p.line, p.col
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.peek(0) == '-' && p.peek(1) != ']' && p.pos+1 < len(p.src) {
			p.advance(1)
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, &SyntaxError{Line: rl, Col: rc, Msg: fmt.Sprintf("character range %q-%q is reversed", lo, hi)}
			}
		}
		cls.ranges = append(cls.ranges, runeRange{lo, hi})
	}
	p.advance(1)
	return cls, nil
}

func (p *parser) token() (*expr, error) {
	line, col := p.line, p.col
	tok := &expr{kind: xToken, line: line, col: col}
	if p.peek(0) == '!' {
		tok.neg = true
		p.advance(1)
	}
	if p.peek(0) != '<' {
		return nil, p.errf("expecting '<' of a token reference, found %s", p.describe())
	}
	start := p.pos
	p.advance(1)
	if p.peek(0) == '[' {
		p.advance(1)
		ds := p.pos
		for !p.eof() && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.advance(1)
		}
		id, err := strconv.ParseInt(string(p.src[ds:p.pos]), 10, 32)
		if err != nil {
			return nil, p.errf("expecting a token id (0 to %d) in <[...]>", int32(1<<31-1))
		}
		if p.peek(0) != ']' || p.peek(1) != '>' {
			return nil, p.errf("expecting ]> to close the token reference, found %s", p.describe())
		}
		p.advance(2)
		tok.tokenID = int32(id)
		return tok, nil
	}
	for !p.eof() && p.src[p.pos] != '>' && p.src[p.pos] != '\n' {
		p.advance(1)
	}
	if p.peek(0) != '>' {
		return nil, p.errf("expecting '>' to close the token reference opened at %d:%d", line, col)
	}
	p.advance(1)
	tok.name = string(p.src[start:p.pos])
	tok.tokenID = -1
	return tok, nil
}
