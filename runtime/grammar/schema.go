package grammar

import (
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// JSON Schema to GBNF, the subset llama.cpp's converter supports
// (common/json-schema-to-grammar.cpp): type (also lists of types and
// nullable), enum, const, properties/required/additionalProperties,
// items/prefixItems/minItems/maxItems, minLength/maxLength, pattern, format
// date/time/date-time/uuid, integer and number bounds, anyOf/oneOf,
// allOf of object schemas, and $ref within the schema. Like llama.cpp,
// additionalProperties defaults to false (fewer hallucinated keys, faster
// grammars) and oneOf is treated as anyOf. Unlike it, a keyword that would
// constrain the value but is not supported is an error naming the keyword
// (llama.cpp skips it silently, and the output may then violate the
// schema); annotations (title, description, default, examples, …) are
// ignored.

// schemaSource is the commit of llama.cpp whose converter the primitive
// rules below are transcribed from (they are its output format: the same
// whitespace policy and number/string shapes).
const schemaSource = "ggml-org/llama.cpp common/json-schema-to-grammar.cpp @ 011c6c3c"

// spaceRule is the whitespace allowed between JSON tokens: nothing, one
// space, or one or two newlines and up to 20 indentation characters. It is
// bounded so that a generation cannot stall in whitespace.
const spaceRule = `| " " | "\n"{1,2} [ \t]{0,20}`

type primitive struct {
	body string
	deps []string
}

var primitives = map[string]primitive{
	"boolean":       {`("true" | "false") space`, nil},
	"decimal-part":  {`[0-9]{1,16}`, nil},
	"integral-part": {`[0] | [1-9] [0-9]{0,15}`, nil},
	"number":        {`("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space`, []string{"integral-part", "decimal-part"}},
	"integer":       {`("-"? integral-part) space`, []string{"integral-part"}},
	"value":         {`object | array | string | number | boolean | null`, []string{"object", "array", "string", "number", "boolean", "null"}},
	"object":        {`"{" space ( string ":" space value ("," space string ":" space value)* )? "}" space`, []string{"string", "value"}},
	"array":         {`"[" space ( value ("," space value)* )? "]" space`, []string{"value"}},
	"uuid":          {`"\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space`, nil},
	"char":          {`[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})`, nil},
	"string":        {`"\"" char* "\"" space`, []string{"char"}},
	"null":          {`"null" space`, nil},
	// String formats.
	"date":             {`[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )`, nil},
	"time":             {`([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )`, nil},
	"date-time":        {`date "T" time`, []string{"date", "time"}},
	"date-string":      {`"\"" date "\"" space`, []string{"date"}},
	"time-string":      {`"\"" time "\"" space`, []string{"time"}},
	"date-time-string": {`"\"" date-time "\"" space`, []string{"date-time"}},
}

// annotations are keywords that do not constrain the value.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "example": true,
	"$schema": true, "$id": true, "$comment": true, "deprecated": true, "readOnly": true,
	"writeOnly": true, "$defs": true, "definitions": true, "contentEncoding": true,
	"contentMediaType": true, "discriminator": true, "strict": true,
}

// supported are the constraining keywords the converter handles.
var supported = map[string]bool{
	"type": true, "enum": true, "const": true, "properties": true, "required": true,
	"additionalProperties": true, "items": true, "prefixItems": true, "additionalItems": true,
	"minItems": true, "maxItems": true, "minLength": true, "maxLength": true, "pattern": true,
	"format": true, "minimum": true, "maximum": true, "exclusiveMinimum": true,
	"exclusiveMaximum": true, "oneOf": true, "anyOf": true, "allOf": true, "$ref": true,
	"nullable": true, "uniqueItems": true,
}

var invalidRuleChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// JSONSchemaGBNF converts a JSON schema to a GBNF grammar whose root rule
// matches the JSON texts (with llama.cpp's whitespace policy) that satisfy
// the schema.
func JSONSchemaGBNF(schema []byte) (string, error) {
	root, err := parseJSON(schema)
	if err != nil {
		return "", &SchemaError{Msg: "not valid JSON: " + err.Error()}
	}
	c := &schemaConv{root: root, rules: map[string]string{"space": spaceRule}, refRules: map[string]string{},
		resolving: map[string]bool{}}
	if _, err := c.visit(root, "", ""); err != nil {
		return "", err
	}
	return c.format(), nil
}

