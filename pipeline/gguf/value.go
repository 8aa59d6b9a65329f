package gguf

import (
	"fmt"
	"strconv"
	"strings"
)

// ValueType is the type tag of a metadata value (enum gguf_type).
type ValueType uint32

// The metadata value types.
const (
	ValueUint8   ValueType = 0
	ValueInt8    ValueType = 1
	ValueUint16  ValueType = 2
	ValueInt16   ValueType = 3
	ValueUint32  ValueType = 4
	ValueInt32   ValueType = 5
	ValueFloat32 ValueType = 6
	ValueBool    ValueType = 7
	ValueString  ValueType = 8
	ValueArray   ValueType = 9
	ValueUint64  ValueType = 10
	ValueInt64   ValueType = 11
	ValueFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
	"string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(t))
}

// size returns the encoded size of a scalar of this type, 0 for strings/arrays/unknown.
func (t ValueType) size() int {
	switch t {
	case ValueUint8, ValueInt8, ValueBool:
		return 1
	case ValueUint16, ValueInt16:
		return 2
	case ValueUint32, ValueInt32, ValueFloat32:
		return 4
	case ValueUint64, ValueInt64, ValueFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value. Scalars hold the Go type matching their ValueType (uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64). Arrays hold an [Array].
type Value struct {
	Type ValueType
	V    any
}

// Array is a metadata array. Values is a typed slice of the element type ([]string, []int32, []float32, ...),
// or []Array for nested arrays.
type Array struct {
	Elem   ValueType
	Values any
}

// Len returns the number of elements.
func (a Array) Len() int {
	switch v := a.Values.(type) {
	case []uint8:
		return len(v)
	case []int8:
		return len(v)
	case []uint16:
		return len(v)
	case []int16:
		return len(v)
	case []uint32:
		return len(v)
	case []int32:
		return len(v)
	case []float32:
		return len(v)
	case []bool:
		return len(v)
	case []string:
		return len(v)
	case []uint64:
		return len(v)
	case []int64:
		return len(v)
	case []float64:
		return len(v)
	case []Array:
		return len(v)
	}
	return 0
}

// Constructors for the common value types.

func Uint8(v uint8) Value     { return Value{ValueUint8, v} }
func Int8(v int8) Value       { return Value{ValueInt8, v} }
func Uint16(v uint16) Value   { return Value{ValueUint16, v} }
func Int16(v int16) Value     { return Value{ValueInt16, v} }
func Uint32(v uint32) Value   { return Value{ValueUint32, v} }
func Int32(v int32) Value     { return Value{ValueInt32, v} }
func Float32(v float32) Value { return Value{ValueFloat32, v} }
func Bool(v bool) Value       { return Value{ValueBool, v} }
func String(v string) Value   { return Value{ValueString, v} }
func Uint64(v uint64) Value   { return Value{ValueUint64, v} }
func Int64(v int64) Value     { return Value{ValueInt64, v} }
func Float64(v float64) Value { return Value{ValueFloat64, v} }

// Strings is a string array value.
func Strings(v []string) Value { return Value{ValueArray, Array{ValueString, v}} }

// Int32s is an int32 array value.
func Int32s(v []int32) Value { return Value{ValueArray, Array{ValueInt32, v}} }

// Uint32s is a uint32 array value.
func Uint32s(v []uint32) Value { return Value{ValueArray, Array{ValueUint32, v}} }

// Float32s is a float32 array value.
func Float32s(v []float32) Value { return Value{ValueArray, Array{ValueFloat32, v}} }

// Bools is a bool array value.
func Bools(v []bool) Value { return Value{ValueArray, Array{ValueBool, v}} }

// Arrays is an array of arrays (all of the same element type).
func Arrays(v []Array) Value {
	return Value{ValueArray, Array{ValueArray, v}}
}

// AsUint64 returns an integer value of any integer type as uint64 (negative values fail).
func (v Value) AsUint64() (uint64, bool) {
	switch x := v.V.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// AsFloat64 returns a numeric value as float64.
func (v Value) AsFloat64() (float64, bool) {
	switch x := v.V.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if u, ok := v.AsUint64(); ok {
		return float64(u), true
	}
	if i, ok := v.V.(int64); ok {
		return float64(i), true
	}
	return 0, false
}

// String formats the value for dumps: scalars plainly, strings quoted, arrays with their length and up to
// the first 8 elements.
func (v Value) String() string {
	return formatValue(v.Type, v.V, 8)
}

func formatValue(t ValueType, x any, maxElems int) string {
	switch t {
	case ValueString:
		return strconv.Quote(x.(string))
	case ValueFloat32:
		return strconv.FormatFloat(float64(x.(float32)), 'g', -1, 32)
	case ValueFloat64:
		return strconv.FormatFloat(x.(float64), 'g', -1, 64)
	case ValueArray:
		a := x.(Array)
		n := a.Len()
		var b strings.Builder
		fmt.Fprintf(&b, "[%s×%d", a.Elem, n)
		for i := 0; i < n && i < maxElems; i++ {
			if i == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString(", ")
			}
			b.WriteString(formatValue(a.Elem, arrayElem(a, i), maxElems))
		}
		if n > maxElems {
			b.WriteString(", …")
		}
		b.WriteString("]")
		return b.String()
	}
	return fmt.Sprint(x)
}

func arrayElem(a Array, i int) any {
	switch v := a.Values.(type) {
	case []uint8:
		return v[i]
	case []int8:
		return v[i]
	case []uint16:
		return v[i]
	case []int16:
		return v[i]
	case []uint32:
		return v[i]
	case []int32:
		return v[i]
	case []float32:
		return v[i]
	case []bool:
		return v[i]
	case []string:
		return v[i]
	case []uint64:
		return v[i]
	case []int64:
		return v[i]
	case []float64:
		return v[i]
	case []Array:
		return v[i]
	}
	return nil
}

// checkValue verifies that v.V has the Go type its Type promises, so the writer never emits a lie.
func checkValue(t ValueType, x any) error {
	ok := false
	switch t {
	case ValueUint8:
		_, ok = x.(uint8)
	case ValueInt8:
		_, ok = x.(int8)
	case ValueUint16:
		_, ok = x.(uint16)
	case ValueInt16:
		_, ok = x.(int16)
	case ValueUint32:
		_, ok = x.(uint32)
	case ValueInt32:
		_, ok = x.(int32)
	case ValueFloat32:
		_, ok = x.(float32)
	case ValueBool:
		_, ok = x.(bool)
	case ValueString:
		_, ok = x.(string)
	case ValueUint64:
		_, ok = x.(uint64)
	case ValueInt64:
		_, ok = x.(int64)
	case ValueFloat64:
		_, ok = x.(float64)
	case ValueArray:
		var a Array
		a, ok = x.(Array)
		if ok {
			return checkArray(a)
		}
	}
	if !ok {
		return fmt.Errorf("value of Go type %T does not match gguf type %s", x, t)
	}
	return nil
}

func checkArray(a Array) error {
	ok := false
	switch a.Elem {
	case ValueUint8:
		_, ok = a.Values.([]uint8)
	case ValueInt8:
		_, ok = a.Values.([]int8)
	case ValueUint16:
		_, ok = a.Values.([]uint16)
	case ValueInt16:
		_, ok = a.Values.([]int16)
	case ValueUint32:
		_, ok = a.Values.([]uint32)
	case ValueInt32:
		_, ok = a.Values.([]int32)
	case ValueFloat32:
		_, ok = a.Values.([]float32)
	case ValueBool:
		_, ok = a.Values.([]bool)
	case ValueString:
		_, ok = a.Values.([]string)
	case ValueUint64:
		_, ok = a.Values.([]uint64)
	case ValueInt64:
		_, ok = a.Values.([]int64)
	case ValueFloat64:
		_, ok = a.Values.([]float64)
	case ValueArray:
		var subs []Array
		subs, ok = a.Values.([]Array)
		if ok {
			for _, s := range subs {
				if err := checkArray(s); err != nil {
					return err
				}
			}
		}
	}
	if !ok {
		return fmt.Errorf("array of Go type %T does not match element type %s", a.Values, a.Elem)
	}
	return nil
}
