package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"unicode/utf8"
)

// validate is the tests' own JSON Schema validator for the subset the
// converter supports (standard semantics: additionalProperties defaults to
// true here, so a generator that never adds keys passes either way). It is
// written against the specification, not the converter.
func validate(doc, schema []byte) error {
	var v, s any
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if d.More() {
		return fmt.Errorf("data after the JSON value")
	}
	d = json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	if err := d.Decode(&s); err != nil {
		return err
	}
	return (&validator{root: s}).check(v, s, "")
}

type validator struct{ root any }

func num(x any) (*big.Rat, bool) {
	n, ok := x.(json.Number)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(n.String())
	return r, ok
}

func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		if r, ok := num(x); ok && r.IsInt() {
			return "integer"
		}
		return "number"
	}
	return "?"
}

func equalJSON(a, b any) bool {
	ra, oka := num(a)
	rb, okb := num(b)
	if oka || okb {
		return oka && okb && ra.Cmp(rb) == 0
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k := range x {
			if !equalJSON(x[k], y[k]) {
				return false
			}
		}
		return true
	}
	return a == b
}

var formats = map[string]*regexp.Regexp{
	"date":      regexp.MustCompile(`^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$`),
	"time":      regexp.MustCompile(`^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$`),
	"date-time": regexp.MustCompile(`^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$`),
	"uuid":      regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`),
}

func (vd *validator) check(v, schema any, at string) error {
	if b, ok := schema.(bool); ok {
		if !b {
			return fmt.Errorf("%s: schema false", at)
		}
		return nil
	}
	s := schema.(map[string]any)
	if ref, ok := s["$ref"].(string); ok {
		target := vd.root
		for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			if tok == "" || ref == "#" {
				continue
			}
			target = target.(map[string]any)[tok]
		}
		if err := vd.check(v, target, at); err != nil {
			return err
		}
	}
	if ts, ok := s["type"]; ok {
		var list []any
		if l, ok := ts.([]any); ok {
			list = l
		} else {
			list = []any{ts}
		}
		if n, _ := s["nullable"].(bool); n {
			list = append(list, "null")
		}
		got, match := typeOf(v), false
		for _, t := range list {
			if t == got || t == "number" && got == "integer" {
				match = true
			}
		}
		if !match {
			return fmt.Errorf("%s: %s is not of type %v", at, got, ts)
		}
	}
	if e, ok := s["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || equalJSON(v, x)
		}
		if !found {
			return fmt.Errorf("%s: %v not in enum", at, v)
		}
	}
	if c, ok := s["const"]; ok && !equalJSON(v, c) {
		return fmt.Errorf("%s: %v is not the const %v", at, v, c)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[kw].([]any); ok {
			n := 0
			for _, a := range alts {
				if vd.check(v, a, at) == nil {
					n++
				}
			}
			if n == 0 || kw == "oneOf" && n > 1 {
				return fmt.Errorf("%s: %d alternatives of %s match", at, n, kw)
			}
		}
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, a := range all {
			if err := vd.check(v, a, at); err != nil {
				return err
			}
		}
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, k := range req {
				if _, ok := x[k.(string)]; !ok {
					return fmt.Errorf("%s: missing required %q", at, k)
				}
			}
		}
		for k, val := range x {
			if ps, ok := props[k]; ok {
				if err := vd.check(val, ps, at+"/"+k); err != nil {
					return err
				}
				continue
			}
			if ap, ok := s["additionalProperties"]; ok {
				if err := vd.check(val, ap, at+"/"+k); err != nil {
					return fmt.Errorf("%s: additional property %q: %w", at, k, err)
				}
			}
		}
	case []any:
		if n, ok := num(s["minItems"]); ok && big.NewRat(int64(len(x)), 1).Cmp(n) < 0 {
			return fmt.Errorf("%s: %d items, below minItems", at, len(x))
		}
		if n, ok := num(s["maxItems"]); ok && big.NewRat(int64(len(x)), 1).Cmp(n) > 0 {
			return fmt.Errorf("%s: %d items, above maxItems", at, len(x))
		}
		prefix, _ := s["prefixItems"].([]any)
		if l, ok := s["items"].([]any); ok {
			prefix = l
		}
		for i, it := range x {
			var sub any
			switch {
			case i < len(prefix):
				sub = prefix[i]
			case s["items"] != nil:
				if _, isList := s["items"].([]any); !isList {
					sub = s["items"]
				}
			}
			if sub != nil {
				if err := vd.check(it, sub, fmt.Sprintf("%s/%d", at, i)); err != nil {
					return err
				}
			}
		}
	case string:
		n := utf8.RuneCountInString(x)
		if m, ok := num(s["minLength"]); ok && big.NewRat(int64(n), 1).Cmp(m) < 0 {
			return fmt.Errorf("%s: %q shorter than minLength", at, x)
		}
		if m, ok := num(s["maxLength"]); ok && big.NewRat(int64(n), 1).Cmp(m) > 0 {
			return fmt.Errorf("%s: %q longer than maxLength", at, x)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			return fmt.Errorf("%s: %q does not match %s", at, x, p)
		}
		if f, ok := s["format"].(string); ok {
			if re := formats[strings.TrimRight(f, "12345")]; re != nil && !re.MatchString(x) {
				return fmt.Errorf("%s: %q is not a %s", at, x, f)
			}
		}
	case json.Number:
		r, _ := num(x)
		cmp := func(kw string, ok func(c int) bool) error {
			if b, isNum := num(s[kw]); isNum && !ok(r.Cmp(b)) {
				return fmt.Errorf("%s: %s violates %s %s", at, x, kw, b.RatString())
			}
			return nil
		}
		for _, c := range []struct {
			kw string
			ok func(int) bool
		}{
			{"minimum", func(c int) bool { return c >= 0 }},
			{"maximum", func(c int) bool { return c <= 0 }},
			{"exclusiveMinimum", func(c int) bool { return c > 0 }},
			{"exclusiveMaximum", func(c int) bool { return c < 0 }},
		} {
			if err := cmp(c.kw, c.ok); err != nil {
				return err
			}
		}
	}
	return nil
}