// FromJSONSchema compiles a JSON schema into a Grammar (see JSONSchemaGBNF
// and the package's JSON Schema notes in schema.go: the subset, the
// keywords refused by name, additionalProperties false by default, oneOf
// as anyOf, unanchored patterns allowing surrounding text, bounds on
// numbers only when integral).
func FromJSONSchema(schema []byte) (*Grammar, error) {
	src, err := JSONSchemaGBNF(schema)
	if err != nil {
		return nil, err
	}
	g, err := Parse(src)
	if err != nil {
		return nil, &SchemaError{Msg: "the schema's grammar is not usable: " + err.Error()}
	}
	return g, nil
}

// JSONObject returns the grammar of any JSON object (OpenAI's
// response_format {"type": "json_object"}; llama-server converts it as the
// empty schema).
func JSONObject() *Grammar {
	g, err := FromJSONSchema([]byte(`{"type": "object"}`))
	if err != nil {
		panic("grammar: JSON object grammar: " + err.Error()) // programmer error: fixed input
	}
	return g
}

type schemaConv struct {
	root      *jsonValue
	rules     map[string]string
	refRules  map[string]string // $ref -> rule name
	resolving map[string]bool
	depth     int
}

func (c *schemaConv) format() string {
	names := make([]string, 0, len(c.rules))
	for n := range c.rules {
		names = append(names, n)
	}
	slices.Sort(names)
	var sb strings.Builder
	for _, n := range names {
		sb.WriteString(n)
		sb.WriteString(" ::= ")
		sb.WriteString(c.rules[n])
		sb.WriteByte('\n')
	}
	return sb.String()
}

// addRule adds a rule under a sanitized form of name, or under name plus a
// number when a different rule already has it; it returns the name used.
func (c *schemaConv) addRule(name, body string) string {
	esc := invalidRuleChars.ReplaceAllString(name, "-")
	if b, ok := c.rules[esc]; !ok || b == body {
		c.rules[esc] = body
		return esc
	}
	for i := 0; ; i++ {
		k := esc + strconv.Itoa(i)
		if b, ok := c.rules[k]; !ok || b == body {
			c.rules[k] = body
			return k
		}
	}
}

// primitive adds a built-in rule (and its dependencies) under name.
func (c *schemaConv) primitive(name, kind string) string {
	p := primitives[kind]
	n := c.addRule(name, p.body)
	for _, d := range p.deps {
		if _, ok := c.rules[d]; !ok {
			c.primitive(d, d)
		}
	}
	return n
}

// rootPrimitive makes a built-in rule the root rule.
func (c *schemaConv) rootPrimitive(kind string) string {
	for _, d := range primitives[kind].deps {
		if _, ok := c.rules[d]; !ok {
			c.primitive(d, d)
		}
	}
	return c.addRule("root", primitives[kind].body)
}

func isReserved(name string) bool {
	_, ok := primitives[name]
	return ok || name == "root" || name == "space"
}

func join(name, part string) string {
	if name == "" {
		return part
	}
	return name + "-" + part
}

func pointer(path, key string) string {
	key = strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
	return path + "/" + key
}

