package jinja

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// Methods templates may call on values, as Python's str, list and dict have
// them. The sandbox refuses the ones that change a list or dict.

var strMethods = map[string]bool{
	"capitalize": true, "casefold": true, "center": true, "count": true, "endswith": true, "find": true,
	"format": true, "index": true, "isalnum": true, "isalpha": true, "isascii": true, "isdecimal": true,
	"isdigit": true, "islower": true, "isnumeric": true, "isspace": true, "istitle": true, "isupper": true,
	"join": true, "ljust": true, "lower": true, "lstrip": true, "partition": true, "removeprefix": true,
	"removesuffix": true, "replace": true, "rfind": true, "rindex": true, "rjust": true, "rpartition": true,
	"rsplit": true, "rstrip": true, "split": true, "splitlines": true, "startswith": true, "strip": true,
	"swapcase": true, "title": true, "upper": true, "zfill": true,
}

var listMethods = map[string]bool{"count": true, "index": true, "copy": true}

var dictMethods = map[string]bool{"get": true, "items": true, "keys": true, "values": true, "copy": true}

var unsafeMethods = map[Kind]map[string]bool{
	KindList: {"append": true, "clear": true, "extend": true, "insert": true, "pop": true, "remove": true, "reverse": true, "sort": true},
	KindDict: {"clear": true, "pop": true, "popitem": true, "setdefault": true, "update": true},
}

// methodValue returns obj.name as a bound method when obj's type has it; a
// method that would change the object is an Undefined that refuses to be
// called (jinja2's ImmutableSandboxedEnvironment).
func methodValue(obj Value, name string) (Value, bool) {
	var ok bool
	switch obj.kind {
	case KindString:
		ok = strMethods[name]
	case KindList:
		ok = listMethods[name]
	case KindDict:
		ok = dictMethods[name]
	}
	if ok {
		return Value{kind: KindCallable, p: &boundMethod{recv: obj, name: name}}, true
	}
	if unsafeMethods[obj.kind][name] {
		return Value{kind: KindUndefined, i: 1, s: "access to attribute '" + name + "' of '" + obj.typeName() + "' object is unsafe"}, true
	}
	return Value{}, false
}

// bind matches a call's arguments to named parameters; the first required
// are mandatory. got has bit i set when parameter i was passed.
func (r *renderer) bind(off int, fname string, args []Value, kw []kwArg, required int, names ...string) ([]Value, uint64, error) {
	if len(args) > len(names) {
		return nil, 0, r.errorf(off, "%s() takes at most %d argument(s) (%d given)", fname, len(names), len(args))
	}
	vals := make([]Value, len(names))
	var got uint64
	for i, a := range args {
		vals[i] = a
		got |= 1 << i
	}
	for _, k := range kw {
		found := false
		for i, n := range names {
			if n == k.name {
				if got&(1<<i) != 0 {
					return nil, 0, r.errorf(off, "%s() got multiple values for argument '%s'", fname, k.name)
				}
				vals[i] = k.v
				got |= 1 << i
				found = true
				break
			}
		}
		if !found {
			return nil, 0, r.errorf(off, "%s() got an unexpected keyword argument '%s'", fname, k.name)
		}
	}
	for i := 0; i < required; i++ {
		if got&(1<<i) == 0 {
			return nil, 0, r.errorf(off, "%s() missing required argument '%s'", fname, names[i])
		}
	}
	return vals, got, nil
}

func (r *renderer) wantStr(off int, fname string, v Value) (string, error) {
	if v.kind != KindString {
		if v.kind == KindUndefined {
			return "", r.undefinedError(off, v)
		}
		return "", r.errorf(off, "%s() argument must be str, not %s", fname, v.typeName())
	}
	return v.s, nil
}

func (r *renderer) wantInt(off int, fname string, v Value) (int64, error) {
	switch v.kind {
	case KindInt, KindBool:
		return v.i, nil
	case KindUndefined:
		return 0, r.undefinedError(off, v)
	}
	return 0, r.errorf(off, "%s() argument must be an integer, not %s", fname, v.typeName())
}

// result charges a method's new string.
func (r *renderer) result(off int, s string) (Value, error) {
	if err := r.charge(off, int64(len(s))); err != nil {
		return Value{}, err
	}
	return String(s), nil
}

func (r *renderer) callMethod(off int, recv Value, name string, args []Value, kw []kwArg) (Value, error) {
	switch recv.kind {
	case KindString:
		return r.strMethod(off, recv.s, name, args, kw)
	case KindList:
		return r.listMethod(off, recv, name, args, kw)
	case KindDict:
		return r.dictMethod(off, recv.dict(), name, args, kw)
	case KindObject:
		switch o := recv.p.(type) {
		case *loopObj:
			return r.loopMethod(off, o, name, args, kw)
		case *cycler:
			switch name {
			case "next":
				if len(o.items) == 0 {
					return undefined("cycler has no items"), nil
				}
				v := o.items[o.pos]
				o.pos = (o.pos + 1) % len(o.items)
				return v, nil
			case "reset":
				o.pos = 0
				return None(), nil
			}
		}
	}
	return Value{}, r.errorf(off, "'%s' object has no method '%s'", recv.typeName(), name)
}

