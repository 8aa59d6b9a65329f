package jinja

import (
	"time"
)

// globals are the functions every template sees: jinja2's defaults that
// chat templates use, and transformers' raise_exception and strftime_now.
var globals map[string]Value

func init() {
	globals = map[string]Value{}
	for _, b := range []*builtin{
		{name: "range", fn: builtinRange},
		{name: "namespace", fn: builtinNamespace},
		{name: "dict", fn: builtinDict},
		{name: "cycler", fn: builtinCycler},
		{name: "joiner", fn: builtinJoiner},
		{name: "raise_exception", fn: builtinRaise},
		{name: "strftime_now", fn: builtinStrftimeNow},
	} {
		globals[b.name] = Value{kind: KindCallable, p: b}
	}
}

// builtinRange is range(stop) / range(start, stop[, step]), refusing more
// than Limits.Range items like jinja2's sandbox (MAX_RANGE).
func builtinRange(r *renderer, off int, args []Value, kw []kwArg) (Value, error) {
	if len(kw) > 0 {
		return Value{}, r.errorf(off, "range() takes no keyword arguments")
	}
	if len(args) < 1 || len(args) > 3 {
		return Value{}, r.errorf(off, "range expected 1 to 3 arguments, got %d", len(args))
	}
	var n [3]int64
	for i, a := range args {
		v, err := r.wantInt(off, "range", a)
		if err != nil {
			return Value{}, r.errorf(off, "'%s' object cannot be interpreted as an integer", a.typeName())
		}
		n[i] = v
	}
	start, stop, step := int64(0), n[0], int64(1)
	if len(args) >= 2 {
		start, stop = n[0], n[1]
	}
	if len(args) == 3 {
		step = n[2]
	}
	if step == 0 {
		return Value{}, r.errorf(off, "range() arg 3 must not be zero")
	}
	// the count, in unsigned arithmetic so that no difference overflows
	var count uint64
	if step > 0 && stop > start {
		count = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	} else if step < 0 && start > stop {
		count = (uint64(start)-uint64(stop)-1)/(uint64(-(step+1))+1) + 1
	}
	if count > uint64(r.lim.Range) {
		return Value{}, r.limit(off, LimitRange, r.lim.Range)
	}
	if err := r.chargeList(off, int(count)); err != nil {
		return Value{}, err
	}
	items := make([]Value, count)
	for i := range items {
		items[i] = Int(start + int64(i)*step)
	}
	v := listValue(items, false)
	v.list().rng = "range(" + formatInt(start) + ", " + formatInt(stop) + ")"
	if step != 1 {
		v.list().rng = "range(" + formatInt(start) + ", " + formatInt(stop) + ", " + formatInt(step) + ")"
	}
	return v, nil
}

// builtinNamespace is namespace(mapping, **attrs).
func builtinNamespace(r *renderer, off int, args []Value, kw []kwArg) (Value, error) {
	d, err := r.dictFromArgs(off, "namespace", args, kw)
	if err != nil {
		return Value{}, err
	}
	return Value{kind: KindNamespace, p: &Namespace{attrs: d}}, nil
}

// builtinDict is dict(mapping or pairs, **kwargs).
func builtinDict(r *renderer, off int, args []Value, kw []kwArg) (Value, error) {
	d, err := r.dictFromArgs(off, "dict", args, kw)
	if err != nil {
		return Value{}, err
	}
	return d.Value(), nil
}

func (r *renderer) dictFromArgs(off int, fname string, args []Value, kw []kwArg) (*Dict, error) {
	if len(args) > 1 {
		return nil, r.errorf(off, "%s expected at most 1 argument, got %d", fname, len(args))
	}
	d := NewDict()
	if len(args) == 1 {
		src := args[0]
		switch src.kind {
		case KindDict:
			sd := src.dict()
			if err := r.charge(off, int64(len(sd.keys))*entryBytes); err != nil {
				return nil, err
			}
			for i := range sd.keys {
				d.set(sd.keys[i], sd.vals[i])
			}
		default:
			items, err := r.iterItems(off, src)
			if err != nil {
				return nil, err
			}
			if err := r.charge(off, int64(len(items))*entryBytes); err != nil {
				return nil, err
			}
			for i, it := range items {
				pair, err := r.iterItems(off, it)
				if err != nil || len(pair) != 2 {
					return nil, r.errorf(off, "%s update sequence element #%d has the wrong length (want 2)", fname, i)
				}
				if _, ok := keyOf(pair[0]); !ok {
					return nil, r.errorf(off, "unhashable type: '%s'", pair[0].typeName())
				}
				d.set(pair[0], pair[1])
			}
		}
	}
	if err := r.charge(off, int64(len(kw))*entryBytes); err != nil {
		return nil, err
	}
	for _, k := range kw {
		d.Set(k.name, k.v)
	}
	if d.depth > maxValueDepth {
		return nil, r.limit(off, LimitNesting, maxValueDepth)
	}
	return d, nil
}

