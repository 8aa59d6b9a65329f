package jinja

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// filterFunc implements one filter: v is the filtered value.
type filterFunc func(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs":            filterAbs,
		"attr":           filterAttr,
		"batch":          filterBatch,
		"capitalize":     strFilter(func(s string) string { return pyCapitalize(s) }),
		"center":         filterCenter,
		"count":          filterLength,
		"d":              filterDefault,
		"default":        filterDefault,
		"dictsort":       filterDictsort,
		"e":              filterEscape,
		"escape":         filterEscape,
		"first":          filterFirst,
		"float":          filterFloat,
		"forceescape":    filterForceEscape,
		"format":         filterFormat,
		"groupby":        filterGroupby,
		"indent":         filterIndent,
		"int":            filterInt,
		"items":          filterItems,
		"join":           filterJoin,
		"last":           filterLast,
		"length":         filterLength,
		"list":           filterList,
		"lower":          filterCase("lower"),
		"map":            filterMap,
		"max":            filterMinMax(1),
		"min":            filterMinMax(-1),
		"pprint":         filterPprint,
		"reject":         filterSelect(false, false),
		"rejectattr":     filterSelect(false, true),
		"replace":        filterReplace,
		"reverse":        filterReverse,
		"round":          filterRound,
		"safe":           filterSafe,
		"select":         filterSelect(true, false),
		"selectattr":     filterSelect(true, true),
		"slice":          filterSlice,
		"sort":           filterSort,
		"string":         filterString,
		"striptags":      filterStriptags,
		"sum":            filterSum,
		"title":          strFilter(jinjaTitle),
		"tojson":         filterTojson,
		"trim":           filterTrim,
		"truncate":       filterTruncate,
		"unique":         filterUnique,
		"upper":          filterCase("upper"),
		"urlencode":      filterURLEncode,
		"wordcount":      filterWordcount,
		"wordwrap":       filterWordwrap,
		"xmlattr":        filterXMLAttr,
		"filesizeformat": filterFilesize,
	}
}

// callFilter evaluates a filter expression's arguments and applies it to v.
func (r *renderer) callFilter(f *filterExpr, v Value, sc *scope) (Value, error) {
	fn, ok := filters[f.name]
	if !ok {
		return Value{}, r.errorf(f.off, "no filter named '%s'", f.name)
	}
	args, kw, err := r.evalArgs(f.off, &f.callArgs, sc)
	if err != nil {
		return Value{}, err
	}
	return fn(r, f.off, v, args, kw)
}

// applyFilter applies a named filter (for map('filter')).
func (r *renderer) applyFilter(off int, name string, v Value, args []Value, kw []kwArg) (Value, error) {
	fn, ok := filters[name]
	if !ok {
		return Value{}, r.errorf(off, "no filter named '%s'", name)
	}
	return fn(r, off, v, args, kw)
}

// iterable returns the items of an iterable filter argument, counting them
// as loop iterations.
func (r *renderer) iterable(off int, v Value) ([]Value, error) {
	items, err := r.iterItems(off, v)
	if err != nil {
		return nil, err
	}
	return items, r.iterate(off, int64(len(items)))
}

func strFilter(f func(string) string) filterFunc {
	return func(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
		if _, _, err := r.bind(off, "filter", args, kw, 0); err != nil {
			return Value{}, err
		}
		s, err := r.str(off, v)
		if err != nil {
			return Value{}, err
		}
		return r.result(off, f(s))
	}
}

func filterCase(which string) filterFunc {
	return func(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
		if _, _, err := r.bind(off, which, args, kw, 0); err != nil {
			return Value{}, err
		}
		s, err := r.str(off, v)
		if err != nil {
			return Value{}, err
		}
		return r.strNoArg(off, s, which)
	}
}

func filterAbs(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	switch v.kind {
	case KindInt, KindBool:
		if v.i == math.MinInt64 {
			return Value{}, r.overflow(off)
		}
		return Int(absInt(v.i)), nil
	case KindFloat:
		return Float(math.Abs(v.f)), nil
	case KindUndefined:
		return Value{}, r.undefinedError(off, v)
	}
	return Value{}, r.errorf(off, "bad operand type for abs(): '%s'", v.typeName())
}

