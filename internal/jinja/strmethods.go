package jinja

// The methods of str (Python's semantics, code points).

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

var (
	upperCaser = cases.Upper(language.Und)
	lowerCaser = cases.Lower(language.Und)
	foldCaser  = cases.Fold()
)

// window returns s[start:end] in characters plus the byte offset of its start,
// for the optional start/end arguments of find, count, startswith...
func (r *renderer) window(off int, fname, s string, a []Value, got uint64, first int) (string, int, int, error) {
	offs := charOffsets(s)
	n := int64(len(s))
	if offs != nil {
		n = int64(len(offs) - 1)
	}
	start, end := int64(0), n
	var err error
	if got&(1<<first) != 0 && a[first].kind != KindNone {
		if start, err = r.wantInt(off, fname, a[first]); err != nil {
			return "", 0, 0, err
		}
	}
	if got&(1<<(first+1)) != 0 && a[first+1].kind != KindNone {
		if end, err = r.wantInt(off, fname, a[first+1]); err != nil {
			return "", 0, 0, err
		}
	}
	start, end = clampRange(start, end, n)
	if offs == nil {
		return s[start:end], int(start), int(start), nil
	}
	return s[offs[start]:offs[end]], offs[start], int(start), nil
}

// charIndex converts a byte offset in s to a character index.
func charIndex(s string, byteOff int) int { return runeLen(s[:byteOff]) }

