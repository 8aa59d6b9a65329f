package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is the type of a Value, named after its Python counterpart.
type Kind uint8

// The kinds of values a template sees.
const (
	KindUndefined Kind = iota // jinja2's Undefined: a missing variable, key or attribute
	KindNone                  // None
	KindBool                  // True, False
	KindInt                   // int (64-bit; overflow is an error)
	KindFloat                 // float
	KindString                // str
	KindList                  // list or tuple
	KindDict                  // dict (insertion-ordered)
	KindNamespace             // namespace(): the one mutable object
	KindCallable              // macros, global functions, bound methods, loop()
	KindObject                // loop, cycler, joiner
)

// Value is one template value. The zero Value is Undefined.
type Value struct {
	kind Kind
	i    int64   // int; bool (0/1); undefined: 1 when the attribute was refused by the sandbox
	f    float64 // float
	s    string  // str; undefined: what is undefined, for error messages
	p    any     // *List, *Dict, *Namespace, callable, object
}

// List is the payload of a list or tuple value. Templates cannot change it.
type List struct {
	items []Value
	tuple bool
	// gen names the Python iterator type when the list stands for a lazy
	// iterator (the result of map, select, items, reverse...): always true,
	// no len(), no indexing, not JSON serializable, like in jinja2.
	gen string
	// rng is the repr of a range() ("range(0, 5)"): a sequence with its own
	// printing, not JSON serializable, never equal to a list.
	rng   string
	depth int
}

// Dict is an insertion-ordered mapping. Templates cannot change it.
type Dict struct {
	keys  []Value
	vals  []Value
	index map[dictKey]int // built once the dict grows past a few keys
	depth int
}

// Namespace is the payload of namespace(): attributes a template may set with
// {% set ns.attr = value %}.
type Namespace struct {
	attrs *Dict
}

// maxValueDepth bounds how deeply lists and dicts may nest, so that printing,
// comparing and serializing values never recurses deeply.
const maxValueDepth = 512

// Undefined returns an undefined value; what describes it in errors
// ("'x' is undefined").
func undefined(what string) Value { return Value{kind: KindUndefined, s: what} }

// Constructors for values a caller passes to Render.

// None is Python's None.
func None() Value { return Value{kind: KindNone} }

// Bool returns a boolean value.
func Bool(b bool) Value {
	if b {
		return Value{kind: KindBool, i: 1}
	}
	return Value{kind: KindBool}
}

// Int returns an integer value.
func Int(i int64) Value { return Value{kind: KindInt, i: i} }

// Float returns a float value.
func Float(f float64) Value { return Value{kind: KindFloat, f: f} }

// String returns a string value.
func String(s string) Value { return Value{kind: KindString, s: s} }

// markup is a string marked safe (markupsafe.Markup): the result of the safe
// and escape filters. Markup + str escapes the str; everything else treats
// it as a string.
func markup(s string) Value { return Value{kind: KindString, s: s, i: 1} }

// isPlainList is a list or tuple (not an iterator, not a range).
func (v Value) isPlainList() bool {
	return v.kind == KindList && v.list().gen == "" && v.list().rng == ""
}

func (v Value) isMarkup() bool { return v.kind == KindString && v.i == 1 }

// NewList returns a list value holding items (not copied).
func NewList(items ...Value) Value { return listValue(items, false) }

// genValue is a lazy iterator of jinja2 (see List.gen) holding items.
func genValue(items []Value, gen string) Value {
	v := listValue(items, false)
	v.list().gen = gen
	return v
}

func listValue(items []Value, tuple bool) Value {
	d := 0
	for i := range items {
		if c := items[i].depth(); c > d {
			d = c
		}
	}
	return Value{kind: KindList, p: &List{items: items, tuple: tuple, depth: d + 1}}
}

// NewDict returns an empty dict builder; Set adds keys in order.
func NewDict() *Dict { return &Dict{depth: 1} }

// Set adds or replaces key (a string key in the common case). It is for
// building values before Render; templates cannot call it.
func (d *Dict) Set(key string, v Value) { d.set(String(key), v) }

// Value returns the dict as a Value.
func (d *Dict) Value() Value { return Value{kind: KindDict, p: d} }

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

func (v Value) depth() int {
	switch v.kind {
	case KindList:
		return v.p.(*List).depth
	case KindDict:
		return v.p.(*Dict).depth
	}
	return 0
}

// Kind returns the value's kind.
func (v Value) Kind() Kind { return v.kind }

// Str returns the string of a string value ("" for other kinds).
func (v Value) Str() string {
	if v.kind == KindString {
		return v.s
	}
	return ""
}

func (v Value) isNumber() bool {
	return v.kind == KindInt || v.kind == KindFloat || v.kind == KindBool
}

func (v Value) list() *List { return v.p.(*List) }
func (v Value) dict() *Dict { return v.p.(*Dict) }

// truth is Python's bool(v).
func (v Value) truth() bool {
	switch v.kind {
	case KindUndefined, KindNone:
		return false
	case KindBool, KindInt:
		return v.i != 0
	case KindFloat:
		return v.f != 0
	case KindString:
		return v.s != ""
	case KindList:
		l := v.list()
		return len(l.items) > 0 || l.gen != ""
	case KindDict:
		return len(v.dict().keys) > 0
	}
	return true
}