func filterAttr(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, _, err := r.bind(off, "attr", args, kw, 1, "name")
	if err != nil {
		return Value{}, err
	}
	name, err := r.wantStr(off, "attr", a[0])
	if err != nil {
		return Value{}, err
	}
	switch v.kind {
	case KindUndefined:
		return Value{}, r.undefinedError(off, v)
	case KindDict:
		// attr() does not fall back to items.
		if m, ok := methodValue(v, name); ok {
			return m, nil
		}
		return undefined("'dict object' has no attribute '" + name + "'"), nil
	}
	return r.getattr(off, v, name)
}

func filterBatch(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "batch", args, kw, 1, "linecount", "fill_with")
	if err != nil {
		return Value{}, err
	}
	n, err := r.wantInt(off, "batch", a[0])
	if err != nil {
		return Value{}, err
	}
	if n <= 0 {
		return Value{}, r.errorf(off, "batch size must be positive")
	}
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	if err := r.chargeList(off, 2*len(items)+int(n)); err != nil {
		return Value{}, err
	}
	var out []Value
	for i := 0; i < len(items); i += int(n) {
		end := min(i+int(n), len(items))
		chunk := append([]Value(nil), items[i:end]...)
		if got&2 != 0 && a[1].kind != KindNone {
			for len(chunk) < int(n) {
				chunk = append(chunk, a[1])
			}
		}
		out = append(out, listValue(chunk, false))
	}
	return genValue(out, "generator"), nil
}

func filterSlice(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "slice", args, kw, 1, "slices", "fill_with")
	if err != nil {
		return Value{}, err
	}
	slicesN, err := r.wantInt(off, "slice", a[0])
	if err != nil {
		return Value{}, err
	}
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	if slicesN <= 0 || slicesN > int64(len(items))+1<<16 {
		return Value{}, r.errorf(off, "invalid number of slices")
	}
	if err := r.chargeList(off, 2*len(items)+int(slicesN)); err != nil {
		return Value{}, err
	}
	length := len(items)
	per := length / int(slicesN)
	extra := length % int(slicesN)
	offset := 0
	var out []Value
	for k := 0; k < int(slicesN); k++ {
		start := offset + k*per
		if k < extra {
			offset++
		}
		end := offset + (k+1)*per
		chunk := append([]Value(nil), items[start:end]...)
		if got&2 != 0 && a[1].kind != KindNone && k >= extra {
			chunk = append(chunk, a[1])
		}
		out = append(out, listValue(chunk, false))
	}
	return genValue(out, "generator"), nil
}

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

func filterDefault(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "default", args, kw, 0, "default_value", "boolean")
	if err != nil {
		return Value{}, err
	}
	def := String("")
	if got&1 != 0 {
		def = a[0]
	}
	if v.kind == KindUndefined || got&2 != 0 && a[1].truth() && !v.truth() {
		return def, nil
	}
	return v, nil
}

// sortKey prepares a value for case-insensitive comparison (ignore_case).
func sortKey(v Value, caseSensitive bool) Value {
	if !caseSensitive && v.kind == KindString {
		if isASCII(v.s) {
			return String(strings.ToLower(v.s))
		}
		return String(lowerCaser.String(v.s))
	}
	return v
}

// sortValues sorts items stably by keys with Python's ordering.
func (r *renderer) sortValues(off int, items, keys []Value, reverse bool) ([]Value, error) {
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var err error
	slices.SortStableFunc(idx, func(x, y int) int {
		if err != nil {
			return 0
		}
		c, e := r.order(off, "<", keys[x], keys[y])
		if e != nil {
			err = e
			return 0
		}
		if c == 2 || c == -2 {
			c = 0
		}
		if reverse {
			return -c
		}
		return c
	})
	if err != nil {
		return nil, err
	}
	out := make([]Value, len(items))
	for i, k := range idx {
		out[i] = items[k]
	}
	return out, nil
}

