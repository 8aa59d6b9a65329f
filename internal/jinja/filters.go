package jinja

import (
	"math"
	"strconv"
	"strings"
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

// strOperand is a filter's string argument where jinja2 uses it as a str
// without converting it (indent's s += "\n", wordwrap's s.splitlines()).
func (r *renderer) strOperand(off int, fname string, v Value) (string, error) {
	switch v.kind {
	case KindString:
		return v.s, nil
	case KindUndefined:
		return "", r.undefinedError(off, v)
	}
	return "", r.errorf(off, "%s: a string is required, not %s", fname, v.typeName())
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
	case KindUndefined:
		return Value{}, r.undefinedError(off, v) // int(Undefined) raises
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
	case KindUndefined:
		return Value{}, r.undefinedError(off, v) // float(Undefined) raises
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

func filterPprint(r *renderer, off int, v Value, args []Value, kw []kwArg) (Value, error) {
	s, err := r.repr(off, v)
	if err != nil {
		return Value{}, err
	}
	return String(s), nil
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
