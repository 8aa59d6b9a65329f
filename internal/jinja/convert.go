package jinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// FromJSON decodes a JSON document into a Value the way Python's json.loads
// does: objects keep their key order (a repeated key keeps its first place
// and its last value), numbers without a fraction or exponent are ints,
// others floats. Nesting deeper than the values' limit is an error.
func FromJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSON(dec, 0)
	if err != nil {
		return Value{}, fmt.Errorf("jinja: JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Value{}, errors.New("jinja: JSON: data after the top-level value")
	}
	return v, nil
}

func decodeJSON(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxValueDepth {
		return Value{}, fmt.Errorf("nested deeper than %d levels", maxValueDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return Value{}, err
	}
	switch t := tok.(type) {
	case nil:
		return None(), nil
	case bool:
		return Bool(t), nil
	case string:
		return String(t), nil
	case json.Number:
		return numberValue(t)
	case json.Delim:
		switch t {
		case '[':
			var items []Value
			for dec.More() {
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return Value{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return Value{}, err
			}
			return listValue(items, false), nil
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return Value{}, err
				}
				k, ok := kt.(string)
				if !ok {
					return Value{}, fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return Value{}, err
				}
				d.set(String(k), v)
			}
			if _, err := dec.Token(); err != nil {
				return Value{}, err
			}
			return d.Value(), nil
		}
	}
	return Value{}, fmt.Errorf("unexpected token %v", tok)
}

// numberValue reads a JSON number like Python: an int unless it has a
// fraction or an exponent (an int too large for 64 bits becomes a float).
func numberValue(n json.Number) (Value, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return Int(i), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return Value{}, fmt.Errorf("number %s: %w", s, err)
	}
	return Float(f), nil
}

// FromGo converts a Go value into a Value: nil → None; bool; integers;
// floats (a float with an integral value becomes an int, as it would have
// been written in JSON decoded into float64); string; json.Number;
// json.RawMessage (decoded with FromJSON, keeping key order); Value; *Dict;
// slices and arrays → lists; maps with string keys → dicts with sorted keys
// (Go maps have no order; pass json.RawMessage or *Dict to keep one).
func FromGo(v any) (Value, error) { return fromGo(reflect.ValueOf(v), 0) }

func fromGo(rv reflect.Value, depth int) (Value, error) {
	if depth > maxValueDepth {
		return Value{}, fmt.Errorf("jinja: value nested deeper than %d levels", maxValueDepth)
	}
	if !rv.IsValid() {
		return None(), nil
	}
	switch x := rv.Interface().(type) {
	case Value:
		return x, nil
	case *Dict:
		if x == nil {
			return None(), nil
		}
		return x.Value(), nil
	case json.RawMessage:
		if x == nil {
			return None(), nil
		}
		return FromJSON(x)
	case json.Number:
		return numberValue(x)
	}
	switch rv.Kind() {
	case reflect.Interface, reflect.Pointer:
		if rv.IsNil() {
			return None(), nil
		}
		return fromGo(rv.Elem(), depth)
	case reflect.Bool:
		return Bool(rv.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return Int(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := rv.Uint()
		if u > math.MaxInt64 {
			return Float(float64(u)), nil
		}
		return Int(int64(u)), nil
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return Int(int64(f)), nil
		}
		return Float(f), nil
	case reflect.String:
		return String(rv.String()), nil
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return None(), nil
		}
		items := make([]Value, rv.Len())
		for i := range items {
			v, err := fromGo(rv.Index(i), depth+1)
			if err != nil {
				return Value{}, err
			}
			items[i] = v
		}
		return listValue(items, false), nil
	case reflect.Map:
		if rv.IsNil() {
			return None(), nil
		}
		if rv.Type().Key().Kind() != reflect.String {
			return Value{}, fmt.Errorf("jinja: map keys must be strings, not %s", rv.Type().Key())
		}
		keys := rv.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		d := NewDict()
		for _, k := range keys {
			v, err := fromGo(rv.MapIndex(k), depth+1)
			if err != nil {
				return Value{}, err
			}
			d.Set(k.String(), v)
		}
		return d.Value(), nil
	}
	return Value{}, fmt.Errorf("jinja: cannot convert %s to a template value", rv.Type())
}