func filterDictsort(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "dictsort", args, kw, 0, "case_sensitive", "by", "reverse")
	if err != nil {
		return Value{}, err
	}
	if v.kind != KindDict {
		if v.kind == KindUndefined {
			return Value{}, r.undefinedError(off, v)
		}
		return Value{}, r.errorf(off, "dictsort needs a mapping, not %s", v.typeName())
	}
	pos := 0
	if got&2 != 0 {
		by, err := r.wantStr(off, "dictsort", a[1])
		if err != nil {
			return Value{}, err
		}
		switch by {
		case "key":
		case "value":
			pos = 1
		default:
			return Value{}, r.errorf(off, "you can only sort by either \"key\" or \"value\"")
		}
	}
	d := v.dict()
	if err := r.iterate(off, int64(len(d.keys))); err != nil {
		return Value{}, err
	}
	pairs, err := r.dictItems(off, d)
	if err != nil {
		return Value{}, err
	}
	items := pairs.list().items
	keys := make([]Value, len(items))
	for i, p := range items {
		keys[i] = sortKey(p.list().items[pos], got&1 != 0 && a[0].truth())
	}
	sorted, err := r.sortValues(off, items, keys, got&4 != 0 && a[2].truth())
	if err != nil {
		return Value{}, err
	}
	return listValue(sorted, false), nil
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

func filterFirst(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	if v.kind == KindString {
		if v.s == "" {
			return undefined("No first item, sequence was empty."), nil
		}
		return splitChars(firstChar(v.s))[0], nil
	}
	items, err := r.iterItems(off, v)
	if err != nil {
		return Value{}, err
	}
	if len(items) == 0 {
		return undefined("No first item, sequence was empty."), nil
	}
	return items[0], nil
}

func firstChar(s string) string {
	for i := range s {
		if i > 0 {
			return s[:i]
		}
	}
	return s
}

func filterLast(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	if v.kind == KindList && v.list().gen != "" {
		return Value{}, r.errorf(off, "'%s' object is not reversible", v.typeName())
	}
	if v.kind == KindString {
		if v.s == "" {
			return undefined("No last item, sequence was empty."), nil
		}
		items := splitChars(v.s)
		return items[len(items)-1], nil
	}
	items, err := r.iterItems(off, v)
	if err != nil {
		return Value{}, err
	}
	if len(items) == 0 {
		return undefined("No last item, sequence was empty."), nil
	}
	return items[len(items)-1], nil
}

// pyInt parses a string like Python's int(s, base).
func pyInt(s string, base int) (int64, bool) {
	s = strings.TrimFunc(s, isPySpace)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if base == 0 || base == 16 || base == 8 || base == 2 {
		l := strings.ToLower(s)
		switch {
		case strings.HasPrefix(l, "0x") && (base == 0 || base == 16):
			s, base = s[2:], 16
		case strings.HasPrefix(l, "0o") && (base == 0 || base == 8):
			s, base = s[2:], 8
		case strings.HasPrefix(l, "0b") && (base == 0 || base == 2):
			s, base = s[2:], 2
		case base == 0:
			base = 10
			if len(s) > 1 && strings.Trim(s, "0_") != "" && s[0] == '0' {
				return 0, false
			}
		}
		s = strings.TrimPrefix(s, "_")
	}
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), base, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// pyFloat parses a string like Python's float(s).
func pyFloat(s string) (float64, bool) {
	s = strings.TrimFunc(s, isPySpace)
	l := strings.ToLower(strings.TrimLeft(s, "+-"))
	switch l {
	case "inf", "infinity", "nan":
		f, _ := strconv.ParseFloat(strings.Replace(strings.ToLower(s), "infinity", "inf", 1), 64)
		return f, true
	}
	if s == "" || strings.HasPrefix(l, "0x") || strings.ContainsAny(s, " \t") {
		return 0, false
	}
	if strings.Contains(s, "_") {
		// underscores only between digits
		for i := 0; i < len(s); i++ {
			if s[i] == '_' && (i == 0 || i == len(s)-1 || s[i-1] < '0' || s[i-1] > '9' || s[i+1] < '0' || s[i+1] > '9') {
				return 0, false
			}
		}
		s = strings.ReplaceAll(s, "_", "")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f, true
		}
		return 0, false
	}
	return f, true
}

