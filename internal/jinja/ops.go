package jinja

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

func (r *renderer) typeErr(off int, op string, a, b Value) error {
	return r.errorf(off, "unsupported operand type(s) for %s: '%s' and '%s'", op, a.typeName(), b.typeName())
}

func (r *renderer) overflow(off int) error {
	return r.errorf(off, "integer overflow (this engine's integers are 64-bit)")
}

// binop is Python's a op b for + - * / // % **.
func (r *renderer) binop(off int, op string, a, b Value) (Value, error) {
	if a.kind == KindUndefined {
		return Value{}, r.undefinedError(off, a)
	}
	if b.kind == KindUndefined {
		return Value{}, r.undefinedError(off, b)
	}
	if a.isNumber() && b.isNumber() {
		return r.arith(off, op, a, b)
	}
	switch op {
	case "+":
		switch {
		case a.kind == KindString && b.kind == KindString:
			if a.isMarkup() || b.isMarkup() {
				// Markup.__add__ / __radd__ escape the plain operand
				x, y := a.s, b.s
				if !a.isMarkup() {
					x = htmlEscaper.Replace(x)
				}
				if !b.isMarkup() {
					y = htmlEscaper.Replace(y)
				}
				if err := r.charge(off, int64(len(x)+len(y))); err != nil {
					return Value{}, err
				}
				return markup(x + y), nil
			}
			if err := r.charge(off, int64(len(a.s)+len(b.s))); err != nil {
				return Value{}, err
			}
			return String(a.s + b.s), nil
		case a.kind == KindList && b.kind == KindList && a.list().tuple == b.list().tuple && a.list().gen == "" && b.list().gen == "" && a.list().rng == "" && b.list().rng == "":
			la, lb := a.list().items, b.list().items
			if err := r.chargeList(off, len(la)+len(lb)); err != nil {
				return Value{}, err
			}
			out := make([]Value, 0, len(la)+len(lb))
			out = append(append(out, la...), lb...)
			return r.newList(off, out, a.list().tuple)
		case a.kind == KindString || a.kind == KindList:
			return Value{}, r.errorf(off, "can only concatenate %s (not \"%s\") to %s", a.typeName(), b.typeName(), a.typeName())
		}
	case "*":
		switch {
		case (a.kind == KindString || a.isPlainList()) && (b.kind == KindInt || b.kind == KindBool):
			return r.repeat(off, a, b.i)
		case (b.kind == KindString || b.isPlainList()) && (a.kind == KindInt || a.kind == KindBool):
			return r.repeat(off, b, a.i)
		}
	case "%":
		if a.kind == KindString {
			if a.isMarkup() {
				// Markup.__mod__ escapes the arguments
				v, err := r.printfEscaped(off, a.s, b)
				return markup(v.s), err
			}
			return r.printf(off, a.s, b)
		}
	}
	return Value{}, r.typeErr(off, op, a, b)
}

// repeat is s * n for a string or list.
func (r *renderer) repeat(off int, v Value, n int64) (Value, error) {
	if n <= 0 {
		if v.kind == KindString {
			return String(""), nil
		}
		return listValue(nil, v.list().tuple), nil
	}
	if v.kind == KindString {
		if len(v.s) > 0 && n > r.lim.Alloc/int64(len(v.s)) {
			return Value{}, r.limit(off, LimitAlloc, r.lim.Alloc)
		}
		if err := r.charge(off, int64(len(v.s))*n); err != nil {
			return Value{}, err
		}
		return String(strings.Repeat(v.s, int(n))), nil
	}
	items := v.list().items
	if len(items) > 0 && n > r.lim.Alloc/int64(len(items)*valueBytes) {
		return Value{}, r.limit(off, LimitAlloc, r.lim.Alloc)
	}
	if err := r.chargeList(off, len(items)*int(n)); err != nil {
		return Value{}, err
	}
	out := make([]Value, 0, len(items)*int(n))
	for i := int64(0); i < n; i++ {
		out = append(out, items...)
	}
	return listValue(out, v.list().tuple), nil
}

