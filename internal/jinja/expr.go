package jinja

import (
	"math"
	"strings"
)

// eval evaluates an expression, bounding the evaluation's nesting.
func (r *renderer) eval(e expr, sc *scope) (Value, error) {
	r.depth++
	if r.depth > r.lim.Nesting {
		r.depth--
		return Value{}, r.limit(e.exprOff(), LimitNesting, int64(r.lim.Nesting))
	}
	if err := r.step(e.exprOff()); err != nil {
		r.depth--
		return Value{}, err
	}
	v, err := r.eval1(e, sc)
	r.depth--
	if (v.kind == KindList || v.kind == KindDict) && v.depth() > maxValueDepth && err == nil {
		// lists built from lists (by filters, +, literals) stay shallow enough
		// that printing or comparing them never recurses deeply
		return Value{}, r.limit(e.exprOff(), LimitNesting, maxValueDepth)
	}
	return v, err
}

func (r *renderer) eval1(e expr, sc *scope) (Value, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := r.lookup(sc, e.name); ok {
			return v, nil
		}
		return undefined("'" + e.name + "' is undefined"), nil
	case *getattrExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return Value{}, err
		}
		return r.getattr(e.off, obj, e.attr)
	case *getitemExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return Value{}, err
		}
		if s, ok := e.key.(*sliceExpr); ok {
			return r.evalSlice(s, obj, sc)
		}
		key, err := r.eval(e.key, sc)
		if err != nil {
			return Value{}, err
		}
		return r.getitem(e.off, obj, key)
	case *callExpr:
		return r.evalCall(e, sc, nil)
	case *filterExpr:
		var arg Value
		if e.arg != nil {
			var err error
			if arg, err = r.eval(e.arg, sc); err != nil {
				return Value{}, err
			}
		}
		return r.callFilter(e, arg, sc)
	case *testExpr:
		arg, err := r.eval(e.arg, sc)
		if err != nil {
			return Value{}, err
		}
		ok, err := r.callTest(e, arg, sc)
		return Bool(ok), err
	case *andExpr:
		l, err := r.eval(e.l, sc)
		if err != nil || !l.truth() {
			return l, err
		}
		return r.eval(e.r, sc)
	case *orExpr:
		l, err := r.eval(e.l, sc)
		if err != nil || l.truth() {
			return l, err
		}
		return r.eval(e.r, sc)
	case *notExpr:
		v, err := r.eval(e.e, sc)
		return Bool(!v.truth()), err
	case *compareExpr:
		left, err := r.eval(e.first, sc)
		if err != nil {
			return Value{}, err
		}
		for _, op := range e.ops {
			right, err := r.eval(op.e, sc)
			if err != nil {
				return Value{}, err
			}
			ok, err := r.compare(e.off, op.op, left, right)
			if err != nil || !ok {
				return Bool(false), err
			}
			left = right
		}
		return Bool(true), nil
	case *binExpr:
		if e.op == "+" {
			return r.evalSum(e, sc)
		}
		l, err := r.eval(e.l, sc)
		if err != nil {
			return Value{}, err
		}
		rv, err := r.eval(e.r, sc)
		if err != nil {
			return Value{}, err
		}
		return r.binop(e.off, e.op, l, rv)
	case *concatExpr:
		parts := make([]string, len(e.items))
		n := 0
		for i, it := range e.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return Value{}, err
			}
			if parts[i], err = r.str(it.exprOff(), v); err != nil {
				return Value{}, err
			}
			n += len(parts[i])
		}
		if err := r.charge(e.off, int64(n)); err != nil {
			return Value{}, err
		}
		return String(strings.Join(parts, "")), nil
	case *negExpr:
		v, err := r.eval(e.e, sc)
		if err != nil {
			return Value{}, err
		}
		op := "-"
		if !e.neg {
			op = "+"
		}
		switch v.kind {
		case KindInt, KindBool:
			if !e.neg {
				return Int(v.i), nil
			}
			if v.i == math.MinInt64 {
				return Value{}, r.errorf(e.off, "integer overflow")
			}
			return Int(-v.i), nil
		case KindFloat:
			if !e.neg {
				return v, nil
			}
			return Float(-v.f), nil
		case KindUndefined:
			return Value{}, r.undefinedError(e.off, v)
		}
		return Value{}, r.errorf(e.off, "bad operand type for unary %s: '%s'", op, v.typeName())
	case *condExpr:
		t, err := r.eval(e.test, sc)
		if err != nil {
			return Value{}, err
		}
		if t.truth() {
			return r.eval(e.then, sc)
		}
		if e.els_ == nil {
			return undefined("the inline if-expression evaluated to false and no else section was defined"), nil
		}
		return r.eval(e.els_, sc)
	case *tupleExpr, *listExpr:
		var items []expr
		tuple := false
		if t, ok := e.(*tupleExpr); ok {
			items, tuple = t.items, true
		} else {
			items = e.(*listExpr).items
		}
		if err := r.chargeList(e.exprOff(), len(items)); err != nil {
			return Value{}, err
		}
		vals := make([]Value, len(items))
		for i, it := range items {
			v, err := r.eval(it, sc)
			if err != nil {
				return Value{}, err
			}
			vals[i] = v
		}
		return r.newList(e.exprOff(), vals, tuple)
	case *dictExpr:
		if err := r.charge(e.off, int64(len(e.keys))*entryBytes); err != nil {
			return Value{}, err
		}
		d := NewDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i], sc)
			if err != nil {
				return Value{}, err
			}
			if _, ok := keyOf(k); !ok {
				return Value{}, r.errorf(e.keys[i].exprOff(), "unhashable type: '%s'", k.typeName())
			}
			v, err := r.eval(e.vals[i], sc)
			if err != nil {
				return Value{}, err
			}
			d.set(k, v)
		}
		if d.depth > maxValueDepth {
			return Value{}, r.limit(e.off, LimitNesting, maxValueDepth)
		}
		return d.Value(), nil
	case *sliceExpr:
		return Value{}, r.errorf(e.off, "a slice is only valid inside []")
	}
	return Value{}, r.errorf(e.exprOff(), "internal error: unknown expression %T", e)
}