// typeName is Python's type(v).__name__, for error messages.
func (v Value) typeName() string {
	switch v.kind {
	case KindUndefined:
		return "Undefined"
	case KindNone:
		return "NoneType"
	case KindBool:
		return "bool"
	case KindInt:
		return "int"
	case KindFloat:
		return "float"
	case KindString:
		return "str"
	case KindList:
		l := v.list()
		if l.gen != "" {
			return l.gen
		}
		if l.rng != "" {
			return "range"
		}
		if l.tuple {
			return "tuple"
		}
		return "list"
	case KindDict:
		return "dict"
	case KindNamespace:
		return "Namespace"
	case KindCallable:
		switch v.p.(type) {
		case *macro:
			return "Macro"
		case *boundMethod:
			return "builtin_function_or_method"
		}
		return "function"
	case KindObject:
		switch v.p.(type) {
		case *loopObj:
			return "LoopContext"
		case *cycler:
			return "Cycler"
		case *joiner:
			return "Joiner"
		}
	}
	return "object"
}

// num returns v as a float64 and whether v is an int/bool.
func (v Value) num() (float64, bool) {
	if v.kind == KindFloat {
		return v.f, false
	}
	return float64(v.i), true
}

// dictKey is a hashable form of a key: Python's 1, 1.0 and True are one key.
type dictKey struct {
	k Kind
	i int64
	s string
}

func keyOf(v Value) (dictKey, bool) {
	switch v.kind {
	case KindString:
		return dictKey{k: KindString, s: v.s}, true
	case KindInt, KindBool:
		return dictKey{k: KindInt, i: v.i}, true
	case KindFloat:
		if v.f == math.Trunc(v.f) && math.Abs(v.f) < 1<<63 {
			return dictKey{k: KindInt, i: int64(v.f)}, true
		}
		return dictKey{k: KindFloat, i: int64(math.Float64bits(v.f))}, true
	case KindNone:
		return dictKey{k: KindNone}, true
	case KindList:
		l := v.list()
		if l.rng != "" {
			return dictKey{k: KindList, s: "r" + l.rng}, true // ranges are hashable
		}
		if l.tuple && l.gen == "" {
			// a tuple of hashable values is hashable: key it by its items' keys
			var b strings.Builder
			b.WriteByte('t')
			for _, it := range l.items {
				k, ok := keyOf(it)
				if !ok {
					return dictKey{}, false
				}
				b.WriteString(strconv.Itoa(int(k.k)))
				b.WriteByte(':')
				b.WriteString(strconv.FormatInt(k.i, 10))
				b.WriteByte(':')
				b.WriteString(strconv.Itoa(len(k.s)))
				b.WriteByte(':')
				b.WriteString(k.s)
			}
			return dictKey{k: KindList, s: b.String()}, true
		}
	}
	return dictKey{}, false
}

const dictIndexMin = 8

func (d *Dict) find(k dictKey) int {
	if d.index != nil {
		if i, ok := d.index[k]; ok {
			return i
		}
		return -1
	}
	for i := range d.keys {
		if kk, _ := keyOf(d.keys[i]); kk == k {
			return i
		}
	}
	return -1
}

// set adds or replaces a hashable key (callers check hashability).
func (d *Dict) set(key, v Value) {
	k, _ := keyOf(key)
	if i := d.find(k); i >= 0 {
		d.vals[i] = v
	} else {
		d.keys = append(d.keys, key)
		d.vals = append(d.vals, v)
		if d.index != nil {
			d.index[k] = len(d.keys) - 1
		} else if len(d.keys) > dictIndexMin {
			d.index = make(map[dictKey]int, len(d.keys))
			for i := range d.keys {
				kk, _ := keyOf(d.keys[i])
				d.index[kk] = i
			}
		}
	}
	if c := v.depth() + 1; c > d.depth {
		d.depth = c
	}
}

// get looks key up.
func (d *Dict) get(key Value) (Value, bool) {
	k, ok := keyOf(key)
	if !ok {
		return Value{}, false
	}
	if i := d.find(k); i >= 0 {
		return d.vals[i], true
	}
	return Value{}, false
}

func (d *Dict) getStr(key string) (Value, bool) {
	if i := d.find(dictKey{k: KindString, s: key}); i >= 0 {
		return d.vals[i], true
	}
	return Value{}, false
}

// equal is Python's ==.
func equal(a, b Value) bool {
	if a.isNumber() && b.isNumber() {
		if a.kind == KindFloat || b.kind == KindFloat {
			x, _ := a.num()
			y, _ := b.num()
			return x == y
		}
		return a.i == b.i
	}
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case KindUndefined, KindNone:
		return true
	case KindString:
		return a.s == b.s
	case KindList:
		la, lb := a.list(), b.list()
		if la == lb {
			return true
		}
		if la.gen != "" || lb.gen != "" || la.rng != "" || lb.rng != "" || la.tuple != lb.tuple || len(la.items) != len(lb.items) {
			return false
		}
		for i := range la.items {
			if !equal(la.items[i], lb.items[i]) {
				return false
			}
		}
		return true
	case KindDict:
		da, db := a.dict(), b.dict()
		if da == db {
			return true
		}
		if len(da.keys) != len(db.keys) {
			return false
		}
		for i := range da.keys {
			w, ok := db.get(da.keys[i])
			if !ok || !equal(da.vals[i], w) {
				return false
			}
		}
		return true
	}
	return a.p == b.p
}

// runeLen is len(s) in Python (code points; each invalid UTF-8 byte counts one).
func runeLen(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return utf8.RuneCountInString(s)
		}
	}
	return len(s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// runes splits s into its characters as strings.
func splitChars(s string) []Value {
	out := make([]Value, 0, runeLen(s))
	for len(s) > 0 {
		_, n := utf8.DecodeRuneInString(s)
		out = append(out, String(s[:n]))
		s = s[n:]
	}
	return out
}

// charIndex returns the byte offsets of the characters of s (plus len(s)), or
// nil when s is ASCII (offsets equal indexes).
func charOffsets(s string) []int {
	if isASCII(s) {
		return nil
	}
	offs := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		offs = append(offs, i)
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
	return append(offs, len(s))
}
