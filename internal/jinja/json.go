package jinja

import (
	"math"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonOptions are json.dumps' arguments as transformers' tojson passes them.
type jsonOptions struct {
	ensureASCII bool
	indent      string
	indented    bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

// toJSON is Python's json.dumps(v, ...) with transformers' defaults
// (ensure_ascii=False).
func (r *renderer) toJSON(off int, v Value, o jsonOptions) (string, error) {
	w := jsonWriter{r: r, off: off, o: o}
	if err := w.value(v, 0); err != nil {
		return "", err
	}
	if err := r.charge(off, int64(w.b.Len())); err != nil {
		return "", err
	}
	return w.b.String(), nil
}

type jsonWriter struct {
	r   *renderer
	off int
	o   jsonOptions
	b   strings.Builder
}

func (w *jsonWriter) newline(depth int) {
	if !w.o.indented {
		return
	}
	w.b.WriteByte('\n')
	for i := 0; i < depth; i++ {
		w.b.WriteString(w.o.indent)
	}
}

func (w *jsonWriter) value(v Value, depth int) error {
	if int64(w.b.Len()) > w.r.lim.Alloc-w.r.alloc {
		return w.r.limit(w.off, LimitAlloc, w.r.lim.Alloc)
	}
	if depth > maxValueDepth {
		return w.r.limit(w.off, LimitNesting, maxValueDepth)
	}
	switch v.kind {
	case KindNone:
		w.b.WriteString("null")
	case KindBool:
		if v.i != 0 {
			w.b.WriteString("true")
		} else {
			w.b.WriteString("false")
		}
	case KindInt:
		w.b.WriteString(formatInt(v.i))
	case KindFloat:
		w.b.WriteString(jsonFloat(v.f))
	case KindString:
		writeJSONString(&w.b, v.s, w.o.ensureASCII)
	case KindList:
		l := v.list()
		if l.gen != "" || l.rng != "" {
			return w.r.errorf(w.off, "Object of type %s is not JSON serializable", v.typeName())
		}
		if len(l.items) == 0 {
			w.b.WriteString("[]")
			return nil
		}
		w.b.WriteByte('[')
		for i, it := range l.items {
			if i > 0 {
				w.b.WriteString(w.o.itemSep)
			}
			w.newline(depth + 1)
			if err := w.value(it, depth+1); err != nil {
				return err
			}
		}
		w.newline(depth)
		w.b.WriteByte(']')
	case KindDict:
		d := v.dict()
		if len(d.keys) == 0 {
			w.b.WriteString("{}")
			return nil
		}
		keys := make([]string, len(d.keys))
		for i, k := range d.keys {
			switch k.kind {
			case KindString:
				keys[i] = k.s
			case KindInt:
				keys[i] = formatInt(k.i)
			case KindFloat:
				keys[i] = jsonFloat(k.f)
			case KindBool:
				keys[i] = map[bool]string{true: "true", false: "false"}[k.i != 0]
			case KindNone:
				keys[i] = "null"
			default:
				return w.r.errorf(w.off, "keys must be str, int, float, bool or None, not %s", k.typeName())
			}
		}
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		if w.o.sortKeys {
			for _, k := range d.keys {
				if k.kind != d.keys[0].kind && !(k.isNumber() && d.keys[0].isNumber()) {
					return w.r.errorf(w.off, "'<' not supported between instances of '%s' and '%s'", k.typeName(), d.keys[0].typeName())
				}
			}
			keyVals := make([]Value, len(d.keys))
			copy(keyVals, d.keys)
			idx := make([]Value, len(order))
			for i := range idx {
				idx[i] = Int(int64(i))
			}
			sorted, err := w.r.sortValues(w.off, idx, keyVals, false)
			if err != nil {
				return err
			}
			for i, s := range sorted {
				order[i] = int(s.i)
			}
		}
		w.b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				w.b.WriteString(w.o.itemSep)
			}
			w.newline(depth + 1)
			writeJSONString(&w.b, keys[i], w.o.ensureASCII)
			w.b.WriteString(w.o.keySep)
			if err := w.value(d.vals[i], depth+1); err != nil {
				return err
			}
		}
		w.newline(depth)
		w.b.WriteByte('}')
	default:
		return w.r.errorf(w.off, "Object of type %s is not JSON serializable", v.typeName())
	}
	return nil
}

// jsonFloat is float.__repr__ as json.dumps writes it (NaN and Infinity
// allowed, like Python's default).
func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return formatFloat(f)
}

const hexDigits = "0123456789abcdef"

// writeJSONString quotes s like Python's json (py_encode_basestring or, with
// ensureASCII, py_encode_basestring_ascii).
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	u4 := func(c rune) {
		b.WriteString(`\u`)
		b.WriteByte(hexDigits[c>>12&0xf])
		b.WriteByte(hexDigits[c>>8&0xf])
		b.WriteByte(hexDigits[c>>4&0xf])
		b.WriteByte(hexDigits[c&0xf])
	}
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < 0x7f {
			i++
			continue
		}
		if c >= utf8.RuneSelf && !ensureASCII {
			i++
			continue
		}
		if c == 0x7f && !ensureASCII {
			i++
			continue
		}
		b.WriteString(s[start:i])
		switch c {
		case '"':
			b.WriteString(`\"`)
			i++
		case '\\':
			b.WriteString(`\\`)
			i++
		case '\n':
			b.WriteString(`\n`)
			i++
		case '\r':
			b.WriteString(`\r`)
			i++
		case '\t':
			b.WriteString(`\t`)
			i++
		case '\b':
			b.WriteString(`\b`)
			i++
		case '\f':
			b.WriteString(`\f`)
			i++
		default:
			if c < utf8.RuneSelf {
				u4(rune(c))
				i++
				break
			}
			r, n := utf8.DecodeRuneInString(s[i:])
			i += n
			if r >= 0x10000 {
				r1, r2 := utf16.EncodeRune(r)
				u4(r1)
				u4(r2)
			} else {
				u4(r)
			}
		}
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// MarshalJSON writes v as json.dumps would (compact separators, non-ASCII
// kept): for handing rendered variables to other engines in tests and
// logs. Values JSON cannot hold (Undefined, functions) are an error.
func (v Value) MarshalJSON() ([]byte, error) {
	r := &renderer{t: &Template{lines: newLineIndex("")}, lim: DefaultLimits.withDefaults()}
	s, err := r.toJSON(0, v, jsonOptions{itemSep: ",", keySep: ":"})
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}