// evalSum evaluates a chain a + b + c + ... left to right like Python, but
// joins a run of strings once instead of copying the growing prefix at each
// + (templates build every turn as '<|im_start|>' + role + '\n' + content
// + ...). It also walks the chain without recursion.
func (r *renderer) evalSum(e *binExpr, sc *scope) (Value, error) {
	var chain []*binExpr
	for x := e; ; {
		chain = append(chain, x)
		l, ok := x.l.(*binExpr)
		if !ok || l.op != "+" {
			break
		}
		x = l
	}
	acc, err := r.eval(chain[len(chain)-1].l, sc)
	if err != nil {
		return Value{}, err
	}
	var parts []string // a run of strings not yet joined, acc's string first
	size := 0
	flush := func(off int) error {
		if parts == nil {
			return nil
		}
		if err := r.charge(off, int64(size)); err != nil {
			return err
		}
		acc = String(strings.Join(parts, ""))
		parts, size = nil, 0
		return nil
	}
	for i := len(chain) - 1; i >= 0; i-- {
		x := chain[i]
		if err := r.step(x.off); err != nil {
			return Value{}, err
		}
		v, err := r.eval(x.r, sc)
		if err != nil {
			return Value{}, err
		}
		if acc.kind == KindString && v.kind == KindString && !acc.isMarkup() && !v.isMarkup() {
			if parts == nil {
				parts = append(make([]string, 0, 2*i+2), acc.s)
				size = len(acc.s)
			}
			parts = append(parts, v.s)
			size += len(v.s)
			if int64(size) > r.lim.Alloc-r.alloc {
				return Value{}, r.limit(x.off, LimitAlloc, r.lim.Alloc)
			}
			continue
		}
		if err := flush(x.off); err != nil {
			return Value{}, err
		}
		if acc, err = r.binop(x.off, "+", acc, v); err != nil {
			return Value{}, err
		}
	}
	if err := flush(e.off); err != nil {
		return Value{}, err
	}
	return acc, nil
}

// newList builds a list or tuple, refusing values nested too deeply.
func (r *renderer) newList(off int, items []Value, tuple bool) (Value, error) {
	v := listValue(items, tuple)
	if v.list().depth > maxValueDepth {
		return Value{}, r.limit(off, LimitNesting, maxValueDepth)
	}
	return v, nil
}