func (r *renderer) strMethod(off int, s, name string, args []Value, kw []kwArg) (Value, error) {
	switch name {
	case "upper", "lower", "casefold", "swapcase", "title", "capitalize",
		"isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "istitle", "isupper":
		if _, _, err := r.bind(off, name, args, kw, 0); err != nil {
			return Value{}, err
		}
		return r.strNoArg(off, s, name)
	case "strip", "lstrip", "rstrip":
		a, got, err := r.bind(off, name, args, kw, 0, "chars")
		if err != nil {
			return Value{}, err
		}
		var chars *string
		if got&1 != 0 && a[0].kind != KindNone {
			c, err := r.wantStr(off, name, a[0])
			if err != nil {
				return Value{}, err
			}
			chars = &c
		}
		return String(pyStrip(s, name, chars)), nil
	case "split", "rsplit":
		a, got, err := r.bind(off, name, args, kw, 0, "sep", "maxsplit")
		if err != nil {
			return Value{}, err
		}
		max := int64(-1)
		if got&2 != 0 {
			if max, err = r.wantInt(off, name, a[1]); err != nil {
				return Value{}, err
			}
		}
		var parts []string
		if got&1 != 0 && a[0].kind != KindNone {
			sep, err := r.wantStr(off, name, a[0])
			if err != nil {
				return Value{}, err
			}
			if sep == "" {
				return Value{}, r.errorf(off, "empty separator")
			}
			parts = splitSep(s, sep, max, name == "rsplit")
		} else {
			parts = splitSpace(s, max, name == "rsplit")
		}
		if err := r.chargeList(off, len(parts)); err != nil {
			return Value{}, err
		}
		items := make([]Value, len(parts))
		for i, p := range parts {
			items[i] = String(p)
		}
		return listValue(items, false), nil
	case "splitlines":
		a, got, err := r.bind(off, name, args, kw, 0, "keepends")
		if err != nil {
			return Value{}, err
		}
		parts := splitLines(s, got&1 != 0 && a[0].truth())
		if err := r.chargeList(off, len(parts)); err != nil {
			return Value{}, err
		}
		items := make([]Value, len(parts))
		for i, p := range parts {
			items[i] = String(p)
		}
		return listValue(items, false), nil
	case "startswith", "endswith":
		a, got, err := r.bind(off, name, args, kw, 1, "prefix", "start", "end")
		if err != nil {
			return Value{}, err
		}
		w, _, _, err := r.window(off, name, s, a, got, 1)
		if err != nil {
			return Value{}, err
		}
		var cands []Value
		switch a[0].kind {
		case KindString:
			cands = []Value{a[0]}
		case KindList:
			if !a[0].list().tuple {
				return Value{}, r.errorf(off, "%s first arg must be str or a tuple of str, not list", name)
			}
			cands = a[0].list().items
		default:
			if a[0].kind == KindUndefined {
				return Value{}, r.undefinedError(off, a[0])
			}
			return Value{}, r.errorf(off, "%s first arg must be str or a tuple of str, not %s", name, a[0].typeName())
		}
		for _, c := range cands {
			if c.kind != KindString {
				return Value{}, r.errorf(off, "tuple for %s must only contain str, not %s", name, c.typeName())
			}
			if name == "startswith" && strings.HasPrefix(w, c.s) || name == "endswith" && strings.HasSuffix(w, c.s) {
				return Bool(true), nil
			}
		}
		return Bool(false), nil
	case "find", "rfind", "index", "rindex", "count":
		a, got, err := r.bind(off, name, args, kw, 1, "sub", "start", "end")
		if err != nil {
			return Value{}, err
		}
		sub, err := r.wantStr(off, name, a[0])
		if err != nil {
			return Value{}, err
		}
		w, _, startChar, err := r.window(off, name, s, a, got, 1)
		if err != nil {
			return Value{}, err
		}
		if name == "count" {
			if sub == "" {
				return Int(int64(runeLen(w) + 1)), nil
			}
			return Int(int64(strings.Count(w, sub))), nil
		}
		var i int
		if name == "find" || name == "index" {
			i = strings.Index(w, sub)
		} else {
			i = strings.LastIndex(w, sub)
		}
		if i < 0 {
			if name == "index" || name == "rindex" {
				return Value{}, r.errorf(off, "substring not found")
			}
			return Int(-1), nil
		}
		return Int(int64(startChar + charIndex(w, i))), nil
	case "replace":
		a, got, err := r.bind(off, name, args, kw, 2, "old", "new", "count")
		if err != nil {
			return Value{}, err
		}
		old, err := r.wantStr(off, name, a[0])
		if err != nil {
			return Value{}, err
		}
		nw, err := r.wantStr(off, name, a[1])
		if err != nil {
			return Value{}, err
		}
		count := int64(-1)
		if got&4 != 0 {
			if count, err = r.wantInt(off, name, a[2]); err != nil {
				return Value{}, err
			}
		}
		return r.replace(off, s, old, nw, count)
	case "join":
		a, _, err := r.bind(off, name, args, kw, 1, "iterable")
		if err != nil {
			return Value{}, err
		}
		items, err := r.iterItems(off, a[0])
		if err != nil {
			return Value{}, err
		}
		if err := r.iterate(off, int64(len(items))); err != nil {
			return Value{}, err
		}
		n := len(s) * max(len(items)-1, 0)
		parts := make([]string, len(items))
		for i, it := range items {
			if it.kind != KindString {
				return Value{}, r.errorf(off, "sequence item %d: expected str instance, %s found", i, it.typeName())
			}
			parts[i] = it.s
			n += len(it.s)
		}
		if err := r.charge(off, int64(n)); err != nil {
			return Value{}, err
		}
		return String(strings.Join(parts, s)), nil
	case "center", "ljust", "rjust":
		a, got, err := r.bind(off, name, args, kw, 1, "width", "fillchar")
		if err != nil {
			return Value{}, err
		}
		width, err := r.wantInt(off, name, a[0])
		if err != nil {
			return Value{}, err
		}
		fill := " "
		if got&2 != 0 {
			if fill, err = r.wantStr(off, name, a[1]); err != nil {
				return Value{}, err
			}
			if runeLen(fill) != 1 {
				return Value{}, r.errorf(off, "the fill character must be exactly one character long")
			}
		}
		return r.pad(off, s, width, fill, name)
	case "zfill":
		a, _, err := r.bind(off, name, args, kw, 1, "width")
		if err != nil {
			return Value{}, err
		}
		width, err := r.wantInt(off, name, a[0])
		if err != nil {
			return Value{}, err
		}
		n := int64(runeLen(s))
		if width <= n {
			return String(s), nil
		}
		if err := r.charge(off, width); err != nil {
			return Value{}, err
		}
		sign := ""
		if s != "" && (s[0] == '+' || s[0] == '-') {
			sign, s = s[:1], s[1:]
		}
		return String(sign + strings.Repeat("0", int(width-n)) + s), nil
	case "partition", "rpartition":
		a, _, err := r.bind(off, name, args, kw, 1, "sep")
		if err != nil {
			return Value{}, err
		}
		sep, err := r.wantStr(off, name, a[0])
		if err != nil {
			return Value{}, err
		}
		if sep == "" {
			return Value{}, r.errorf(off, "empty separator")
		}
		var i int
		if name == "partition" {
			i = strings.Index(s, sep)
		} else {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "partition" {
				return listValue([]Value{String(s), String(""), String("")}, true), nil
			}
			return listValue([]Value{String(""), String(""), String(s)}, true), nil
		}
		return listValue([]Value{String(s[:i]), String(sep), String(s[i+len(sep):])}, true), nil
	case "removeprefix", "removesuffix":
		a, _, err := r.bind(off, name, args, kw, 1, "affix")
		if err != nil {
			return Value{}, err
		}
		x, err := r.wantStr(off, name, a[0])
		if err != nil {
			return Value{}, err
		}
		if name == "removeprefix" {
			return String(strings.TrimPrefix(s, x)), nil
		}
		return String(strings.TrimSuffix(s, x)), nil
	case "format":
		return r.strFormat(off, s, args, kw)
	}
	return Value{}, r.errorf(off, "'str' object has no method '%s'", name)
}