// arith is Python arithmetic on int, float and bool.
func (r *renderer) arith(off int, op string, a, b Value) (Value, error) {
	if a.kind != KindFloat && b.kind != KindFloat {
		x, y := a.i, b.i
		switch op {
		case "+":
			s := x + y
			if (s > x) != (y > 0) {
				return Value{}, r.overflow(off)
			}
			return Int(s), nil
		case "-":
			s := x - y
			if (s < x) != (y > 0) {
				return Value{}, r.overflow(off)
			}
			return Int(s), nil
		case "*":
			if x == 0 || y == 0 {
				return Int(0), nil
			}
			hi, lo := bits.Mul64(uint64(absInt(x)), uint64(absInt(y)))
			if hi != 0 || lo > math.MaxInt64 || x == math.MinInt64 || y == math.MinInt64 {
				return Value{}, r.overflow(off)
			}
			p := int64(lo)
			if (x < 0) != (y < 0) {
				p = -p
			}
			return Int(p), nil
		case "/":
			if y == 0 {
				return Value{}, r.errorf(off, "division by zero")
			}
			return Float(float64(x) / float64(y)), nil
		case "//":
			if y == 0 {
				return Value{}, r.errorf(off, "integer division or modulo by zero")
			}
			if x == math.MinInt64 && y == -1 {
				return Value{}, r.overflow(off)
			}
			q := x / y
			if (x%y != 0) && ((x < 0) != (y < 0)) {
				q--
			}
			return Int(q), nil
		case "%":
			if y == 0 {
				return Value{}, r.errorf(off, "integer division or modulo by zero")
			}
			if y == -1 {
				return Int(0), nil
			}
			m := x % y
			if m != 0 && (m < 0) != (y < 0) {
				m += y
			}
			return Int(m), nil
		case "**":
			if y < 0 {
				if x == 0 {
					return Value{}, r.errorf(off, "0.0 cannot be raised to a negative power")
				}
				return Float(math.Pow(float64(x), float64(y))), nil
			}
			res := int64(1)
			base := x
			for e := y; e > 0; e >>= 1 {
				if e&1 == 1 {
					v, err := r.arith(off, "*", Int(res), Int(base))
					if err != nil {
						return Value{}, err
					}
					res = v.i
				}
				if e > 1 {
					v, err := r.arith(off, "*", Int(base), Int(base))
					if err != nil {
						return Value{}, err
					}
					base = v.i
				}
			}
			return Int(res), nil
		}
	}
	x, _ := a.num()
	y, _ := b.num()
	switch op {
	case "+":
		return Float(x + y), nil
	case "-":
		return Float(x - y), nil
	case "*":
		return Float(x * y), nil
	case "/":
		if y == 0 {
			return Value{}, r.errorf(off, "float division by zero")
		}
		return Float(x / y), nil
	case "//":
		if y == 0 {
			return Value{}, r.errorf(off, "float floor division by zero")
		}
		return Float(pyFloorDiv(x, y)), nil
	case "%":
		if y == 0 {
			return Value{}, r.errorf(off, "float modulo")
		}
		return Float(pyFmod(x, y)), nil
	case "**":
		if x == 0 && y < 0 {
			return Value{}, r.errorf(off, "0.0 cannot be raised to a negative power")
		}
		if x < 0 && y != math.Trunc(y) {
			return Value{}, r.errorf(off, "a negative number raised to a fractional power is complex")
		}
		p := math.Pow(x, y)
		if math.IsInf(p, 0) && !math.IsInf(x, 0) && !math.IsInf(y, 0) {
			return Value{}, r.errorf(off, "numerical result out of range")
		}
		return Float(p), nil
	}
	return Value{}, r.typeErr(off, op, a, b)
}