func (r *renderer) loopMethod(off int, l *loopObj, name string, args []Value, kw []kwArg) (Value, error) {
	switch name {
	case "cycle":
		if len(args) == 0 {
			return Value{}, r.errorf(off, "no items for cycling given")
		}
		return args[l.index%len(args)], nil
	case "changed":
		cur := listValue(args, true)
		if l.last != nil && equal(*l.last, cur) {
			return Bool(false), nil
		}
		l.last = &cur
		return Bool(true), nil
	}
	return Value{}, r.errorf(off, "'LoopContext' object has no method '%s'", name)
}

func (r *renderer) dictMethod(off int, d *Dict, name string, args []Value, kw []kwArg) (Value, error) {
	switch name {
	case "get":
		a, got, err := r.bind(off, "get", args, kw, 1, "key", "default")
		if err != nil {
			return Value{}, err
		}
		if v, ok := d.get(a[0]); ok {
			return v, nil
		}
		if got&2 != 0 {
			return a[1], nil
		}
		return None(), nil
	case "items":
		if _, _, err := r.bind(off, "items", args, kw, 0); err != nil {
			return Value{}, err
		}
		return r.dictItems(off, d)
	case "keys", "values":
		if _, _, err := r.bind(off, name, args, kw, 0); err != nil {
			return Value{}, err
		}
		if err := r.chargeList(off, len(d.keys)); err != nil {
			return Value{}, err
		}
		src := d.keys
		if name == "values" {
			src = d.vals
		}
		return listValue(append([]Value(nil), src...), false), nil
	case "copy":
		if err := r.charge(off, int64(len(d.keys))*entryBytes); err != nil {
			return Value{}, err
		}
		c := NewDict()
		for i := range d.keys {
			c.set(d.keys[i], d.vals[i])
		}
		return c.Value(), nil
	}
	return Value{}, r.errorf(off, "'dict' object has no method '%s'", name)
}

// dictItems is d.items() as a list of (key, value) tuples.
func (r *renderer) dictItems(off int, d *Dict) (Value, error) {
	if err := r.chargeList(off, 3*len(d.keys)); err != nil {
		return Value{}, err
	}
	items := make([]Value, len(d.keys))
	for i := range d.keys {
		items[i] = listValue([]Value{d.keys[i], d.vals[i]}, true)
	}
	return listValue(items, false), nil
}

func (r *renderer) listMethod(off int, recv Value, name string, args []Value, kw []kwArg) (Value, error) {
	items := recv.list().items
	switch name {
	case "count":
		a, _, err := r.bind(off, "count", args, kw, 1, "value")
		if err != nil {
			return Value{}, err
		}
		n := 0
		for _, it := range items {
			if equal(it, a[0]) {
				n++
			}
		}
		return Int(int64(n)), nil
	case "index":
		a, got, err := r.bind(off, "index", args, kw, 1, "value", "start", "stop")
		if err != nil {
			return Value{}, err
		}
		start, stop := int64(0), int64(len(items))
		if got&2 != 0 {
			if start, err = r.wantInt(off, "index", a[1]); err != nil {
				return Value{}, err
			}
		}
		if got&4 != 0 {
			if stop, err = r.wantInt(off, "index", a[2]); err != nil {
				return Value{}, err
			}
		}
		start, stop = clampRange(start, stop, int64(len(items)))
		for i := start; i < stop; i++ {
			if equal(items[i], a[0]) {
				return Int(i), nil
			}
		}
		return Value{}, r.errorf(off, "value is not in list")
	case "copy":
		if err := r.chargeList(off, len(items)); err != nil {
			return Value{}, err
		}
		return listValue(append([]Value(nil), items...), recv.list().tuple), nil
	}
	return Value{}, r.errorf(off, "'%s' object has no method '%s'", recv.typeName(), name)
}

// clampRange applies Python's start/end rules for str.find and list.index.
func clampRange(start, end, n int64) (int64, int64) {
	if start < 0 {
		start += n
		if start < 0 {
			start = 0
		}
	}
	if end < 0 {
		end += n
		if end < 0 {
			end = 0
		}
	}
	if end > n {
		end = n
	}
	if start > end {
		start = end
	}
	return start, end
}

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

var (
	upperCaser = cases.Upper(language.Und)
	lowerCaser = cases.Lower(language.Und)
	foldCaser  = cases.Fold()
)

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
