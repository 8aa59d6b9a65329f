package jinja

import (
	"unicode"
)

// testFunc implements one test (`x is name(args)`).
type testFunc func(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error)

var tests map[string]testFunc

func init() {
	tests = map[string]testFunc{
		"boolean":     kindTest(func(v Value) bool { return v.kind == KindBool }),
		"callable":    kindTest(func(v Value) bool { return v.kind == KindCallable || v.kind == KindUndefined }),
		"defined":     kindTest(func(v Value) bool { return v.kind != KindUndefined }),
		"undefined":   kindTest(func(v Value) bool { return v.kind == KindUndefined }),
		"none":        kindTest(func(v Value) bool { return v.kind == KindNone }),
		"true":        kindTest(func(v Value) bool { return v.kind == KindBool && v.i == 1 }),
		"false":       kindTest(func(v Value) bool { return v.kind == KindBool && v.i == 0 }),
		"integer":     kindTest(func(v Value) bool { return v.kind == KindInt }),
		"float":       kindTest(func(v Value) bool { return v.kind == KindFloat }),
		"number":      kindTest(func(v Value) bool { return v.isNumber() }),
		"string":      kindTest(func(v Value) bool { return v.kind == KindString }),
		"mapping":     kindTest(func(v Value) bool { return v.kind == KindDict }),
		"escaped":     kindTest(func(v Value) bool { return false }),
		"iterable":    kindTest(isIterable),
		"sequence":    kindTest(isSequence),
		"odd":         parityTest(1),
		"even":        parityTest(0),
		"divisibleby": testDivisible,
		"lower":       caseTest(false),
		"upper":       caseTest(true),
		"sameas":      testSameas,
		"in":          testIn,
		"filter":      testFilterExists,
		"test":        testTestExists,
		"eq":          cmpTest("=="),
		"equalto":     cmpTest("=="),
		"==":          cmpTest("=="),
		"ne":          cmpTest("!="),
		"!=":          cmpTest("!="),
		"lt":          cmpTest("<"),
		"lessthan":    cmpTest("<"),
		"<":           cmpTest("<"),
		"le":          cmpTest("<="),
		"<=":          cmpTest("<="),
		"gt":          cmpTest(">"),
		"greaterthan": cmpTest(">"),
		">":           cmpTest(">"),
		"ge":          cmpTest(">="),
		">=":          cmpTest(">="),
	}
}

func (r *renderer) callTest(t *testExpr, v Value, sc *scope) (bool, error) {
	args, kw, err := r.evalArgs(t.off, &t.callArgs, sc)
	if err != nil {
		return false, err
	}
	return r.applyTest(t.off, t.name, v, args, kw)
}

func (r *renderer) applyTest(off int, name string, v Value, args []Value, kw []kwArg) (bool, error) {
	fn, ok := tests[name]
	if !ok {
		return false, r.errorf(off, "no test named '%s'", name)
	}
	return fn(r, off, v, args, kw)
}

func kindTest(f func(Value) bool) testFunc {
	return func(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
		if len(args) > 0 || len(kw) > 0 {
			return false, r.errorf(off, "test takes no arguments")
		}
		return f(v), nil
	}
}

// isIterable is jinja2's iterable test (iter(v) works).
func isIterable(v Value) bool {
	switch v.kind {
	case KindString, KindList, KindDict, KindUndefined:
		return true
	case KindObject:
		_, ok := v.p.(*loopObj)
		return ok
	}
	return false
}

// isSequence is jinja2's sequence test (len(v) and v[...] work).
func isSequence(v Value) bool {
	switch v.kind {
	case KindString, KindDict, KindUndefined:
		return true
	case KindList:
		return v.list().gen == ""
	}
	return false
}

func parityTest(want int64) testFunc {
	return func(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
		if len(args) > 0 || len(kw) > 0 {
			return false, r.errorf(off, "test takes no arguments")
		}
		m, err := r.binop(off, "%", v, Int(2))
		if err != nil {
			return false, err
		}
		return equal(m, Int(want)), nil
	}
}

func testDivisible(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
	a, _, err := r.bind(off, "divisibleby", args, kw, 1, "num")
	if err != nil {
		return false, err
	}
	m, err := r.binop(off, "%", v, a[0])
	if err != nil {
		return false, err
	}
	return equal(m, Int(0)), nil
}

func caseTest(upper bool) testFunc {
	return func(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
		if len(args) > 0 || len(kw) > 0 {
			return false, r.errorf(off, "test takes no arguments")
		}
		s, err := r.str(off, v)
		if err != nil {
			return false, err
		}
		cased := false
		for _, c := range s {
			switch {
			case unicode.IsUpper(c) || unicode.IsTitle(c):
				if !upper {
					return false, nil
				}
				cased = true
			case unicode.IsLower(c):
				if upper {
					return false, nil
				}
				cased = true
			}
		}
		return cased, nil
	}
}

func testSameas(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
	a, _, err := r.bind(off, "sameas", args, kw, 1, "other")
	if err != nil {
		return false, err
	}
	o := a[0]
	if v.kind != o.kind {
		return false, nil
	}
	switch v.kind {
	case KindNone, KindUndefined:
		return true, nil
	case KindBool:
		return v.i == o.i, nil
	case KindInt:
		// CPython caches small ints; `is` is true for equal values there
		return v.i == o.i && v.i >= -5 && v.i <= 256, nil
	case KindFloat:
		return false, nil
	case KindString:
		return v.s == o.s && len(v.s) <= 1, nil
	}
	return v.p == o.p, nil
}

func testIn(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
	a, _, err := r.bind(off, "in", args, kw, 1, "seq")
	if err != nil {
		return false, err
	}
	return r.contains(off, a[0], v)
}

func testFilterExists(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
	if len(args) > 0 || len(kw) > 0 {
		return false, r.errorf(off, "test takes no arguments")
	}
	_, ok := filters[v.s]
	return v.kind == KindString && ok, nil
}

func testTestExists(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
	if len(args) > 0 || len(kw) > 0 {
		return false, r.errorf(off, "test takes no arguments")
	}
	_, ok := tests[v.s]
	return v.kind == KindString && ok, nil
}

func cmpTest(op string) testFunc {
	return func(r *renderer, off int, v Value, args []Value, kw []kwArg) (bool, error) {
		a, _, err := r.bind(off, op, args, kw, 1, "other")
		if err != nil {
			return false, err
		}
		return r.compare(off, op, v, a[0])
	}
}