func absInt(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func pyFmod(x, y float64) float64 {
	m := math.Mod(x, y)
	if m != 0 && (m < 0) != (y < 0) {
		m += y
	}
	if m == 0 {
		m = math.Copysign(0, y)
	}
	return m
}

func pyFloorDiv(x, y float64) float64 {
	m := math.Mod(x, y)
	div := (x - m) / y
	if m != 0 && (y < 0) != (m < 0) {
		div--
	}
	if div == 0 {
		return math.Copysign(0, x/y)
	}
	f := math.Floor(div)
	if div-f > 0.5 {
		f++
	}
	return f
}

// compare is a comparison operator of Python.
func (r *renderer) compare(off int, op string, a, b Value) (bool, error) {
	switch op {
	case "==":
		return equal(a, b), nil
	case "!=":
		return !equal(a, b), nil
	case "in":
		return r.contains(off, b, a)
	case "notin":
		ok, err := r.contains(off, b, a)
		return !ok, err
	}
	c, err := r.order(off, op, a, b)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, r.errorf(off, "unknown comparison %s", op)
}

// order compares two orderable values (-1, 0, 1). NaN compares unordered:
// every ordering comparison with it is false, which order reports as 2.
func (r *renderer) order(off int, op string, a, b Value) (int, error) {
	if a.kind == KindUndefined {
		return 0, r.undefinedError(off, a)
	}
	if b.kind == KindUndefined {
		return 0, r.undefinedError(off, b)
	}
	switch {
	case a.isNumber() && b.isNumber():
		if a.kind != KindFloat && b.kind != KindFloat {
			switch {
			case a.i < b.i:
				return -1, nil
			case a.i > b.i:
				return 1, nil
			}
			return 0, nil
		}
		x, _ := a.num()
		y, _ := b.num()
		switch {
		case x < y:
			return -1, nil
		case x > y:
			return 1, nil
		case x == y:
			return 0, nil
		}
		return unordered(op), nil
	case a.kind == KindString && b.kind == KindString:
		return strings.Compare(a.s, b.s), nil
	case a.isPlainList() && b.isPlainList() && a.list().tuple == b.list().tuple:
		la, lb := a.list().items, b.list().items
		for i := 0; i < len(la) && i < len(lb); i++ {
			if equal(la[i], lb[i]) {
				continue
			}
			return r.order(off, op, la[i], lb[i])
		}
		switch {
		case len(la) < len(lb):
			return -1, nil
		case len(la) > len(lb):
			return 1, nil
		}
		return 0, nil
	}
	return 0, r.errorf(off, "'%s' not supported between instances of '%s' and '%s'", op, a.typeName(), b.typeName())
}

// unordered returns a comparison result that makes op false (for NaN).
func unordered(op string) int {
	switch op {
	case "<", "<=":
		return 1
	}
	return -1
}

// contains is Python's `x in container`.
func (r *renderer) contains(off int, container, x Value) (bool, error) {
	switch container.kind {
	case KindString:
		if x.kind != KindString {
			if x.kind == KindUndefined {
				return false, r.undefinedError(off, x)
			}
			return false, r.errorf(off, "'in <string>' requires string as left operand, not %s", x.typeName())
		}
		return strings.Contains(container.s, x.s), nil
	case KindList:
		for _, it := range container.list().items {
			if equal(it, x) {
				return true, nil
			}
		}
		return false, nil
	case KindDict:
		if _, ok := keyOf(x); !ok {
			if x.kind == KindUndefined {
				return false, r.undefinedError(off, x)
			}
			return false, r.errorf(off, "unhashable type: '%s'", x.typeName())
		}
		_, ok := container.dict().get(x)
		return ok, nil
	case KindUndefined:
		return false, nil
	}
	return false, r.errorf(off, "argument of type '%s' is not iterable", container.typeName())
}

// printfEscaped is Markup("format") % args: each argument HTML-escaped.
func (r *renderer) printfEscaped(off int, format string, args Value) (Value, error) {
	esc := func(v Value) (Value, error) {
		if v.isMarkup() {
			return v, nil
		}
		if v.kind == KindString {
			return String(htmlEscaper.Replace(v.s)), nil
		}
		return v, nil
	}
	switch args.kind {
	case KindList:
		items := make([]Value, len(args.list().items))
		for i, it := range args.list().items {
			var err error
			if items[i], err = esc(it); err != nil {
				return Value{}, err
			}
		}
		args = listValue(items, args.list().tuple)
	case KindDict:
		d := NewDict()
		src := args.dict()
		for i := range src.keys {
			v, err := esc(src.vals[i])
			if err != nil {
				return Value{}, err
			}
			d.set(src.keys[i], v)
		}
		args = d.Value()
	default:
		var err error
		if args, err = esc(args); err != nil {
			return Value{}, err
		}
	}
	return r.printf(off, format, args)
}

// printf is Python's "format" % args.
func (r *renderer) printf(off int, format string, args Value) (Value, error) {
	var list []Value
	var mapping *Dict
	// Python treats a non-tuple argument with __getitem__ (a dict, a list) as
	// a possible mapping: %(name)s reads it, and unused it is no error.
	mappingLike := false
	switch args.kind {
	case KindList:
		if args.list().tuple {
			list = args.list().items
		} else {
			list = []Value{args}
			mappingLike = args.list().gen == ""
		}
	case KindDict:
		mapping = args.dict()
		list = []Value{args}
		mappingLike = true
	default:
		list = []Value{args}
	}
	var b strings.Builder
	next := 0
	used := false
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return Value{}, r.errorf(off, "incomplete format")
		}
		var arg Value
		haveArg := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || mapping == nil {
				return Value{}, r.errorf(off, "format requires a mapping")
			}
			v, ok := mapping.getStr(format[i+1 : i+end])
			if !ok {
				return Value{}, r.errorf(off, "key %s not found in format mapping", reprString(format[i+1:i+end]))
			}
			arg, haveArg, used = v, true, true
			i += end + 1
		}
		spec := "%"
		for i < len(format) && strings.IndexByte("-+ 0#", format[i]) >= 0 {
			spec += string(format[i])
			i++
		}
		for i < len(format) && (format[i] >= '0' && format[i] <= '9' || format[i] == '.') {
			spec += string(format[i])
			i++
		}
		for i < len(format) && (format[i] == 'l' || format[i] == 'h' || format[i] == 'L') {
			i++
		}
		if i >= len(format) {
			return Value{}, r.errorf(off, "incomplete format")
		}
		conv := format[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveArg {
			if mappingLike && len(list) == 1 && !used && next == 0 {
				arg = list[0]
			} else if next < len(list) {
				arg = list[next]
			} else {
				return Value{}, r.errorf(off, "not enough arguments for format string")
			}
			next++
		}
		s, err := r.formatOne(off, spec, conv, arg)
		if err != nil {
			return Value{}, err
		}
		b.WriteString(s)
		if int64(b.Len()) > r.lim.Alloc-r.alloc {
			return Value{}, r.limit(off, LimitAlloc, r.lim.Alloc)
		}
	}
	if !mappingLike && next < len(list) {
		return Value{}, r.errorf(off, "not all arguments converted during string formatting")
	}
	if err := r.charge(off, int64(b.Len())); err != nil {
		return Value{}, err
	}
	return String(b.String()), nil
}