// undefinedError is the error of using an undefined value where a value is
// needed.
func (r *renderer) undefinedError(off int, v Value) error {
	msg := v.s
	if msg == "" {
		msg = "value is undefined"
	}
	return r.errorf(off, "%s", msg)
}

// getattr is jinja2's sandboxed getattr: obj.attr is first the attribute
// (a method of str, list, dict), then the item obj[attr].
func (r *renderer) getattr(off int, obj Value, attr string) (Value, error) {
	switch obj.kind {
	case KindUndefined:
		return Value{}, r.undefinedError(off, obj)
	case KindDict:
		if m, ok := methodValue(obj, attr); ok {
			return m, nil
		}
		if v, ok := obj.dict().getStr(attr); ok {
			return v, nil
		}
		return undefined("'dict object' has no attribute '" + attr + "'"), nil
	case KindNamespace:
		if v, ok := obj.p.(*Namespace).attrs.getStr(attr); ok {
			return v, nil
		}
		return undefined("'Namespace' object has no attribute '" + attr + "'"), nil
	case KindObject, KindCallable:
		if a, ok := obj.p.(attrObject); ok {
			if v, ok := a.attr(r, attr); ok {
				return v, nil
			}
		}
	default:
		if m, ok := methodValue(obj, attr); ok {
			return m, nil
		}
	}
	return undefined("'" + obj.typeName() + " object' has no attribute '" + attr + "'"), nil
}

// getitem is jinja2's sandboxed getitem: obj[key], then the attribute named
// key when key is a string.
func (r *renderer) getitem(off int, obj, key Value) (Value, error) {
	switch obj.kind {
	case KindUndefined:
		return Value{}, r.undefinedError(off, obj)
	case KindDict:
		if v, ok := obj.dict().get(key); ok {
			return v, nil
		}
	case KindList:
		if (key.kind == KindInt || key.kind == KindBool) && obj.list().gen == "" {
			items := obj.list().items
			i := key.i
			if i < 0 {
				i += int64(len(items))
			}
			if i >= 0 && i < int64(len(items)) {
				return items[i], nil
			}
			return undefined("'" + obj.typeName() + " object' has no element " + key.reprInt()), nil
		}
	case KindString:
		if key.kind == KindInt || key.kind == KindBool {
			s := obj.s
			n := int64(runeLen(s))
			i := key.i
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				if isASCII(s) {
					return String(s[i : i+1]), nil
				}
				offs := charOffsets(s)
				return String(s[offs[i]:offs[i+1]]), nil
			}
			return undefined("'str object' has no element " + key.reprInt()), nil
		}
	}
	if key.kind == KindString {
		return r.getattr(off, obj, key.s)
	}
	if obj.kind == KindDict {
		k, _ := r.repr(off, key)
		return undefined("'dict object' has no element " + k), nil
	}
	return undefined("'" + obj.typeName() + " object' has no element"), nil
}

func (v Value) reprInt() string {
	if v.kind == KindBool {
		if v.i != 0 {
			return "True"
		}
		return "False"
	}
	return formatInt(v.i)
}

// sliceIndex reads a slice bound: nil/None → absent.
func (r *renderer) sliceIndex(off int, e expr, sc *scope) (int64, bool, error) {
	if e == nil {
		return 0, false, nil
	}
	v, err := r.eval(e, sc)
	if err != nil {
		return 0, false, err
	}
	switch v.kind {
	case KindNone:
		return 0, false, nil
	case KindInt, KindBool:
		return v.i, true, nil
	case KindUndefined:
		return 0, false, r.undefinedError(off, v)
	}
	return 0, false, r.errorf(off, "slice indices must be integers or None")
}

// sliceBounds is CPython's PySlice_AdjustIndices: the start, step and count.
func sliceBounds(length, start, stop, step int64, hasStart, hasStop bool) (int64, int64) {
	var lower, upper int64
	if step > 0 {
		lower, upper = 0, length
	} else {
		lower, upper = -1, length-1
	}
	clamp := func(x int64) int64 {
		if x < 0 {
			x += length
			if x < lower {
				x = lower
			}
		} else if x > upper {
			x = upper
		}
		return x
	}
	if hasStart {
		start = clamp(start)
	} else if step < 0 {
		start = upper
	} else {
		start = lower
	}
	if hasStop {
		stop = clamp(stop)
	} else if step < 0 {
		stop = lower
	} else {
		stop = upper
	}
	var n int64
	if step > 0 {
		if stop > start {
			n = (stop - start + step - 1) / step
		}
	} else if start > stop {
		n = (start - stop - step - 1) / -step
	}
	return start, n
}