func filterInt(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "int", args, kw, 0, "default", "base")
	if err != nil {
		return Value{}, err
	}
	def := Int(0)
	if got&1 != 0 {
		def = a[0]
	}
	base := int64(10)
	if got&2 != 0 {
		if base, err = r.wantInt(off, "int", a[1]); err != nil {
			return Value{}, err
		}
		if base != 0 && (base < 2 || base > 36) {
			return Value{}, r.errorf(off, "int() base must be >= 2 and <= 36, or 0")
		}
	}
	switch v.kind {
	case KindInt, KindBool:
		return Int(v.i), nil
	case KindFloat:
		if math.IsNaN(v.f) || math.IsInf(v.f, 0) || math.Abs(v.f) >= 1<<63 {
			return def, nil
		}
		return Int(int64(v.f)), nil
	case KindString:
		if n, ok := pyInt(v.s, int(base)); ok {
			return Int(n), nil
		}
		if f, ok := pyFloat(v.s); ok && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) < 1<<63 {
			return Int(int64(f)), nil
		}
	}
	return def, nil
}

func filterFloat(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "float", args, kw, 0, "default")
	if err != nil {
		return Value{}, err
	}
	def := Float(0)
	if got&1 != 0 {
		def = a[0]
	}
	switch v.kind {
	case KindInt, KindBool:
		return Float(float64(v.i)), nil
	case KindFloat:
		return v, nil
	case KindString:
		if f, ok := pyFloat(v.s); ok {
			return Float(f), nil
		}
	}
	return def, nil
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

func filterGroupby(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "groupby", args, kw, 1, "attribute", "default", "case_sensitive")
	if err != nil {
		return Value{}, err
	}
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	cs := got&4 != 0 && a[2].truth()
	var def *Value
	if got&2 != 0 && a[1].kind != KindNone {
		def = &a[1]
	}
	keys := make([]Value, len(items))
	raw := make([]Value, len(items))
	for i, it := range items {
		k, err := r.attrPath(off, it, a[0], def)
		if err != nil {
			return Value{}, err
		}
		raw[i] = k
		keys[i] = sortKey(k, cs)
	}
	order := make([]Value, len(items))
	for i := range order {
		order[i] = Int(int64(i))
	}
	sorted, err := r.sortValues(off, order, keys, false)
	if err != nil {
		return Value{}, err
	}
	if err := r.chargeList(off, 3*len(items)); err != nil {
		return Value{}, err
	}
	var out []Value
	for i := 0; i < len(sorted); {
		j := i
		first := sorted[i].i
		var group []Value
		for j < len(sorted) && equal(keys[sorted[j].i], keys[first]) {
			group = append(group, items[sorted[j].i])
			j++
		}
		out = append(out, listValue([]Value{raw[first], listValue(group, false)}, true))
		i = j
	}
	return listValue(out, false), nil
}

func filterIndent(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "indent", args, kw, 0, "width", "first", "blank")
	if err != nil {
		return Value{}, err
	}
	s, err := r.str(off, v)
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

func filterItems(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	switch v.kind {
	case KindUndefined:
		return genValue(nil, "generator"), nil
	case KindDict:
		if err := r.iterate(off, int64(v.dict().Len())); err != nil {
			return Value{}, err
		}
		items, err := r.dictItems(off, v.dict())
		if err != nil {
			return Value{}, err
		}
		items.list().gen = "generator"
		return items, nil
	}
	return Value{}, r.errorf(off, "can only get item pairs from a mapping")
}

// attrPath is jinja2's make_attrgetter: "a.b.0" looks up a, then b, then
// item 0; an int attribute is one item.
func (r *renderer) attrPath(off int, item, attr Value, def *Value) (Value, error) {
	var parts []Value
	switch attr.kind {
	case KindString:
		for _, p := range strings.Split(attr.s, ".") {
			if p != "" && strings.Trim(p, "0123456789") == "" {
				n, _ := strconv.ParseInt(p, 10, 64)
				parts = append(parts, Int(n))
			} else {
				parts = append(parts, String(p))
			}
		}
	case KindNone:
	default:
		parts = []Value{attr}
	}
	var err error
	for _, p := range parts {
		if item, err = r.getitem(off, item, p); err != nil {
			return Value{}, err
		}
		if def != nil && item.kind == KindUndefined {
			item = *def
		}
	}
	return item, nil
}