func (r *renderer) strNoArg(off int, s, name string) (Value, error) {
	switch name {
	case "upper":
		if isASCII(s) {
			return r.result(off, strings.ToUpper(s))
		}
		return r.result(off, upperCaser.String(s))
	case "lower":
		if isASCII(s) {
			return r.result(off, strings.ToLower(s))
		}
		return r.result(off, lowerCaser.String(s))
	case "casefold":
		return r.result(off, foldCaser.String(s))
	case "swapcase":
		return r.result(off, strings.Map(func(c rune) rune {
			switch {
			case unicode.IsUpper(c):
				return unicode.ToLower(c)
			case unicode.IsLower(c):
				return unicode.ToUpper(c)
			}
			return c
		}, s))
	case "title":
		return r.result(off, pyTitle(s))
	case "capitalize":
		return r.result(off, pyCapitalize(s))
	}
	if s == "" {
		return Bool(false), nil
	}
	all := func(f func(rune) bool) Value {
		for _, c := range s {
			if !f(c) {
				return Bool(false)
			}
		}
		return Bool(true)
	}
	switch name {
	case "isalnum":
		return all(func(c rune) bool { return unicode.IsLetter(c) || unicode.IsNumber(c) }), nil
	case "isalpha":
		return all(unicode.IsLetter), nil
	case "isascii":
		return Bool(isASCII(s)), nil
	case "isdecimal", "isdigit":
		return all(unicode.IsDigit), nil
	case "isnumeric":
		return all(unicode.IsNumber), nil
	case "isspace":
		return all(isPySpace), nil
	case "islower", "isupper":
		cased := false
		for _, c := range s {
			if unicode.IsUpper(c) || unicode.IsTitle(c) {
				if name == "islower" {
					return Bool(false), nil
				}
				cased = true
			} else if unicode.IsLower(c) {
				if name == "isupper" {
					return Bool(false), nil
				}
				cased = true
			}
		}
		return Bool(cased), nil
	case "istitle":
		return Bool(s == pyTitle(s) && strings.IndexFunc(s, func(c rune) bool { return unicode.IsUpper(c) || unicode.IsTitle(c) }) >= 0), nil
	}
	return Value{}, r.errorf(off, "'str' object has no method '%s'", name)
}

func isCased(c rune) bool { return unicode.IsUpper(c) || unicode.IsLower(c) || unicode.IsTitle(c) }

// pyTitle is Python's str.title: a cased character after an uncased one is
// title-cased, other cased characters lowercased.
func pyTitle(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	prev := false
	for _, c := range s {
		if isCased(c) {
			if prev {
				b.WriteRune(unicode.ToLower(c))
			} else {
				b.WriteRune(unicode.ToTitle(c))
			}
			prev = true
		} else {
			b.WriteRune(c)
			prev = false
		}
	}
	return b.String()
}

