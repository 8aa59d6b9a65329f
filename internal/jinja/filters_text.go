package jinja

// Filters over text: case, whitespace, escaping, wrapping, formatting.

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

func filterCenter(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "center", args, kw, 0, "width")
	if err != nil {
		return Value{}, err
	}
	width := int64(80)
	if got&1 != 0 {
		if width, err = r.wantInt(off, "center", a[0]); err != nil {
			return Value{}, err
		}
	}
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	return r.pad(off, s, width, " ", "center")
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&#39;", `"`, "&#34;")

// filterEscape is escape (e): HTML-escaped Markup; Markup stays as it is.
func filterEscape(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	if v.isMarkup() {
		return v, nil
	}
	return filterForceEscape(r, off, v, args, kw)
}

func filterForceEscape(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	e, err := r.result(off, htmlEscaper.Replace(s))
	return markup(e.s), err
}

// filterSafe is safe: the value as Markup (a string the + operator does not
// escape, but whose other operand it escapes, like markupsafe's).
func filterSafe(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	return markup(s), nil
}

func filterFormat(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	if len(args) > 0 && len(kw) > 0 {
		return Value{}, r.errorf(off, "can't handle positional and keyword arguments at the same time")
	}
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	var fa Value
	if len(kw) > 0 {
		d := NewDict()
		for _, k := range kw {
			d.Set(k.name, k.v)
		}
		fa = d.Value()
	} else {
		fa = listValue(args, true)
	}
	return r.printf(off, s, fa)
}

func filterIndent(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "indent", args, kw, 0, "width", "first", "blank")
	if err != nil {
		return Value{}, err
	}
	s, err := r.strOperand(off, "indent", v)
	if err != nil {
		return Value{}, err
	}
	ind := "    "
	if got&1 != 0 {
		switch a[0].kind {
		case KindString:
			ind = a[0].s
		default:
			w, err := r.wantInt(off, "indent", a[0])
			if err != nil {
				return Value{}, err
			}
			if w > 1<<16 {
				return Value{}, r.limit(off, LimitAlloc, r.lim.Alloc)
			}
			ind = strings.Repeat(" ", max(int(w), 0))
		}
	}
	first := got&2 != 0 && a[1].truth()
	blank := got&4 != 0 && a[2].truth()
	lines := splitLines(s+"\n", false)
	if err := r.charge(off, int64(len(s)+len(lines)*(len(ind)+1))); err != nil {
		return Value{}, err
	}
	var b strings.Builder
	if blank {
		b.WriteString(strings.Join(lines, "\n"+ind))
	} else {
		b.WriteString(lines[0])
		for _, l := range lines[1:] {
			b.WriteByte('\n')
			if l != "" {
				b.WriteString(ind)
			}
			b.WriteString(l)
		}
	}
	out := b.String()
	if first {
		out = ind + out
	}
	return String(out), nil
}

func filterReplace(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "replace", args, kw, 2, "old", "new", "count")
	if err != nil {
		return Value{}, err
	}
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	old, err := r.str(off, a[0])
	if err != nil {
		return Value{}, err
	}
	nw, err := r.str(off, a[1])
	if err != nil {
		return Value{}, err
	}
	count := int64(-1)
	if got&4 != 0 && a[2].kind != KindNone {
		if count, err = r.wantInt(off, "replace", a[2]); err != nil {
			return Value{}, err
		}
	}
	return r.replace(off, s, old, nw, count)
}

var tagRe = regexp.MustCompile(`(?s)<!--.*?-->|<[^>]*>`)

func filterStriptags(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	s = tagRe.ReplaceAllString(s, "")
	s = strings.Join(strings.FieldsFunc(s, isPySpace), " ")
	for _, e := range [][2]string{{"&lt;", "<"}, {"&gt;", ">"}, {"&#34;", `"`}, {"&#39;", "'"}, {"&quot;", `"`}, {"&amp;", "&"}} {
		s = strings.ReplaceAll(s, e[0], e[1])
	}
	return r.result(off, s)
}

// jinjaTitle is jinja2's title filter: words split at runs of whitespace and
// -({[<, each capitalized with the rest lowercased.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, c := range s {
		if isPySpace(c) || strings.ContainsRune("-({[<", c) {
			b.WriteRune(c)
			start = true
			continue
		}
		if start {
			b.WriteString(upperCaser.String(string(c)))
			start = false
		} else {
			b.WriteString(lowerCaser.String(string(c)))
		}
	}
	return b.String()
}

func filterTrim(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "trim", args, kw, 0, "chars")
	if err != nil {
		return Value{}, err
	}
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	var chars *string
	if got&1 != 0 && a[0].kind != KindNone {
		c, err := r.wantStr(off, "trim", a[0])
		if err != nil {
			return Value{}, err
		}
		chars = &c
	}
	return String(pyStrip(s, "strip", chars)), nil
}

func filterTruncate(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "truncate", args, kw, 0, "length", "killwords", "end", "leeway")
	if err != nil {
		return Value{}, err
	}
	length, leeway := int64(255), int64(5)
	end := "..."
	if got&1 != 0 {
		if length, err = r.wantInt(off, "truncate", a[0]); err != nil {
			return Value{}, err
		}
	}
	if got&4 != 0 {
		if end, err = r.str(off, a[2]); err != nil {
			return Value{}, err
		}
	}
	if got&8 != 0 && a[3].kind != KindNone {
		if leeway, err = r.wantInt(off, "truncate", a[3]); err != nil {
			return Value{}, err
		}
	}
	if length < int64(runeLen(end)) || leeway < 0 {
		return Value{}, r.errorf(off, "expected length >= %d, got %d", runeLen(end), length)
	}
	// jinja2 takes len() of whatever it gets and returns it unchanged when
	// short enough; only a long string is cut.
	n, err := filterLength(r, off, v, nil, nil)
	if err != nil {
		return Value{}, err
	}
	if n.i <= length || n.i-length <= leeway {
		return v, nil
	}
	if v.kind != KindString {
		return Value{}, r.errorf(off, "'%s' object has no attribute 'rsplit'", v.typeName())
	}
	s := v.s
	chars := []rune(s)
	cut := string(chars[:length-int64(runeLen(end))])
	if got&2 != 0 && a[1].truth() {
		return r.result(off, cut+end)
	}
	if i := strings.LastIndexByte(cut, ' '); i >= 0 {
		cut = cut[:i]
	}
	return r.result(off, cut+end)
}