func builtinCycler(r *renderer, off int, args []Value, kw []kwArg) (Value, error) {
	if len(kw) > 0 {
		return Value{}, r.errorf(off, "cycler() takes no keyword arguments")
	}
	return Value{kind: KindObject, p: &cycler{items: append([]Value(nil), args...)}}, nil
}

func builtinJoiner(r *renderer, off int, args []Value, kw []kwArg) (Value, error) {
	a, got, err := r.bind(off, "joiner", args, kw, 0, "sep")
	if err != nil {
		return Value{}, err
	}
	sep := ", "
	if got&1 != 0 {
		if sep, err = r.str(off, a[0]); err != nil {
			return Value{}, err
		}
	}
	return Value{kind: KindCallable, p: &joiner{sep: sep}}, nil
}

// builtinRaise is transformers' raise_exception(message).
func builtinRaise(r *renderer, off int, args []Value, kw []kwArg) (Value, error) {
	msg := ""
	if len(args) > 0 {
		var err error
		if msg, err = r.str(off, args[0]); err != nil {
			return Value{}, err
		}
	}
	return Value{}, &RaiseError{Pos: r.pos(off), Message: msg}
}

// builtinStrftimeNow is transformers' strftime_now(format): the render's
// clock (RenderOptions.Now) formatted like Python's datetime.strftime.
func builtinStrftimeNow(r *renderer, off int, args []Value, kw []kwArg) (Value, error) {
	a, _, err := r.bind(off, "strftime_now", args, kw, 1, "format")
	if err != nil {
		return Value{}, err
	}
	f, err := r.wantStr(off, "strftime_now", a[0])
	if err != nil {
		return Value{}, err
	}
	return r.result(off, strftime(r.now(), f))
}

// strftime formats t like C's strftime in the C locale (what Python's
// datetime.strftime gives on Linux); unknown directives are kept as they are.
func strftime(t time.Time, f string) string {
	var b []byte
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b = append(b, f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			b = appendPadded(b, t.Year(), 4)
		case 'y':
			b = appendPadded(b, t.Year()%100, 2)
		case 'm':
			b = appendPadded(b, int(t.Month()), 2)
		case 'd':
			b = appendPadded(b, t.Day(), 2)
		case 'e':
			if t.Day() < 10 {
				b = append(b, ' ')
			}
			b = appendPadded(b, t.Day(), 1)
		case 'H':
			b = appendPadded(b, t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			b = appendPadded(b, h, 2)
		case 'M':
			b = appendPadded(b, t.Minute(), 2)
		case 'S':
			b = appendPadded(b, t.Second(), 2)
		case 'f':
			b = appendPadded(b, t.Nanosecond()/1000, 6)
		case 'p':
			if t.Hour() < 12 {
				b = append(b, "AM"...)
			} else {
				b = append(b, "PM"...)
			}
		case 'b', 'h':
			b = append(b, t.Month().String()[:3]...)
		case 'B':
			b = append(b, t.Month().String()...)
		case 'a':
			b = append(b, t.Weekday().String()[:3]...)
		case 'A':
			b = append(b, t.Weekday().String()...)
		case 'j':
			b = appendPadded(b, t.YearDay(), 3)
		case 'w':
			b = appendPadded(b, int(t.Weekday()), 1)
		case 'u':
			w := int(t.Weekday())
			if w == 0 {
				w = 7
			}
			b = appendPadded(b, w, 1)
		case 'Z':
			name, _ := t.Zone()
			b = append(b, name...)
		case 'z':
			_, o := t.Zone()
			sign := byte('+')
			if o < 0 {
				sign, o = '-', -o
			}
			b = append(b, sign)
			b = appendPadded(b, o/3600, 2)
			b = appendPadded(b, o%3600/60, 2)
		case 'D':
			b = append(b, strftime(t, "%m/%d/%y")...)
		case 'F':
			b = append(b, strftime(t, "%Y-%m-%d")...)
		case 'T':
			b = append(b, strftime(t, "%H:%M:%S")...)
		case 'R':
			b = append(b, strftime(t, "%H:%M")...)
		case 'c':
			b = append(b, strftime(t, "%a %b %e %H:%M:%S %Y")...)
		case 'x':
			b = append(b, strftime(t, "%m/%d/%y")...)
		case 'X':
			b = append(b, strftime(t, "%H:%M:%S")...)
		case 'n':
			b = append(b, '\n')
		case 't':
			b = append(b, '\t')
		case '%':
			b = append(b, '%')
		default:
			b = append(b, '%', f[i])
		}
	}
	return string(b)
}

func appendPadded(b []byte, v, width int) []byte {
	s := itoaPad(v)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

func itoaPad(v int) string { return formatInt(int64(v)) }