func filterJoin(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "join", args, kw, 0, "d", "attribute")
	if err != nil {
		return Value{}, err
	}
	sep := ""
	if got&1 != 0 {
		if sep, err = r.str(off, a[0]); err != nil {
			return Value{}, err
		}
	}
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	var b strings.Builder
	for i, it := range items {
		if got&2 != 0 && a[1].kind != KindNone {
			if it, err = r.attrPath(off, it, a[1], nil); err != nil {
				return Value{}, err
			}
		}
		s, err := r.str(off, it)
		if err != nil {
			return Value{}, err
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s)
		if int64(b.Len()) > r.lim.Alloc-r.alloc {
			return Value{}, r.limit(off, LimitAlloc, r.lim.Alloc)
		}
	}
	return r.result(off, b.String())
}

func filterLength(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	switch v.kind {
	case KindString:
		return Int(int64(runeLen(v.s))), nil
	case KindList:
		if v.list().gen != "" {
			return Value{}, r.errorf(off, "object of type '%s' has no len()", v.typeName())
		}
		return Int(int64(len(v.list().items))), nil
	case KindDict:
		return Int(int64(v.dict().Len())), nil
	case KindUndefined:
		return Int(0), nil
	case KindObject:
		if l, ok := v.p.(*loopObj); ok {
			return Int(int64(len(l.items))), nil
		}
	}
	return Value{}, r.errorf(off, "object of type '%s' has no len()", v.typeName())
}

func filterList(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	if err := r.chargeList(off, len(items)); err != nil {
		return Value{}, err
	}
	return listValue(append([]Value(nil), items...), false), nil
}

func filterMap(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	var fn func(Value) (Value, error)
	if len(args) == 0 {
		var attr, def *Value
		for _, k := range kw {
			switch k.name {
			case "attribute":
				attr = &k.v
			case "default":
				def = &k.v
			default:
				return Value{}, r.errorf(off, "unexpected keyword argument '%s'", k.name)
			}
		}
		if attr == nil {
			return Value{}, r.errorf(off, "map requires a filter argument")
		}
		if def != nil && def.kind == KindNone {
			def = nil
		}
		fn = func(it Value) (Value, error) { return r.attrPath(off, it, *attr, def) }
	} else {
		name, err := r.wantStr(off, "map", args[0])
		if err != nil {
			return Value{}, err
		}
		rest := args[1:]
		fn = func(it Value) (Value, error) { return r.applyFilter(off, name, it, rest, kw) }
	}
	if err := r.chargeList(off, len(items)); err != nil {
		return Value{}, err
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if out[i], err = fn(it); err != nil {
			return Value{}, err
		}
	}
	return genValue(out, "generator"), nil
}