// formatOne formats one %-conversion.
func (r *renderer) formatOne(off int, spec string, conv byte, arg Value) (string, error) {
	if width, prec := widthOf(spec); width > 1<<20 || prec > 1<<20 {
		return "", r.limit(off, LimitAlloc, r.lim.Alloc)
	}
	switch conv {
	case 's', 'r', 'a':
		var s string
		var err error
		if conv == 's' {
			s, err = r.str(off, arg)
		} else {
			s, err = r.repr(off, arg)
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf(spec+"s", s), nil
	case 'd', 'i', 'u', 'x', 'X', 'o', 'c':
		var n int64
		switch arg.kind {
		case KindInt, KindBool:
			n = arg.i
		case KindFloat:
			if conv == 'x' || conv == 'X' || conv == 'o' || conv == 'c' {
				return "", r.errorf(off, "%%%c format: an integer is required, not float", conv)
			}
			n = int64(arg.f)
		default:
			return "", r.errorf(off, "%%%c format: a real number is required, not %s", conv, arg.typeName())
		}
		if conv == 'c' {
			return fmt.Sprintf(strings.TrimRight(spec, ".0123456789")+"c", rune(n)), nil
		}
		if conv == 'i' || conv == 'u' {
			conv = 'd'
		}
		if strings.Contains(spec, "#") && conv == 'o' {
			return fmt.Sprintf(strings.ReplaceAll(spec, "#", "")+"O", n), nil
		}
		return fmt.Sprintf(spec+string(conv), n), nil
	case 'f', 'F', 'e', 'E', 'g', 'G':
		if !arg.isNumber() {
			return "", r.errorf(off, "must be real number, not %s", arg.typeName())
		}
		x, _ := arg.num()
		if !strings.Contains(spec, ".") {
			spec += ".6"
		}
		s := fmt.Sprintf(spec+string(conv), x)
		if conv == 'F' {
			s = strings.ToUpper(s)
		}
		return s, nil
	}
	return "", r.errorf(off, "unsupported format character '%c'", conv)
}

// widthOf reads the width and precision of a %-spec (overlong numbers count
// as huge).
func widthOf(spec string) (int, int) {
	s := strings.TrimLeft(spec, "%-+ 0#")
	num := func(t string) int {
		if len(t) > 9 {
			return math.MaxInt32
		}
		n, _ := strconv.Atoi(t)
		return n
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return num(s[:i]), num(s[i+1:])
	}
	return num(s), 0
}