func filterURLEncode(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	enc := func(s string, safe string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.-~"+safe, c) >= 0 {
				b.WriteByte(c)
			} else {
				b.WriteString("%" + strings.ToUpper(hex2(int(c))))
			}
		}
		return b.String()
	}
	var pairs [][2]Value
	switch v.kind {
	case KindString:
		return r.result(off, enc(v.s, "/"))
	case KindDict:
		d := v.dict()
		for i := range d.keys {
			pairs = append(pairs, [2]Value{d.keys[i], d.vals[i]})
		}
	default:
		items, err := r.iterable(off, v)
		if err != nil {
			return Value{}, err
		}
		for _, it := range items {
			p, err := r.unpack(off, it, 2)
			if err != nil {
				return Value{}, err
			}
			pairs = append(pairs, [2]Value{p[0], p[1]})
		}
	}
	var parts []string
	for _, p := range pairs {
		k, err := r.str(off, p[0])
		if err != nil {
			return Value{}, err
		}
		val, err := r.str(off, p[1])
		if err != nil {
			return Value{}, err
		}
		parts = append(parts, strings.ReplaceAll(enc(k, ""), "%20", "+")+"="+strings.ReplaceAll(enc(val, ""), "%20", "+"))
	}
	return r.result(off, strings.Join(parts, "&"))
}

func filterWordcount(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	n := 0
	inWord := false
	for _, c := range s {
		w := c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c)
		if w && !inWord {
			n++
		}
		inWord = w
	}
	return Int(int64(n)), nil
}

func filterWordwrap(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "wordwrap", args, kw, 0, "width", "break_long_words", "wrapstring", "break_on_hyphens")
	if err != nil {
		return Value{}, err
	}
	s, err := r.strOperand(off, "wordwrap", v)
	if err != nil {
		return Value{}, err
	}
	width := int64(79)
	if got&1 != 0 {
		if width, err = r.wantInt(off, "wordwrap", a[0]); err != nil {
			return Value{}, err
		}
	}
	if width <= 0 {
		return Value{}, r.errorf(off, "invalid width %d (must be > 0)", width)
	}
	wrap := "\n"
	if got&4 != 0 && a[2].kind != KindNone {
		if wrap, err = r.str(off, a[2]); err != nil {
			return Value{}, err
		}
	}
	var out []string
	for _, para := range splitLines(s, false) {
		words := strings.FieldsFunc(para, isPySpace)
		line := ""
		for _, w := range words {
			if line != "" && int64(runeLen(line)+1+runeLen(w)) > width {
				out = append(out, line)
				line = w
			} else if line == "" {
				line = w
			} else {
				line += " " + w
			}
		}
		out = append(out, line)
	}
	return r.result(off, strings.Join(out, wrap))
}

func filterXMLAttr(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	if v.kind != KindDict {
		return Value{}, r.errorf(off, "xmlattr needs a mapping")
	}
	d := v.dict()
	var parts []string
	for i := range d.keys {
		if d.vals[i].kind == KindNone || d.vals[i].kind == KindUndefined {
			continue
		}
		k, err := r.str(off, d.keys[i])
		if err != nil {
			return Value{}, err
		}
		if strings.ContainsAny(k, " /\t\n\f>=") {
			return Value{}, r.errorf(off, "invalid character in attribute name: %s", reprString(k))
		}
		val, err := r.str(off, d.vals[i])
		if err != nil {
			return Value{}, err
		}
		parts = append(parts, htmlEscaper.Replace(k)+`="`+htmlEscaper.Replace(val)+`"`)
	}
	s := strings.Join(parts, " ")
	if s != "" && !(len(args) > 0 && !args[0].truth()) {
		s = " " + s
	}
	return r.result(off, s)
}

func filterFilesize(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "filesizeformat", args, kw, 0, "binary")
	if err != nil {
		return Value{}, err
	}
	var bytes float64
	switch v.kind {
	case KindString:
		f, ok := pyFloat(v.s)
		if !ok {
			return Value{}, r.errorf(off, "could not convert string to float: %s", reprString(v.s))
		}
		bytes = f
	default:
		if !v.isNumber() {
			return Value{}, r.errorf(off, "float() argument must be a string or a real number, not '%s'", v.typeName())
		}
		bytes, _ = v.num()
	}
	binary := got&1 != 0 && a[0].truth()
	base := 1000.0
	prefixes := []string{"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"}
	if binary {
		base = 1024
		prefixes = []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"}
	}
	if bytes == 1 {
		return String("1 Byte"), nil
	}
	if bytes < base {
		return String(formatInt(int64(bytes)) + " Bytes"), nil
	}
	unit := base
	for i, p := range prefixes {
		unit = math.Pow(base, float64(i+2))
		if bytes < unit {
			return String(strconv.FormatFloat(base*bytes/unit, 'f', 1, 64) + " " + p), nil
		}
	}
	return String(strconv.FormatFloat(base*bytes/unit, 'f', 1, 64) + " " + prefixes[len(prefixes)-1]), nil
}