func filterMinMax(sign int) filterFunc {
	return func(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
		a, got, err := r.bind(off, "min", args, kw, 0, "case_sensitive", "attribute")
		if err != nil {
			return Value{}, err
		}
		items, err := r.iterable(off, v)
		if err != nil {
			return Value{}, err
		}
		if len(items) == 0 {
			return undefined("No aggregated item, sequence was empty."), nil
		}
		cs := got&1 != 0 && a[0].truth()
		key := func(it Value) (Value, error) {
			if got&2 != 0 && a[1].kind != KindNone {
				var err error
				if it, err = r.attrPath(off, it, a[1], nil); err != nil {
					return Value{}, err
				}
			}
			return sortKey(it, cs), nil
		}
		best := items[0]
		bk, err := key(best)
		if err != nil {
			return Value{}, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return Value{}, err
			}
			op := "<"
			if sign > 0 {
				op = ">"
			}
			better, err := r.compare(off, op, k, bk)
			if err != nil {
				return Value{}, err
			}
			if better {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

func filterPprint(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	s, err := r.repr(off, v)
	if err != nil {
		return Value{}, err
	}
	return String(s), nil
}

// filterSelect implements select, reject, selectattr and rejectattr.
func filterSelect(keep, byAttr bool) filterFunc {
	return func(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
		if !v.truth() {
			return genValue(nil, "generator"), nil
		}
		items, err := r.iterable(off, v)
		if err != nil {
			return Value{}, err
		}
		var attr Value
		if byAttr {
			if len(args) == 0 {
				return Value{}, r.errorf(off, "missing parameter for attribute name")
			}
			attr, args = args[0], args[1:]
		}
		var test string
		if len(args) > 0 {
			if test, err = r.wantStr(off, "select", args[0]); err != nil {
				return Value{}, err
			}
			args = args[1:]
		}
		var out []Value
		for _, it := range items {
			x := it
			if byAttr {
				if x, err = r.attrPath(off, it, attr, nil); err != nil {
					return Value{}, err
				}
			}
			var ok bool
			if test == "" {
				ok = x.truth()
			} else if ok, err = r.applyTest(off, test, x, args, kw); err != nil {
				return Value{}, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		if err := r.chargeList(off, len(out)); err != nil {
			return Value{}, err
		}
		return genValue(out, "generator"), nil
	}
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

func filterReverse(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	switch v.kind {
	case KindString:
		items := splitChars(v.s)
		var b strings.Builder
		b.Grow(len(v.s))
		for i := len(items) - 1; i >= 0; i-- {
			b.WriteString(items[i].s)
		}
		return r.result(off, b.String())
	case KindList:
		if v.list().gen != "" {
			items := slices.Clone(v.list().items)
			slices.Reverse(items)
			return listValue(items, false), nil
		}
	}
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	if err := r.chargeList(off, len(items)); err != nil {
		return Value{}, err
	}
	out := slices.Clone(items)
	slices.Reverse(out)
	name := "list_reverseiterator"
	if v.kind == KindDict {
		name = "dict_reversekeyiterator"
	} else if v.kind == KindList && v.list().tuple {
		name = "reversed"
	}
	return genValue(out, name), nil
}

func filterRound(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "round", args, kw, 0, "precision", "method")
	if err != nil {
		return Value{}, err
	}
	prec := int64(0)
	if got&1 != 0 {
		if prec, err = r.wantInt(off, "round", a[0]); err != nil {
			return Value{}, err
		}
	}
	method := "common"
	if got&2 != 0 {
		if method, err = r.wantStr(off, "round", a[1]); err != nil {
			return Value{}, err
		}
	}
	if !v.isNumber() {
		if v.kind == KindUndefined {
			return Value{}, r.undefinedError(off, v)
		}
		return Value{}, r.errorf(off, "type %s doesn't define __round__ method", v.typeName())
	}
	switch method {
	case "common":
		if v.kind != KindFloat {
			if prec >= 0 {
				return Int(v.i), nil
			}
			p := math.Pow(10, float64(-prec))
			return Int(int64(math.RoundToEven(float64(v.i)/p) * p)), nil
		}
		return Float(pyRound(v.f, int(prec))), nil
	case "ceil", "floor":
		x, _ := v.num()
		p := math.Pow(10, float64(prec))
		if method == "ceil" {
			return Float(math.Ceil(x*p) / p), nil
		}
		return Float(math.Floor(x*p) / p), nil
	}
	return Value{}, r.errorf(off, "method must be common, ceil or floor")
}

// pyRound is Python's round(x, n) for floats: correctly rounded, ties to even.
func pyRound(x float64, n int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	if n > 300 {
		return x
	}
	if n < -308 {
		return math.Copysign(0, x)
	}
	if n >= 0 {
		f, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', n, 64), 64)
		return f
	}
	p := math.Pow(10, float64(-n))
	return math.RoundToEven(x/p) * p
}

func filterSort(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "sort", args, kw, 0, "reverse", "case_sensitive", "attribute")
	if err != nil {
		return Value{}, err
	}
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	cs := got&2 != 0 && a[1].truth()
	var attrs []Value
	if got&4 != 0 && a[2].kind != KindNone {
		if a[2].kind == KindString {
			for _, p := range strings.Split(a[2].s, ",") {
				attrs = append(attrs, String(p))
			}
		} else {
			attrs = []Value{a[2]}
		}
	}
	keys := make([]Value, len(items))
	for i, it := range items {
		if attrs == nil {
			keys[i] = sortKey(it, cs)
			continue
		}
		parts := make([]Value, len(attrs))
		for j, at := range attrs {
			k, err := r.attrPath(off, it, at, nil)
			if err != nil {
				return Value{}, err
			}
			parts[j] = sortKey(k, cs)
		}
		keys[i] = listValue(parts, false)
	}
	if err := r.chargeList(off, 2*len(items)); err != nil {
		return Value{}, err
	}
	sorted, err := r.sortValues(off, items, keys, got&1 != 0 && a[0].truth())
	if err != nil {
		return Value{}, err
	}
	return listValue(sorted, false), nil
}

func filterString(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	if v.kind == KindString {
		return v, nil // soft_str keeps Markup
	}
	s, err := r.str(off, v)
	if err != nil {
		return Value{}, err
	}
	return String(s), nil
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

func filterSum(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "sum", args, kw, 0, "attribute", "start")
	if err != nil {
		return Value{}, err
	}
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	acc := Int(0)
	if got&2 != 0 {
		acc = a[1]
	}
	for _, it := range items {
		if got&1 != 0 && a[0].kind != KindNone {
			if it, err = r.attrPath(off, it, a[0], nil); err != nil {
				return Value{}, err
			}
		}
		if acc, err = r.binop(off, "+", acc, it); err != nil {
			return Value{}, err
		}
	}
	return acc, nil
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
	s, err := r.str(off, v)
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
	chars := []rune(s)
	if int64(len(chars)) <= length || int64(len(chars))-length <= leeway {
		return String(s), nil
	}
	cut := string(chars[:length-int64(runeLen(end))])
	if got&2 != 0 && a[1].truth() {
		return r.result(off, cut+end)
	}
	if i := strings.LastIndexByte(cut, ' '); i >= 0 {
		cut = cut[:i]
	}
	return r.result(off, cut+end)
}

func filterUnique(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "unique", args, kw, 0, "case_sensitive", "attribute")
	if err != nil {
		return Value{}, err
	}
	items, err := r.iterable(off, v)
	if err != nil {
		return Value{}, err
	}
	cs := got&1 != 0 && a[0].truth()
	seen := map[dictKey]bool{}
	var out []Value
	for _, it := range items {
		k := it
		if got&2 != 0 && a[1].kind != KindNone {
			if k, err = r.attrPath(off, it, a[1], nil); err != nil {
				return Value{}, err
			}
		}
		k = sortKey(k, cs)
		hk, ok := keyOf(k)
		if !ok {
			return Value{}, r.errorf(off, "unhashable type: '%s'", k.typeName())
		}
		if !seen[hk] {
			seen[hk] = true
			out = append(out, it)
		}
	}
	if err := r.chargeList(off, 2*len(out)); err != nil {
		return Value{}, err
	}
	return genValue(out, "generator"), nil
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
	s, err := r.str(off, v)
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

func filterTojson(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "tojson", args, kw, 0, "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return Value{}, err
	}
	o := jsonOptions{itemSep: ", ", keySep: ": "}
	if got&1 != 0 {
		o.ensureASCII = a[0].truth()
	}
	if got&2 != 0 && a[1].kind != KindNone {
		switch a[1].kind {
		case KindString:
			o.indent, o.indented = a[1].s, true
		case KindInt, KindBool:
			if a[1].i > 1<<10 {
				return Value{}, r.limit(off, LimitAlloc, r.lim.Alloc)
			}
			o.indent, o.indented = strings.Repeat(" ", max(int(a[1].i), 0)), true
		default:
			return Value{}, r.errorf(off, "indent must be an int or a string, not %s", a[1].typeName())
		}
		o.itemSep = ","
	}
	if got&4 != 0 && a[2].kind != KindNone {
		seps, err := r.iterItems(off, a[2])
		if err != nil || len(seps) != 2 || seps[0].kind != KindString || seps[1].kind != KindString {
			return Value{}, r.errorf(off, "separators must be a pair of strings")
		}
		o.itemSep, o.keySep = seps[0].s, seps[1].s
	}
	o.sortKeys = got&8 != 0 && a[3].truth()
	s, err := r.toJSON(off, v, o)
	if err != nil {
		return Value{}, err
	}
	return String(s), nil
}
