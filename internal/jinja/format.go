package jinja

import (
	"strconv"
	"strings"
)

// strFormat is Python's str.format (the sandbox allows it): {} {0} {name},
// .attr and [key] lookups, !r !s !a, and format specs.
func (r *renderer) strFormat(off int, f string, args []Value, kw []kwArg) (Value, error) {
	var b strings.Builder
	auto := 0
	manual := false
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c == '}' {
			if i+1 < len(f) && f[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return Value{}, r.errorf(off, "single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(f) && f[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		depth := 1
		j := i + 1
		for ; j < len(f) && depth > 0; j++ {
			switch f[j] {
			case '{':
				depth++
			case '}':
				depth--
			}
		}
		if depth != 0 {
			return Value{}, r.errorf(off, "single '{' encountered in format string")
		}
		field := f[i+1 : j-1]
		i = j - 1
		name, conv, spec := field, "", ""
		if k := strings.IndexAny(field, "!:"); k >= 0 {
			name = field[:k]
			rest := field[k:]
			if rest[0] == '!' {
				if len(rest) < 2 {
					return Value{}, r.errorf(off, "end of string while looking for conversion specifier")
				}
				conv = rest[1:2]
				rest = rest[2:]
				if rest != "" && rest[0] != ':' {
					return Value{}, r.errorf(off, "expected ':' after conversion specifier")
				}
			}
			if rest != "" {
				spec = rest[1:]
			}
		}
		if strings.ContainsAny(spec, "{}") {
			return Value{}, r.errorf(off, "nested format fields are not supported")
		}
		// the argument name and its .attr / [key] accessors
		k := strings.IndexAny(name, ".[")
		if k < 0 {
			k = len(name)
		}
		first, access := name[:k], name[k:]
		var v Value
		switch {
		case first == "":
			if manual {
				return Value{}, r.errorf(off, "cannot switch from manual field specification to automatic field numbering")
			}
			if auto >= len(args) {
				return Value{}, r.errorf(off, "replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case first[0] >= '0' && first[0] <= '9':
			if auto > 0 {
				return Value{}, r.errorf(off, "cannot switch from automatic field numbering to manual field specification")
			}
			manual = true
			n, err := strconv.Atoi(first)
			if err != nil || n >= len(args) {
				return Value{}, r.errorf(off, "replacement index %s out of range for positional args tuple", first)
			}
			v = args[n]
		default:
			found := false
			for _, a := range kw {
				if a.name == first {
					v, found = a.v, true
				}
			}
			if !found {
				return Value{}, r.errorf(off, "KeyError: %s", reprString(first))
			}
		}
		for access != "" {
			var err error
			if access[0] == '.' {
				end := strings.IndexAny(access[1:], ".[")
				if end < 0 {
					end = len(access) - 1
				}
				if v, err = r.getattr(off, v, access[1:1+end]); err != nil {
					return Value{}, err
				}
				access = access[1+end:]
				continue
			}
			end := strings.IndexByte(access, ']')
			if end < 0 {
				return Value{}, r.errorf(off, "missing ']' in format string")
			}
			key := access[1:end]
			var kv Value
			if n, e := strconv.Atoi(key); e == nil {
				kv = Int(int64(n))
			} else {
				kv = String(key)
			}
			if v, err = r.getitem(off, v, kv); err != nil {
				return Value{}, err
			}
			access = access[end+1:]
		}
		switch conv {
		case "":
		case "s":
			s, err := r.str(off, v)
			if err != nil {
				return Value{}, err
			}
			v = String(s)
		case "r", "a":
			s, err := r.repr(off, v)
			if err != nil {
				return Value{}, err
			}
			v = String(s)
		default:
			return Value{}, r.errorf(off, "unknown conversion specifier %s", conv)
		}
		s, err := r.formatSpec(off, v, spec)
		if err != nil {
			return Value{}, err
		}
		b.WriteString(s)
		if int64(b.Len()) > r.lim.Alloc-r.alloc {
			return Value{}, r.limit(off, LimitAlloc, r.lim.Alloc)
		}
	}
	return r.result(off, b.String())
}

// formatSpec is Python's format(v, spec) for str, int, float and bool.
func (r *renderer) formatSpec(off int, v Value, spec string) (string, error) {
	if spec == "" {
		return r.str(off, v)
	}
	p := 0
	fill, align := " ", byte(0)
	if len(spec) >= 2 && strings.IndexByte("<>=^", spec[1]) >= 0 {
		fill, align = spec[:1], spec[1]
		p = 2
	} else if strings.IndexByte("<>=^", spec[0]) >= 0 {
		align = spec[0]
		p = 1
	}
	sign := byte('-')
	if p < len(spec) && strings.IndexByte("+- ", spec[p]) >= 0 {
		sign = spec[p]
		p++
	}
	alt := false
	if p < len(spec) && spec[p] == '#' {
		alt = true
		p++
	}
	if p < len(spec) && spec[p] == '0' && align == 0 {
		fill, align = "0", '='
		p++
	}
	w0 := p
	for p < len(spec) && spec[p] >= '0' && spec[p] <= '9' {
		p++
	}
	width, err := strconv.Atoi(spec[w0:p])
	if err != nil && p > w0 {
		return "", r.errorf(off, "too many decimal digits in format string")
	}
	group := ""
	if p < len(spec) && (spec[p] == ',' || spec[p] == '_') {
		group = spec[p : p+1]
		p++
	}
	prec := -1
	if p < len(spec) && spec[p] == '.' {
		q := p + 1
		for q < len(spec) && spec[q] >= '0' && spec[q] <= '9' {
			q++
		}
		if q == p+1 {
			return "", r.errorf(off, "format specifier missing precision")
		}
		if prec, err = strconv.Atoi(spec[p+1 : q]); err != nil {
			return "", r.errorf(off, "too many decimal digits in format string")
		}
		p = q
	}
	typ := byte(0)
	if p < len(spec) {
		typ = spec[p]
		p++
	}
	if p != len(spec) || width > 1<<20 || prec > 1<<20 {
		return "", r.errorf(off, "invalid format specifier")
	}
	var body, signStr string
	switch v.kind {
	case KindString:
		if typ != 0 && typ != 's' {
			return "", r.errorf(off, "unknown format code '%c' for object of type 'str'", typ)
		}
		body = v.s
		if prec >= 0 && runeLen(body) > prec {
			body = string([]rune(body)[:prec])
		}
		if align == 0 {
			align = '<'
		}
	case KindInt, KindBool, KindFloat:
		if v.kind == KindBool && typ == 0 {
			s, _ := r.str(off, v)
			body = s
			break
		}
		isInt := v.kind != KindFloat
		if isInt && strings.IndexByte("bcdoxXn", typ) >= 0 || isInt && typ == 0 {
			n := v.i
			if n < 0 {
				signStr = "-"
				n = -n
			} else if sign != '-' {
				signStr = string(sign)
			}
			switch typ {
			case 'b':
				body = strconv.FormatUint(uint64(n), 2)
				if alt {
					body = "0b" + body
				}
			case 'o':
				body = strconv.FormatUint(uint64(n), 8)
				if alt {
					body = "0o" + body
				}
			case 'x', 'X':
				body = strconv.FormatUint(uint64(n), 16)
				if alt {
					body = "0x" + body
				}
				if typ == 'X' {
					body = strings.ToUpper(body)
				}
			case 'c':
				body, signStr = string(rune(v.i)), ""
			default:
				body = strconv.FormatUint(uint64(n), 10)
				if group != "" {
					body = groupDigits(body, group)
				}
			}
		} else {
			x, _ := v.num()
			if x < 0 || x == 0 && strconv.FormatFloat(x, 'f', -1, 64)[0] == '-' {
				signStr = "-"
				x = -x
			} else if sign != '-' {
				signStr = string(sign)
			}
			switch typ {
			case 'f', 'F', 'e', 'E', 'g', 'G', '%':
				if prec < 0 {
					prec = 6
				}
				switch typ {
				case '%':
					body = strconv.FormatFloat(x*100, 'f', prec, 64) + "%"
				case 'g', 'G':
					body = formatG(x, prec, alt)
				default:
					body = strconv.FormatFloat(x, typ|0x20, prec, 64)
				}
				if typ == 'F' || typ == 'E' || typ == 'G' {
					body = strings.ToUpper(body)
				}
			case 0, 'n':
				if prec >= 0 {
					body = formatG(x, prec, alt)
					if !strings.ContainsAny(body, ".e") && !strings.Contains(body, "inf") && !strings.Contains(body, "nan") {
						body += ".0"
					}
				} else {
					body = formatFloat(x)
				}
			default:
				return "", r.errorf(off, "unknown format code '%c' for object of type 'float'", typ)
			}
			if group != "" {
				intPart, frac := body, ""
				if k := strings.IndexAny(body, ".e%"); k >= 0 {
					intPart, frac = body[:k], body[k:]
				}
				body = groupDigits(intPart, group) + frac
			}
		}
		if align == 0 {
			align = '>'
		}
	default:
		return "", r.errorf(off, "unsupported format string passed to %s.__format__", v.typeName())
	}
	n := runeLen(body) + len(signStr)
	if n >= width {
		return signStr + body, nil
	}
	padN := width - n
	switch align {
	case '<':
		return signStr + body + strings.Repeat(fill, padN), nil
	case '^':
		return strings.Repeat(fill, padN/2) + signStr + body + strings.Repeat(fill, padN-padN/2), nil
	case '=':
		return signStr + strings.Repeat(fill, padN) + body, nil
	}
	return strings.Repeat(fill, padN) + signStr + body, nil
}

// formatG is C's %g (Python's 'g' presentation type).
func formatG(x float64, prec int, alt bool) string {
	if prec == 0 {
		prec = 1
	}
	s := strconv.FormatFloat(x, 'g', prec, 64)
	if e := strings.IndexByte(s, 'e'); e >= 0 {
		mant, exp := s[:e], s[e+1:]
		if len(exp) == 2 {
			exp = exp[:1] + "0" + exp[1:]
		}
		s = mant + "e" + exp
	}
	return s
}

func groupDigits(s, sep string) string {
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	first := len(s) % 3
	if first > 0 {
		b.WriteString(s[:first])
	}
	for i := first; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}