func errAt(path, format string, args ...any) error {
	return &SchemaError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// visit adds the rules for schema s and returns the name of its rule.
func (c *schemaConv) visit(s *jsonValue, name, path string) (string, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxSchemaDepth {
		return "", errAt(path, "schema nested deeper than %d", maxSchemaDepth)
	}
	ruleName := name
	switch {
	case name == "":
		ruleName = "root"
	case isReserved(name):
		ruleName = name + "-"
	}
	if s.kind == 'b' {
		if !s.b {
			return "", errAt(path, "the schema false matches nothing")
		}
		return c.addRule(ruleName, c.primitive("value", "value")), nil
	}
	if s.kind != '{' {
		return "", errAt(path, "a schema must be an object or a boolean, found %s", s.kindName())
	}
	for _, k := range s.keys {
		if !annotations[k] && !supported[k] && !strings.HasPrefix(k, "x-") {
			return "", errAt(pointer(path, k), "unsupported keyword %q", k)
		}
	}
	if u := s.get("uniqueItems"); u != nil && (u.kind != 'b' || u.b) {
		return "", errAt(pointer(path, "uniqueItems"), "unsupported keyword \"uniqueItems\" (a grammar cannot keep items distinct)")
	}
	constraining := func(except ...string) []string {
		var out []string
		for _, k := range s.keys {
			if supported[k] && !slices.Contains(except, k) && k != "uniqueItems" {
				out = append(out, k)
			}
		}
		return out
	}

	if ref := s.get("$ref"); ref != nil {
		if others := constraining("$ref"); len(others) > 0 {
			return "", errAt(pointer(path, others[0]), "keyword %q beside $ref is not supported", others[0])
		}
		target, err := c.resolveRef(ref, pointer(path, "$ref"))
		if err != nil {
			return "", err
		}
		return c.addRule(ruleName, target), nil
	}
	for _, kw := range []string{"oneOf", "anyOf"} {
		alts := s.get(kw)
		if alts == nil {
			continue
		}
		if others := constraining(kw); len(others) > 0 {
			return "", errAt(pointer(path, others[0]), "keyword %q beside %s is not supported (put it inside each alternative)", others[0], kw)
		}
		if alts.kind != '[' || len(alts.arr) == 0 {
			return "", errAt(pointer(path, kw), "%s must be a non-empty array of schemas", kw)
		}
		var refs []string
		for i, a := range alts.arr {
			r, err := c.visit(a, join(name, strconv.Itoa(i)), pointer(pointer(path, kw), strconv.Itoa(i)))
			if err != nil {
				return "", err
			}
			refs = append(refs, r)
		}
		return c.addRule(ruleName, strings.Join(refs, " | ")), nil
	}
	if s.has("allOf") {
		return c.allOf(s, name, ruleName, path)
	}

	types, err := schemaTypes(s, path)
	if err != nil {
		return "", err
	}
	if len(types) > 1 {
		var refs []string
		for _, t := range types {
			r, err := c.visitTyped(s, t, join(name, t), path)
			if err != nil {
				return "", err
			}
			refs = append(refs, r)
		}
		return c.addRule(ruleName, strings.Join(refs, " | ")), nil
	}
	t := ""
	if len(types) == 1 {
		t = types[0]
	}
	return c.visitTyped(s, t, ruleName, path)
}

var jsonTypes = []string{"string", "number", "integer", "boolean", "null", "array", "object"}

// schemaTypes returns the types s allows: its "type" (one or a list) plus
// null when nullable, or the type its keywords imply, or none (any value).
func schemaTypes(s *jsonValue, path string) ([]string, error) {
	var types []string
	if t := s.get("type"); t != nil {
		var list []*jsonValue
		switch t.kind {
		case 's':
			list = []*jsonValue{t}
		case '[':
			list = t.arr
			if len(list) == 0 {
				return nil, errAt(pointer(path, "type"), "an empty list of types matches nothing")
			}
		default:
			return nil, errAt(pointer(path, "type"), "must be a type name or a list of them, found %s", t.kindName())
		}
		for _, x := range list {
			if x.kind != 's' || !slices.Contains(jsonTypes, x.str) {
				return nil, errAt(pointer(path, "type"), "unknown type %s (want one of %s)", x, strings.Join(jsonTypes, ", "))
			}
			if !slices.Contains(types, x.str) {
				types = append(types, x.str)
			}
		}
	}
	if n := s.get("nullable"); n != nil {
		if n.kind != 'b' {
			return nil, errAt(pointer(path, "nullable"), "must be a boolean")
		}
		if n.b && len(types) > 0 && !slices.Contains(types, "null") {
			types = append(types, "null")
		}
	}
	if len(types) > 0 || s.has("enum") || s.has("const") {
		return types, nil
	}
	// No type: keywords that only apply to one type imply it (generating
	// only that type is a valid subset of what the schema allows).
	implied := ""
	for _, k := range s.keys {
		var kt string
		switch k {
		case "properties", "additionalProperties", "required":
			kt = "object"
		case "items", "prefixItems", "additionalItems", "minItems", "maxItems":
			kt = "array"
		case "pattern", "minLength", "maxLength", "format":
			kt = "string"
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			kt = "number"
		default:
			continue
		}
		if implied != "" && implied != kt {
			return nil, errAt(pointer(path, k), "keywords for both %s and %s without a \"type\" are not supported", implied, kt)
		}
		implied = kt
	}
	if implied != "" {
		return []string{implied}, nil
	}
	return nil, nil
}

// visitTyped adds the rule for s restricted to type t ("" for any).
func (c *schemaConv) visitTyped(s *jsonValue, t, ruleName, path string) (string, error) {
	if v := s.get("const"); v != nil {
		if t != "" && !valueHasType(v, t) {
			return "", errAt(pointer(path, "const"), "const %s is not of type %s", v, t)
		}
		return c.addRule(ruleName, Literal(v.String())+" space"), nil
	}
	if e := s.get("enum"); e != nil {
		if e.kind != '[' || len(e.arr) == 0 {
			return "", errAt(pointer(path, "enum"), "must be a non-empty array")
		}
		var lits []string
		for _, v := range e.arr {
			if t == "" || valueHasType(v, t) {
				if l := Literal(v.String()); !slices.Contains(lits, l) {
					lits = append(lits, l)
				}
			}
		}
		if len(lits) == 0 {
			return "", errAt(pointer(path, "enum"), "no value of type %s", t)
		}
		return c.addRule(ruleName, "("+strings.Join(lits, " | ")+") space"), nil
	}
	switch t {
	case "":
		return c.addRule(ruleName, c.primitive("value", "value")), nil
	case "object":
		return c.object(s, ruleName, path)
	case "array":
		return c.array(s, ruleName, path)
	case "string":
		return c.str(s, ruleName, path)
	case "integer", "number":
		return c.number(s, t, ruleName, path)
	case "boolean", "null":
		if ruleName == "root" {
			return c.rootPrimitive(t), nil
		}
		return c.primitive(t, t), nil
	}
	return "", errAt(path, "unknown type %q", t)
}

// valueHasType reports whether a JSON value is of JSON Schema type t.
func valueHasType(v *jsonValue, t string) bool {
	switch t {
	case "null":
		return v.kind == 'n'
	case "boolean":
		return v.kind == 'b'
	case "string":
		return v.kind == 's'
	case "array":
		return v.kind == '['
	case "object":
		return v.kind == '{'
	case "number":
		return v.kind == '0'
	case "integer":
		if v.kind != '0' {
			return false
		}
		r, ok := new(big.Rat).SetString(v.num.String())
		return ok && r.IsInt()
	}
	return false
}

// count reads a non-negative integer keyword; ok is false when absent.
func count(s *jsonValue, kw, path string) (n int, ok bool, err error) {
	v := s.get(kw)
	if v == nil {
		return 0, false, nil
	}
	r, good := new(big.Rat).SetString(v.num.String())
	if v.kind != '0' || !good || !r.IsInt() || r.Sign() < 0 {
		return 0, false, errAt(pointer(path, kw), "must be a non-negative integer")
	}
	limit := Limits{}.withDefaults().Repeat
	if !r.Num().IsInt64() || r.Num().Int64() > int64(limit) {
		return 0, false, errAt(pointer(path, kw), "%s exceeds the supported maximum of %d", r.Num(), limit)
	}
	return int(r.Num().Int64()), true, nil
}

// repetition is GBNF for min..max items (max < 0: unbounded) separated by
// sep ("" for none).
func repetition(item string, lo, hi int, sep string) string {
	if hi == 0 {
		return ""
	}
	if sep == "" {
		return "(" + item + ")" + quantifier(lo, hi)
	}
	restLo, restHi := max(lo-1, 0), hi
	if hi > 0 {
		restHi = hi - 1
	}
	s := item
	if q := quantifier(restLo, restHi); restHi != 0 {
		s += " (" + sep + " " + item + ")" + q
	}
	if lo == 0 {
		return "(" + s + ")?"
	}
	return s
}

func quantifier(lo, hi int) string {
	switch {
	case hi < 0 && lo == 0:
		return "*"
	case hi < 0 && lo == 1:
		return "+"
	case hi < 0:
		return "{" + strconv.Itoa(lo) + ",}"
	case lo == hi && lo == 1:
		return ""
	case lo == hi:
		return "{" + strconv.Itoa(lo) + "}"
	case lo == 0 && hi == 1:
		return "?"
	}
	return "{" + strconv.Itoa(lo) + "," + strconv.Itoa(hi) + "}"
}