func (r *renderer) evalSlice(s *sliceExpr, obj Value, sc *scope) (Value, error) {
	start, hasStart, err := r.sliceIndex(s.off, s.start, sc)
	if err != nil {
		return Value{}, err
	}
	stop, hasStop, err := r.sliceIndex(s.off, s.stop, sc)
	if err != nil {
		return Value{}, err
	}
	step, hasStep, err := r.sliceIndex(s.off, s.step, sc)
	if err != nil {
		return Value{}, err
	}
	if !hasStep {
		step = 1
	}
	if step == 0 {
		return Value{}, r.errorf(s.off, "slice step cannot be zero")
	}
	if step == math.MinInt64 {
		step = -math.MaxInt64
	}
	switch obj.kind {
	case KindUndefined:
		return Value{}, r.undefinedError(s.off, obj)
	case KindList:
		items := obj.list().items
		first, n := sliceBounds(int64(len(items)), start, stop, step, hasStart, hasStop)
		if err := r.chargeList(s.off, int(n)); err != nil {
			return Value{}, err
		}
		out := make([]Value, n)
		for i := int64(0); i < n; i++ {
			out[i] = items[first+i*step]
		}
		return listValue(out, obj.list().tuple), nil
	case KindString:
		str := obj.s
		offs := charOffsets(str)
		length := int64(len(str))
		if offs != nil {
			length = int64(len(offs) - 1)
		}
		first, n := sliceBounds(length, start, stop, step, hasStart, hasStop)
		if step == 1 {
			if offs == nil {
				return String(str[first : first+n]), nil
			}
			return String(str[offs[first]:offs[first+n]]), nil
		}
		if err := r.charge(s.off, n*4); err != nil {
			return Value{}, err
		}
		var b strings.Builder
		for i := int64(0); i < n; i++ {
			k := first + i*step
			if offs == nil {
				b.WriteByte(str[k])
			} else {
				b.WriteString(str[offs[k]:offs[k+1]])
			}
		}
		return String(b.String()), nil
	}
	return undefined("'" + obj.typeName() + " object' has no element slice"), nil
}

// evalArgs evaluates a call's arguments, expanding *args and **kwargs.
func (r *renderer) evalArgs(off int, ca *callArgs, sc *scope) ([]Value, []kwArg, error) {
	var args []Value
	if len(ca.args) > 0 {
		args = make([]Value, 0, len(ca.args))
	}
	for _, a := range ca.args {
		v, err := r.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	if ca.dynArgs != nil {
		v, err := r.eval(ca.dynArgs, sc)
		if err != nil {
			return nil, nil, err
		}
		items, err := r.iterItems(off, v)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, items...)
	}
	var kw []kwArg
	for _, k := range ca.kwargs {
		v, err := r.eval(k.e, sc)
		if err != nil {
			return nil, nil, err
		}
		kw = append(kw, kwArg{name: k.name, v: v})
	}
	if ca.dynKwargs != nil {
		v, err := r.eval(ca.dynKwargs, sc)
		if err != nil {
			return nil, nil, err
		}
		if v.kind != KindDict {
			return nil, nil, r.errorf(off, "argument after ** must be a mapping, not %s", v.typeName())
		}
		d := v.dict()
		for i, k := range d.keys {
			if k.kind != KindString {
				return nil, nil, r.errorf(off, "keywords must be strings")
			}
			kw = append(kw, kwArg{name: k.s, v: d.vals[i]})
		}
	}
	for i := range kw {
		for j := 0; j < i; j++ {
			if kw[j].name == kw[i].name {
				return nil, nil, r.errorf(off, "got multiple values for keyword argument '%s'", kw[i].name)
			}
		}
	}
	return args, kw, nil
}

