package jinja

// kwArg is one keyword argument of a call.
type kwArg struct {
	name string
	v    Value
}

// macro is a {% macro %} (or a call block's caller) bound to the scope it was
// defined in.
type macro struct {
	def      *macroDef
	sc       *scope
	isCaller bool
}

func (m *macro) attr(r *renderer, name string) (Value, bool) {
	switch name {
	case "name":
		return String(m.def.name), true
	case "arguments":
		items := make([]Value, len(m.def.params))
		for i, p := range m.def.params {
			items[i] = String(p)
		}
		return listValue(items, true), true
	case "catch_kwargs":
		return Bool(m.def.kwargs), true
	case "catch_varargs":
		return Bool(m.def.varargs), true
	case "caller":
		return Bool(m.def.hasCaller), true
	}
	return Value{}, false
}

// builtin is a global function or a filter-like callable.
type builtin struct {
	name string
	fn   func(r *renderer, off int, args []Value, kw []kwArg) (Value, error)
}

// boundMethod is obj.method before it is called.
type boundMethod struct {
	recv Value
	name string
}

// attrObject is implemented by objects with attributes.
type attrObject interface {
	attr(r *renderer, name string) (Value, bool)
}

// loopObj is the `loop` variable of a for loop (jinja2's LoopContext).
type loopObj struct {
	items []Value
	index int
	depth int
	stmt  *forStmt
	sc    *scope
	last  *Value // changed()'s previous arguments
}

func (l *loopObj) attr(r *renderer, name string) (Value, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return Int(int64(l.index + 1)), true
	case "index0":
		return Int(int64(l.index)), true
	case "revindex":
		return Int(int64(n - l.index)), true
	case "revindex0":
		return Int(int64(n - l.index - 1)), true
	case "first":
		return Bool(l.index == 0), true
	case "last":
		return Bool(l.index == n-1), true
	case "length":
		return Int(int64(n)), true
	case "depth":
		return Int(int64(l.depth + 1)), true
	case "depth0":
		return Int(int64(l.depth)), true
	case "previtem":
		if l.index > 0 {
			return l.items[l.index-1], true
		}
		return undefined("there is no previous item"), true
	case "nextitem":
		if l.index < n-1 {
			return l.items[l.index+1], true
		}
		return undefined("there is no next item"), true
	case "cycle", "changed":
		return Value{kind: KindCallable, p: &boundMethod{recv: Value{kind: KindObject, p: l}, name: name}}, true
	}
	return Value{}, false
}

// call is loop(iterable) in a recursive loop.
func (l *loopObj) call(r *renderer, off int, args []Value, kw []kwArg) (Value, error) {
	if !l.stmt.recursive {
		return Value{}, r.errorf(off, "'LoopContext' object is not callable (the loop is not recursive)")
	}
	if len(args) != 1 || len(kw) != 0 {
		return Value{}, r.errorf(off, "loop() takes exactly one argument")
	}
	if err := r.enterCall(off); err != nil {
		return Value{}, err
	}
	defer func() { r.calls-- }()
	s, err := r.runLoop(l.stmt, l.sc, args[0], l.depth+1, true)
	if err != nil {
		return Value{}, err
	}
	return String(s), nil
}

// cycler is jinja2's cycler(*items).
type cycler struct {
	items []Value
	pos   int
}

func (c *cycler) attr(r *renderer, name string) (Value, bool) {
	switch name {
	case "current":
		if len(c.items) == 0 {
			return undefined("cycler has no items"), true
		}
		return c.items[c.pos], true
	case "next", "reset":
		return Value{kind: KindCallable, p: &boundMethod{recv: Value{kind: KindObject, p: c}, name: name}}, true
	}
	return Value{}, false
}

// joiner is jinja2's joiner(sep): "" the first time, sep afterwards.
type joiner struct {
	sep  string
	used bool
}
