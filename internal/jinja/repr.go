package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// str is Python's str(v) as jinja2 prints it: Undefined prints as "",
// strings as themselves, everything else as its repr.
func (r *renderer) str(off int, v Value) (string, error) {
	switch v.kind {
	case KindString:
		return v.s, nil
	case KindUndefined:
		return "", nil
	case KindNone:
		return "None", nil
	case KindBool:
		if v.i != 0 {
			return "True", nil
		}
		return "False", nil
	case KindInt:
		return formatInt(v.i), nil
	case KindFloat:
		return formatFloat(v.f), nil
	}
	return r.repr(off, v)
}

// repr is Python's repr(v).
func (r *renderer) repr(off int, v Value) (string, error) {
	var b strings.Builder
	w := reprWriter{r: r, off: off, b: &b}
	if err := w.write(v, 0); err != nil {
		return "", err
	}
	if err := r.charge(off, int64(b.Len())); err != nil {
		return "", err
	}
	return b.String(), nil
}

type reprWriter struct {
	r        *renderer
	off      int
	b        *strings.Builder
	visiting []*Dict // namespace attribute dicts being printed (cycles print as {...})
}

func (w *reprWriter) write(v Value, depth int) error {
	if depth > 2*maxValueDepth {
		return w.r.limit(w.off, LimitNesting, 2*maxValueDepth)
	}
	if int64(w.b.Len()) > w.r.lim.Alloc-w.r.alloc {
		// the repr of a large value is refused as it grows
		return w.r.limit(w.off, LimitAlloc, w.r.lim.Alloc)
	}
	b := w.b
	switch v.kind {
	case KindString:
		if v.isMarkup() {
			b.WriteString("Markup(" + reprString(v.s) + ")")
			return nil
		}
		b.WriteString(reprString(v.s))
	case KindUndefined:
		b.WriteString("Undefined")
	case KindNone, KindBool, KindInt, KindFloat:
		s, _ := w.r.str(w.off, v)
		b.WriteString(s)
	case KindList:
		l := v.list()
		if l.gen != "" {
			b.WriteString("<" + l.gen + " object>")
			return nil
		}
		if l.rng != "" {
			b.WriteString(l.rng)
			return nil
		}
		open, close := "[", "]"
		if l.tuple {
			open, close = "(", ")"
		}
		b.WriteString(open)
		for i, it := range l.items {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := w.write(it, depth+1); err != nil {
				return err
			}
		}
		if l.tuple && len(l.items) == 1 {
			b.WriteByte(',')
		}
		b.WriteString(close)
	case KindDict:
		return w.writeDict(v.dict(), depth)
	case KindNamespace:
		b.WriteString("<Namespace ")
		if err := w.writeDict(v.p.(*Namespace).attrs, depth); err != nil {
			return err
		}
		b.WriteString(">")
	case KindCallable:
		switch f := v.p.(type) {
		case *macro:
			b.WriteString("<Macro " + reprString(f.def.name) + ">")
		case *builtin:
			b.WriteString("<function " + f.name + ">")
		case *boundMethod:
			b.WriteString("<built-in method " + f.name + " of " + f.recv.typeName() + " object>")
		case *loopObj:
			b.WriteString("<LoopContext " + strconv.Itoa(f.index+1) + "/" + strconv.Itoa(len(f.items)) + ">")
		case *joiner:
			b.WriteString("<jinja2.utils.Joiner object>")
		default:
			b.WriteString("<function>")
		}
	case KindObject:
		switch f := v.p.(type) {
		case *loopObj:
			b.WriteString("<LoopContext " + strconv.Itoa(f.index+1) + "/" + strconv.Itoa(len(f.items)) + ">")
		case *cycler:
			b.WriteString("<jinja2.utils.Cycler object>")
		default:
			b.WriteString("<object>")
		}
	}
	return nil
}

func (w *reprWriter) writeDict(d *Dict, depth int) error {
	for _, p := range w.visiting {
		if p == d {
			w.b.WriteString("{...}")
			return nil
		}
	}
	w.visiting = append(w.visiting, d)
	defer func() { w.visiting = w.visiting[:len(w.visiting)-1] }()
	w.b.WriteByte('{')
	for i := range d.keys {
		if i > 0 {
			w.b.WriteString(", ")
		}
		if err := w.write(d.keys[i], depth+1); err != nil {
			return err
		}
		w.b.WriteString(": ")
		if err := w.write(d.vals[i], depth+1); err != nil {
			return err
		}
	}
	w.b.WriteByte('}')
	return nil
}

func formatInt(i int64) string { return strconv.FormatInt(i, 10) }

// formatFloat is Python's repr(float): the shortest digits that round-trip,
// fixed notation for exponents -5 < e < 16, otherwise d.ddde±XX.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	e := strings.IndexByte(s, 'e')
	mant, expStr := s[:e], s[e+1:]
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp >= -4 && exp < 16 {
		decpt := exp + 1
		switch {
		case decpt <= 0:
			out = "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			out = digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			out = digits[:decpt] + "." + digits[decpt:]
		}
	} else {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		es := strconv.Itoa(exp)
		if len(es) < 2 {
			es = "0" + es
		}
		out += "e" + sign + es
	}
	if neg {
		out = "-" + out
	}
	return out
}

// reprString is Python's repr(str).
func reprString(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte(quote)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == quote || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c == '\t':
				b.WriteString(`\t`)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\r':
				b.WriteString(`\r`)
			case c < ' ' || c == 0x7f:
				b.WriteString(`\x`)
				b.WriteString(hex2(int(c)))
			default:
				b.WriteByte(c)
			}
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString(`\x`)
			b.WriteString(hex2(int(c)))
			i++
			continue
		}
		i += n
		switch {
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			b.WriteString(`\x` + hex2(int(r)))
		case r <= 0xffff:
			b.WriteString(`\u` + hexN(int(r), 4))
		default:
			b.WriteString(`\U` + hexN(int(r), 8))
		}
	}
	b.WriteByte(quote)
	return b.String()
}

func hex2(v int) string { return hexN(v, 2) }

func hexN(v, n int) string {
	s := strconv.FormatInt(int64(v), 16)
	for len(s) < n {
		s = "0" + s
	}
	return s
}