func (r *renderer) evalCall(c *callExpr, sc *scope, caller *Value) (Value, error) {
	fn, err := r.eval(c.fn, sc)
	if err != nil {
		return Value{}, err
	}
	args, kw, err := r.evalArgs(c.off, &c.callArgs, sc)
	if err != nil {
		return Value{}, err
	}
	if caller != nil {
		kw = append(kw, kwArg{name: "caller", v: *caller})
	}
	return r.call(c.off, fn, args, kw)
}

// call calls a callable value.
func (r *renderer) call(off int, fn Value, args []Value, kw []kwArg) (Value, error) {
	switch fn.kind {
	case KindCallable:
		switch f := fn.p.(type) {
		case *macro:
			return r.callMacro(off, f, args, kw)
		case *builtin:
			return f.fn(r, off, args, kw)
		case *boundMethod:
			return r.callMethod(off, f.recv, f.name, args, kw)
		case *loopObj:
			return f.call(r, off, args, kw)
		case *joiner:
			if len(args) > 0 || len(kw) > 0 {
				return Value{}, r.errorf(off, "joiner() takes no arguments")
			}
			if !f.used {
				f.used = true
				return String(""), nil
			}
			return String(f.sep), nil
		}
	case KindUndefined:
		return Value{}, r.undefinedError(off, fn)
	}
	return Value{}, r.errorf(off, "'%s' object is not callable", fn.typeName())
}

// enterCall bounds the call depth.
func (r *renderer) enterCall(off int) error {
	r.calls++
	if r.calls > r.lim.CallDepth {
		r.calls--
		return r.limit(off, LimitCallDepth, int64(r.lim.CallDepth))
	}
	return nil
}

func (r *renderer) callMacro(off int, m *macro, args []Value, kw []kwArg) (Value, error) {
	def := m.def
	name := "'" + def.name + "'"
	if m.isCaller {
		name = "None"
	}
	if err := r.enterCall(off); err != nil {
		return Value{}, err
	}
	defer func() { r.calls-- }()
	sc := &scope{parent: m.sc}
	n := len(def.params)
	firstDefault := n - len(def.defaults)
	used := make([]bool, len(kw))
	takeKw := func(param string) (Value, bool) {
		for i := range kw {
			if !used[i] && kw[i].name == param {
				used[i] = true
				return kw[i].v, true
			}
		}
		return Value{}, false
	}
	var pending []int
	for i, param := range def.params {
		var v Value
		var ok bool
		if i < len(args) {
			v, ok = args[i], true
		} else {
			v, ok = takeKw(param)
		}
		if !ok {
			if i >= firstDefault {
				pending = append(pending, i)
			} else {
				v = undefined("parameter '" + param + "' was not provided")
			}
		}
		sc.set(param, v)
	}
	if def.hasCaller {
		if _, declared := paramIndex(def.params, "caller"); !declared {
			v, ok := takeKw("caller")
			if !ok {
				v = undefined("No caller defined")
			}
			sc.set("caller", v)
		}
	}
	if def.kwargs {
		d := NewDict()
		for i := range kw {
			if !used[i] {
				d.Set(kw[i].name, kw[i].v)
			}
		}
		sc.set("kwargs", d.Value())
	} else {
		for i := range kw {
			if !used[i] {
				if kw[i].name == "caller" {
					return Value{}, r.errorf(off, "macro %s was invoked with two values for the special caller argument", name)
				}
				return Value{}, r.errorf(off, "macro %s takes no keyword argument '%s'", name, kw[i].name)
			}
		}
	}
	if def.varargs {
		var extra []Value
		if len(args) > n {
			extra = args[n:]
		}
		sc.set("varargs", listValue(extra, true))
	} else if len(args) > n {
		return Value{}, r.errorf(off, "macro %s takes not more than %d argument(s)", name, n)
	}
	for _, i := range pending {
		v, err := r.eval(def.defaults[i-firstDefault], sc)
		if err != nil {
			return Value{}, err
		}
		sc.set(def.params[i], v)
	}
	s, err := r.capture(func() error {
		c, err := r.execBlock(def.body, sc)
		if err == nil && c != ctrlNone {
			err = r.errorf(off, "break or continue outside a loop")
		}
		return err
	})
	if err != nil {
		return Value{}, err
	}
	return String(s), nil
}

func paramIndex(params []string, name string) (int, bool) {
	for i, p := range params {
		if p == name {
			return i, true
		}
	}
	return -1, false
}
