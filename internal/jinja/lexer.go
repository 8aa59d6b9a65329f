package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows jinja2's (lexer.py, 3.1) with the options transformers
// uses: trim_blocks (a block or comment tag eats the newline after it),
// lstrip_blocks (spaces and tabs before a block or comment tag at the start of
// a line are dropped), keep_trailing_newline off (one trailing newline of the
// source is dropped), "\r\n" and "\r" read as "\n". "{%-", "-%}", "{{-",
// "-}}", "{#-" and "-#}" strip all whitespace on their side; "{%+" and "+%}"
// turn lstrip_blocks and trim_blocks off for that tag.

type tokKind uint8

const (
	tEOF tokKind = iota
	tData
	tBlockBegin
	tBlockEnd
	tVarBegin
	tVarEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	off  int // byte offset in the normalized source
	val  string
	ival int64
	fval float64
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tData:
		return "template data"
	case tBlockBegin:
		return "begin of statement block"
	case tBlockEnd:
		return "end of statement block"
	case tVarBegin:
		return "begin of print statement"
	case tVarEnd:
		return "end of print statement"
	case tString:
		return "string"
	case tInt, tFloat:
		return "number"
	}
	return "'" + t.val + "'"
}

// maxSource bounds the template source the lexer accepts.
const maxSource = 4 << 20

type lexer struct {
	src    string
	pos    int
	toks   []token
	lines  *lineIndex
	starts bool // the previous tag match ended with a newline (jinja2's line_starting)
}

func (lx *lexer) errAt(off int, msg string) *SyntaxError {
	return &SyntaxError{Pos: lx.lines.pos(off), Msg: msg}
}

// normalizeSource applies jinja2's newline handling.
func normalizeSource(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

func lex(src string) ([]token, *lineIndex, error) {
	if len(src) > maxSource {
		return nil, nil, &SyntaxError{Pos: Pos{1, 1}, Msg: "template source is larger than " + strconv.Itoa(maxSource) + " bytes"}
	}
	src = normalizeSource(src)
	lx := &lexer{src: src, lines: newLineIndex(src), starts: true}
	if err := lx.run(); err != nil {
		return nil, lx.lines, err
	}
	lx.toks = append(lx.toks, token{kind: tEOF, off: len(src)})
	return lx.toks, lx.lines, nil
}

// isPySpace is Python's str.isspace for one character (what jinja2's \s and
// str.strip() treat as whitespace).
func isPySpace(r rune) bool {
	if r < 0x80 {
		return r == ' ' || r >= '\t' && r <= '\r' || r >= 0x1c && r <= 0x1f
	}
	return r == 0x85 || r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Zs, r)
}

func rstripPy(s string) string {
	return strings.TrimRightFunc(s, isPySpace)
}

// skipSpace returns the offset after the whitespace at off.
func (lx *lexer) skipSpace(off int) int {
	for off < len(lx.src) {
		r, n := utf8.DecodeRuneInString(lx.src[off:])
		if !isPySpace(r) {
			break
		}
		off += n
	}
	return off
}

func allSpace(s string) bool {
	for _, r := range s {
		if !isPySpace(r) {
			return false
		}
	}
	return true
}

func (lx *lexer) emitData(off int, text string) {
	if text != "" {
		lx.toks = append(lx.toks, token{kind: tData, off: off, val: text})
	}
}

// stripData applies the whitespace control of the tag that follows text.
func (lx *lexer) stripData(text string, sign byte, lstrip bool) string {
	if sign == '-' {
		return rstripPy(text)
	}
	if sign != '+' && lstrip {
		l := strings.LastIndexByte(text, '\n') + 1
		if (l > 0 || lx.starts) && l < len(text) && allSpace(text[l:]) {
			return text[:l]
		}
	}
	return text
}