// pyCapitalize is Python's str.capitalize.
func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	c, n := utf8.DecodeRuneInString(s)
	rest := s[n:]
	if isASCII(rest) {
		rest = strings.ToLower(rest)
	} else {
		rest = lowerCaser.String(rest)
	}
	return string(unicode.ToTitle(c)) + rest
}

// pyStrip is str.strip/lstrip/rstrip with chars (nil: whitespace).
func pyStrip(s, which string, chars *string) string {
	f := isPySpace
	if chars != nil {
		set := *chars
		f = func(c rune) bool { return strings.ContainsRune(set, c) }
	}
	switch which {
	case "lstrip":
		return strings.TrimLeftFunc(s, f)
	case "rstrip":
		return strings.TrimRightFunc(s, f)
	}
	return strings.TrimFunc(s, f)
}

// splitSep is str.split(sep, maxsplit) and str.rsplit.
func splitSep(s, sep string, max int64, fromRight bool) []string {
	if max < 0 {
		return strings.Split(s, sep)
	}
	if !fromRight {
		return strings.SplitN(s, sep, int(min(max, int64(len(s)+1)))+1)
	}
	var parts []string
	for max > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		parts = append(parts, s[i+len(sep):])
		s = s[:i]
		max--
	}
	parts = append(parts, s)
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return parts
}

// splitSpace is str.split() without a separator: runs of whitespace split,
// leading and trailing whitespace gives no empty strings.
func splitSpace(s string, max int64, fromRight bool) []string {
	if !fromRight {
		var parts []string
		for {
			s = strings.TrimLeftFunc(s, isPySpace)
			if s == "" {
				return parts
			}
			if max >= 0 && int64(len(parts)) == max {
				return append(parts, s)
			}
			i := strings.IndexFunc(s, isPySpace)
			if i < 0 {
				return append(parts, s)
			}
			parts = append(parts, s[:i])
			s = s[i:]
		}
	}
	var rev []string
	for {
		s = strings.TrimRightFunc(s, isPySpace)
		if s == "" {
			break
		}
		if max >= 0 && int64(len(rev)) == max {
			rev = append(rev, s)
			break
		}
		i := strings.LastIndexFunc(s, isPySpace)
		if i < 0 {
			rev = append(rev, s)
			break
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		rev = append(rev, s[i+n:])
		s = s[:i+n]
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// splitLines is str.splitlines.
func splitLines(s string, keep bool) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); {
		c, n := utf8.DecodeRuneInString(s[i:])
		brk := false
		switch c {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			brk = true
		case '\r':
			brk = true
			if i+1 < len(s) && s[i+1] == '\n' {
				n = 2
			}
		}
		if !brk {
			i += n
			continue
		}
		if keep {
			parts = append(parts, s[start:i+n])
		} else {
			parts = append(parts, s[start:i])
		}
		i += n
		start = i
	}
	if start < len(s) {
		parts = append(parts, s[start:])
	}
	return parts
}

// replace is str.replace(old, new, count).
func (r *renderer) replace(off int, s, old, nw string, count int64) (Value, error) {
	n := int64(strings.Count(s, old))
	if old == "" {
		n = int64(runeLen(s) + 1)
	}
	if count >= 0 && count < n {
		n = count
	}
	size := int64(len(s)) + n*(int64(len(nw))-int64(len(old)))
	if err := r.charge(off, size); err != nil {
		return Value{}, err
	}
	if count < 0 {
		return String(strings.ReplaceAll(s, old, nw)), nil
	}
	return String(strings.Replace(s, old, nw, int(min(count, int64(len(s)+1))))), nil
}

// pad is str.center/ljust/rjust.
func (r *renderer) pad(off int, s string, width int64, fill, how string) (Value, error) {
	n := int64(runeLen(s))
	if width <= n {
		return String(s), nil
	}
	if err := r.charge(off, width*int64(len(fill))); err != nil {
		return Value{}, err
	}
	total := width - n
	var left, right int64
	switch how {
	case "ljust":
		right = total
	case "rjust":
		left = total
	default:
		// CPython: left = total/2 + (total & width & 1)
		left = total/2 + (total & width & 1)
		right = total - left
	}
	return String(strings.Repeat(fill, int(left)) + s + strings.Repeat(fill, int(right))), nil
}
