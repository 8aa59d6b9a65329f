package jinja

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
		l := obj.list()
		switch {
		case l.gen != "":
		case l.tuple || l.rng != "":
			ok = name == "count" || name == "index" // tuples and ranges have only these
		default:
			ok = listMethods[name]
		}
	case KindDict:
		ok = dictMethods[name]
	}
	if ok {
		return Value{kind: KindCallable, p: &boundMethod{recv: obj, name: name}}, true
	}
	mutable := obj.kind == KindDict || obj.isPlainList() && !obj.list().tuple
	if mutable && unsafeMethods[obj.kind][name] {
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
