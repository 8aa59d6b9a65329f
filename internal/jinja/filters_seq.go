package jinja

// Filters over sequences and mappings: their order, selection and shape.

import (
	"slices"
	"strconv"
	"strings"
)

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
	if !v.truth() {
		// jinja2's map iterates only a true value (None|map is empty)
		return genValue(nil, "generator"), nil
	}
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
