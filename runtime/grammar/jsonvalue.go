package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonValue is a JSON value that keeps object members in document order
// (a schema's property order is the order the grammar generates them in,
// as llama.cpp's converter does with nlohmann::ordered_json).
type jsonValue struct {
	kind byte // 'n' null, 'b' bool, '0' number, 's' string, '[' array, '{' object
	b    bool
	num  json.Number
	str  string
	arr  []*jsonValue
	keys []string
	vals []*jsonValue
}

const maxSchemaDepth = 64

// parseJSON reads exactly one JSON value, nested at most maxSchemaDepth
// deep, rejecting duplicate object keys.
func parseJSON(data []byte) (*jsonValue, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func readJSON(dec *json.Decoder, depth int) (*jsonValue, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxSchemaDepth)
	}
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, errors.New("unexpected end of JSON")
	}
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &jsonValue{kind: 'n'}, nil
	case bool:
		return &jsonValue{kind: 'b', b: t}, nil
	case json.Number:
		return &jsonValue{kind: '0', num: t}, nil
	case string:
		return &jsonValue{kind: 's', str: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := &jsonValue{kind: '['}
			for dec.More() {
				x, err := readJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, x)
			}
			_, err := dec.Token()
			return v, err
		case '{':
			v := &jsonValue{kind: '{'}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				if seen[k] {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				seen[k] = true
				x, err := readJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, x)
			}
			_, err := dec.Token()
			return v, err
		}
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// get returns member k of an object (nil when absent or not an object).
func (v *jsonValue) get(k string) *jsonValue {
	if v == nil || v.kind != '{' {
		return nil
	}
	for i, key := range v.keys {
		if key == k {
			return v.vals[i]
		}
	}
	return nil
}

func (v *jsonValue) has(k string) bool { return v.get(k) != nil }

func (v *jsonValue) kindName() string {
	switch v.kind {
	case 'n':
		return "null"
	case 'b':
		return "a boolean"
	case '0':
		return "a number"
	case 's':
		return "a string"
	case '[':
		return "an array"
	}
	return "an object"
}

// encode writes v as compact JSON: strings escape only '"', '\\' and
// control characters (the rest stays UTF-8), numbers keep their text.
func (v *jsonValue) encode(sb *strings.Builder) {
	switch v.kind {
	case 'n':
		sb.WriteString("null")
	case 'b':
		sb.WriteString(strconv.FormatBool(v.b))
	case '0':
		sb.WriteString(v.num.String())
	case 's':
		encodeJSONString(sb, v.str)
	case '[':
		sb.WriteByte('[')
		for i, x := range v.arr {
			if i > 0 {
				sb.WriteByte(',')
			}
			x.encode(sb)
		}
		sb.WriteByte(']')
	case '{':
		sb.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			encodeJSONString(sb, k)
			sb.WriteByte(':')
			v.vals[i].encode(sb)
		}
		sb.WriteByte('}')
	}
}

func (v *jsonValue) String() string {
	var sb strings.Builder
	v.encode(&sb)
	return sb.String()
}

func encodeJSONString(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(sb, `\u%04x`, r)
			} else if r == utf8.RuneError {
				sb.WriteString(`\ufffd`)
			} else {
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}