func (lx *lexer) run() error {
	src := lx.src
	for lx.pos < len(src) {
		start := lx.pos
		i := start
		tag := -1
		for {
			j := strings.IndexByte(src[i:], '{')
			if j < 0 || i+j+1 >= len(src) {
				break
			}
			i += j
			if c := src[i+1]; c == '%' || c == '{' || c == '#' {
				tag = i
				break
			}
			i++
		}
		if tag < 0 {
			lx.emitData(start, src[start:])
			return nil
		}
		kind := src[tag+1]
		var sign byte
		after := tag + 2
		if after < len(src) && (src[after] == '-' || src[after] == '+') {
			sign = src[after]
			after++
		}
		text := src[start:tag]
		if kind == '%' {
			if end, ok := lx.rawBegin(after); ok {
				lx.emitData(start, lx.stripData(text, sign, true))
				if err := lx.raw(tag, end); err != nil {
					return err
				}
				continue
			}
		}
		lx.emitData(start, lx.stripData(text, sign, kind != '{'))
		switch kind {
		case '#':
			if err := lx.comment(tag, after); err != nil {
				return err
			}
		case '%':
			lx.toks = append(lx.toks, token{kind: tBlockBegin, off: tag})
			if err := lx.tag(tag, after, true); err != nil {
				return err
			}
		default:
			lx.toks = append(lx.toks, token{kind: tVarBegin, off: tag})
			if err := lx.tag(tag, after, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// rawBegin matches `\s*raw\s*(-%}\s*|%})` at off and returns the offset after it.
func (lx *lexer) rawBegin(off int) (int, bool) {
	src := lx.src
	p := lx.skipSpace(off)
	if !strings.HasPrefix(src[p:], "raw") {
		return 0, false
	}
	p = lx.skipSpace(p + 3)
	switch {
	case strings.HasPrefix(src[p:], "-%}"):
		return lx.skipSpace(p + 3), true
	case strings.HasPrefix(src[p:], "%}"):
		return p + 2, true
	}
	return 0, false
}

// raw handles {% raw %}…{% endraw %}: the text in between is data.
func (lx *lexer) raw(tag, off int) error {
	src := lx.src
	lx.starts = off > 0 && src[off-1] == '\n'
	for p := off; ; {
		j := strings.Index(src[p:], "{%")
		if j < 0 {
			return lx.errAt(tag, "missing end of raw directive")
		}
		q := p + j + 2
		var sign byte
		if q < len(src) && (src[q] == '-' || src[q] == '+') {
			sign = src[q]
			q++
		}
		q = lx.skipSpace(q)
		if !strings.HasPrefix(src[q:], "endraw") {
			p += j + 2
			continue
		}
		q = lx.skipSpace(q + 6)
		var end int
		switch {
		case strings.HasPrefix(src[q:], "+%}"):
			end = q + 3
		case strings.HasPrefix(src[q:], "-%}"):
			end = lx.skipSpace(q + 3)
		case strings.HasPrefix(src[q:], "%}"):
			end = q + 2
			if end < len(src) && src[end] == '\n' {
				end++
			}
		default:
			p += j + 2
			continue
		}
		lx.emitData(off, lx.stripData(src[off:p+j], sign, true))
		lx.pos = end
		lx.starts = src[end-1] == '\n'
		return nil
	}
}

func (lx *lexer) comment(tag, off int) error {
	src := lx.src
	j := strings.Index(src[off:], "#}")
	if j < 0 {
		return lx.errAt(tag, "missing end of comment tag")
	}
	end := off + j
	switch {
	case end > off && src[end-1] == '-':
		lx.pos = lx.skipSpace(end + 2)
	case end > off && src[end-1] == '+':
		lx.pos = end + 2
	default:
		lx.pos = end + 2
		if lx.pos < len(src) && src[lx.pos] == '\n' {
			lx.pos++
		}
	}
	lx.starts = src[lx.pos-1] == '\n'
	return nil
}

// operators, longest first.
var operators = []string{"**", "//", "==", "!=", ">=", "<=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// tag lexes the inside of a {% %} (block) or {{ }} tag from off.
func (lx *lexer) tag(tag, off int, block bool) error {
	src := lx.src
	var balance []byte
	p := off
	for {
		if p >= len(src) {
			what := "print statement"
			if block {
				what = "statement block"
			}
			return lx.errAt(tag, "unexpected end of template inside this "+what+" (missing '"+map[bool]string{true: "%}", false: "}}"}[block]+"')")
		}
		if len(balance) == 0 {
			if block {
				switch {
				case strings.HasPrefix(src[p:], "+%}"):
					lx.endTag(tBlockEnd, p, p+3)
					return nil
				case strings.HasPrefix(src[p:], "-%}"):
					lx.endTag(tBlockEnd, p, lx.skipSpace(p+3))
					return nil
				case strings.HasPrefix(src[p:], "%}"):
					end := p + 2
					if end < len(src) && src[end] == '\n' {
						end++
					}
					lx.endTag(tBlockEnd, p, end)
					return nil
				}
			} else {
				switch {
				case strings.HasPrefix(src[p:], "-}}"):
					lx.endTag(tVarEnd, p, lx.skipSpace(p+3))
					return nil
				case strings.HasPrefix(src[p:], "}}"):
					lx.endTag(tVarEnd, p, p+2)
					return nil
				}
			}
		}
		r, n := utf8.DecodeRuneInString(src[p:])
		switch {
		case isPySpace(r):
			p = lx.skipSpace(p)
		case r >= '0' && r <= '9':
			np, err := lx.number(p)
			if err != nil {
				return err
			}
			p = np
		case r == '_' || unicode.IsLetter(r):
			q := p + n
			for q < len(src) {
				r2, n2 := utf8.DecodeRuneInString(src[q:])
				if r2 != '_' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) && !unicode.Is(unicode.Mn, r2) && !unicode.Is(unicode.Mc, r2) {
					break
				}
				q += n2
			}
			lx.toks = append(lx.toks, token{kind: tName, off: p, val: src[p:q]})
			p = q
		case r == '\'' || r == '"':
			np, err := lx.str(p)
			if err != nil {
				return err
			}
			p = np
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(src[p:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return lx.errAt(p, "unexpected char "+strconv.QuoteRune(r))
			}
			switch op {
			case "(":
				balance = append(balance, ')')
			case "[":
				balance = append(balance, ']')
			case "{":
				balance = append(balance, '}')
			case ")", "]", "}":
				if len(balance) == 0 {
					return lx.errAt(p, "unexpected '"+op+"'")
				}
				want := balance[len(balance)-1]
				balance = balance[:len(balance)-1]
				if want != op[0] {
					return lx.errAt(p, "unexpected '"+op+"', expected '"+string(want)+"'")
				}
			}
			lx.toks = append(lx.toks, token{kind: tOp, off: p, val: op})
			p += len(op)
		}
	}
}

func (lx *lexer) endTag(kind tokKind, off, end int) {
	lx.toks = append(lx.toks, token{kind: kind, off: off})
	lx.pos = end
	lx.starts = lx.src[end-1] == '\n'
}

func isDigitBase(c byte, base int) bool {
	switch base {
	case 2:
		return c == '0' || c == '1'
	case 8:
		return c >= '0' && c <= '7'
	case 16:
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
	}
	return c >= '0' && c <= '9'
}

// digits scans `(_?d)*` after a first digit (allowUnderscore) or `(d+_)*d+`.
func scanDigits(s string, p, base int) int {
	for p < len(s) {
		if isDigitBase(s[p], base) {
			p++
			continue
		}
		if s[p] == '_' && p+1 < len(s) && isDigitBase(s[p+1], base) && p > 0 && isDigitBase(s[p-1], base) {
			p++
			continue
		}
		break
	}
	return p
}

// number lexes jinja2's float_re or integer_re at p.
func (lx *lexer) number(p int) (int, error) {
	src := lx.src
	// prefixed integers
	if src[p] == '0' && p+1 < len(src) {
		base := 0
		switch src[p+1] {
		case 'b', 'B':
			base = 2
		case 'o', 'O':
			base = 8
		case 'x', 'X':
			base = 16
		}
		if base != 0 {
			q := p + 2
			if q < len(src) && src[q] == '_' {
				q++
			}
			if q < len(src) && isDigitBase(src[q], base) {
				end := scanDigits(src, q, base)
				text := strings.ReplaceAll(src[p+2:end], "_", "")
				v, err := strconv.ParseInt(text, base, 64)
				if err != nil {
					return 0, lx.errAt(p, "integer literal too large")
				}
				lx.toks = append(lx.toks, token{kind: tInt, off: p, val: src[p:end], ival: v})
				return end, nil
			}
		}
	}
	intEnd := scanDigits(src, p, 10)
	// float: (digits)(.digits)?e[+-]?digits | (digits).digits, not right after a '.'
	if p == 0 || src[p-1] != '.' {
		q := intEnd
		isFloat := false
		if q+1 < len(src) && src[q] == '.' && isDigitBase(src[q+1], 10) {
			q = scanDigits(src, q+1, 10)
			isFloat = true
		}
		if q < len(src) && (src[q] == 'e' || src[q] == 'E') {
			e := q + 1
			if e < len(src) && (src[e] == '+' || src[e] == '-') {
				e++
			}
			if e < len(src) && isDigitBase(src[e], 10) {
				q = scanDigits(src, e, 10)
				isFloat = true
			}
		}
		if isFloat {
			text := strings.ReplaceAll(src[p:q], "_", "")
			f, err := strconv.ParseFloat(text, 64)
			if err != nil && !math.IsInf(f, 0) {
				return 0, lx.errAt(p, "invalid float literal")
			}
			lx.toks = append(lx.toks, token{kind: tFloat, off: p, val: src[p:q], fval: f})
			return q, nil
		}
	}
	end := intEnd
	if src[p] == '0' {
		// 0(_?0)*: a leading zero only continues with zeros
		end = p + 1
		for end < len(src) {
			if src[end] == '0' {
				end++
			} else if src[end] == '_' && end+1 < len(src) && src[end+1] == '0' {
				end += 2
			} else {
				break
			}
		}
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(src[p:end], "_", ""), 10, 64)
	if err != nil {
		return 0, lx.errAt(p, "integer literal too large")
	}
	lx.toks = append(lx.toks, token{kind: tInt, off: p, val: src[p:end], ival: v})
	return end, nil
}

// str lexes a quoted string at p and decodes Python's escapes (jinja2 decodes
// with "unicode-escape": unknown escapes stay as they are).
func (lx *lexer) str(p int) (int, error) {
	src := lx.src
	q := src[p]
	var b strings.Builder
	i := p + 1
	for {
		if i >= len(src) {
			return 0, lx.errAt(p, "unterminated string")
		}
		c := src[i]
		if c == q {
			lx.toks = append(lx.toks, token{kind: tString, off: p, val: b.String()})
			return i + 1, nil
		}
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(src) {
			return 0, lx.errAt(p, "unterminated string")
		}
		e := src[i+1]
		i += 2
		switch e {
		case '\n':
		case '\\':
			b.WriteByte('\\')
		case '\'':
			b.WriteByte('\'')
		case '"':
			b.WriteByte('"')
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'f':
			b.WriteByte(12)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte(11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(e - '0')
			for k := 0; k < 2 && i < len(src) && src[i] >= '0' && src[i] <= '7'; k++ {
				v = v*8 + int(src[i]-'0')
				i++
			}
			b.WriteRune(rune(v))
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(src) {
				return 0, lx.errAt(p, "truncated \\"+string(e)+" escape")
			}
			v, err := strconv.ParseUint(src[i:i+n], 16, 32)
			if err != nil || !allHex(src[i:i+n]) {
				return 0, lx.errAt(p, "truncated \\"+string(e)+" escape")
			}
			if v > unicode.MaxRune {
				return 0, lx.errAt(p, "illegal Unicode character")
			}
			b.WriteRune(rune(v))
			i += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigitBase(s[i], 16) {
			return false
		}
	}
	return true
}
