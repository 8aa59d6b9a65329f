package grammar

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
)

// schemaCases are schemas whose sampled outputs must parse as JSON and
// validate (validate_test.go).
var schemaCases = []struct{ name, schema string }{
	{"risk", `{"type":"object","properties":{"risk_level":{"type":"integer","minimum":1,"maximum":5},"reason":{"type":"string","maxLength":12}},"required":["risk_level","reason"],"additionalProperties":false}`},
	{"ten-properties", tenProperties},
	{"optional", `{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"enum":["x","y",1,null]},"d":{"const":"k\"q"}},"required":["d"]}`},
	{"all-optional", `{"properties":{"a":{"type":"boolean"},"b":{"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":3},"c":{"type":"string","minLength":2,"maxLength":3}}}`},
	{"arrays", `{"type":"array","items":{"type":"integer","minimum":-20,"maximum":-7},"minItems":1,"maxItems":4}`},
	{"tuple", `{"type":"array","prefixItems":[{"type":"string","format":"date"},{"type":"number","minimum":0,"maximum":1}],"items":{"type":"boolean"},"maxItems":4}`},
	{"nullable", `{"type":["string","null"],"maxLength":3}`},
	{"any-of", `{"anyOf":[{"type":"integer","minimum":100},{"type":"string","pattern":"^[A-Z]{2}-[0-9]{3}$"},{"type":"array","maxItems":0}]}`},
	{"refs", `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","maximum":9,"minimum":0},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"}`},
	{"definitions", `{"type":"object","properties":{"when":{"$ref":"#/definitions/t"},"id":{"type":"string","format":"uuid"}},"required":["when","id"],"definitions":{"t":{"type":"string","format":"date-time"}}}`},
	{"additional", `{"type":"object","properties":{"name":{"type":"string","maxLength":4}},"required":["name"],"additionalProperties":{"type":"integer","maximum":9,"minimum":0}}`},
	{"additional-any", `{"type":"object","properties":{"na":{"type":"boolean"},"nb":{"type":"boolean"}},"additionalProperties":true}`},
	{"all-of", `{"allOf":[{"$ref":"#/$defs/a"},{"properties":{"b":{"type":"boolean"}},"required":["b"]}],"$defs":{"a":{"type":"object","properties":{"a":{"type":"string","enum":["p","q"]}},"required":["a"]}}}`},
	{"pattern", `{"type":"object","properties":{"code":{"type":"string","pattern":"^(?:[a-c]|\\d\\.){1,3}[\"\\\\\\n]?x$"},"loose":{"type":"string","pattern":"ab+"}},"required":["code","loose"]}`},
	{"numbers", `{"type":"array","prefixItems":[{"type":"number","minimum":-2,"exclusiveMaximum":0},{"type":"number","exclusiveMinimum":0},{"type":"number","maximum":-5},{"type":"number"},{"type":"integer","minimum":1000000}],"items":false,"minItems":5}`},
	{"time", `{"type":"string","format":"time"}`},
	{"root-ref", `{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":3},"kids":{"type":"array","items":{"$ref":"#"},"maxItems":2}},"required":["n","kids"]}`},
	{"empty", `{}`},
	{"object", `{"type":"object"}`},
}

const tenProperties = `{"type":"object","properties":{
 "transaction_id":{"type":"string","maxLength":16},"amount":{"type":"number"},"currency":{"enum":["EUR","USD","GBP"]},
 "risk_level":{"type":"integer","minimum":1,"maximum":5},"flags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3},
 "reviewed":{"type":"boolean"},"country":{"type":"string","pattern":"^[A-Z]{2}$"},"score":{"type":"number","minimum":0,"maximum":1},
 "notes":{"type":["string","null"],"maxLength":20},"date":{"type":"string","format":"date"}},
 "required":["transaction_id","amount","currency","risk_level","flags","reviewed","country","score","notes","date"],"additionalProperties":false}`

var jsonAlphabet = strings.Split(`{ } [ ] " : , \ n u 0 1 2 5 9 - + . e E a b c x q A B Z T t r f l s null true false é 中 \u00e9 \" \n`, " ")

func TestSchemaOutputsValidate(t *testing.T) {
	n := 100
	if testing.Short() {
		n = 30
	}
	rng := rand.New(rand.NewPCG(11, 12))
	v := testVocab(rng, jsonAlphabet, 1500)
	for ci, tc := range schemaCases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := FromJSONSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 3))
			complete := 0
			for i := range n {
				text, done := generate(t, g, v, rng, uint64(i), 300)
				if !done {
					continue
				}
				complete++
				if err := validate([]byte(text), []byte(tc.schema)); err != nil {
					t.Fatalf("output %d %q: %v\ngrammar:\n%s", i, text, err, g)
				}
			}
			if complete < n/5 {
				t.Fatalf("only %d of %d outputs completed", complete, n)
			}
		})
	}
}

// TestSchemaAcceptsAndRejects checks hand-picked documents against the
// schema grammars (whitespace policy included).
func TestSchemaAcceptsAndRejects(t *testing.T) {
	for _, tc := range []struct {
		schema string
		yes    []string
		no     []string
	}{
		{`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]}`,
			[]string{`{"a":1}`, `{ "a" : -0, "b": "x\"y\\u00e9" }`, "{\n  \"a\": 12,\n  \"b\": \"\"\n}"},
			[]string{`{"b":"x","a":1}`, `{"a":1,"c":2}`, `{"a":1.5}`, `{}`, `{"a":01}`, `{"a":1,}`, "{\"a\":1\n\n\n}"}},
		{`{"type":"integer","minimum":-5,"maximum":123}`,
			[]string{"-5", "0", "9", "10", "99", "100", "123", "-1"},
			[]string{"-6", "124", "200", "1000", "-0.5", "00", "-00", "+1", "-"}},
		{`{"type":"number","minimum":0,"maximum":1}`,
			[]string{"0", "1", "0.5", "0.999", "1.0", "1.000", "0.0"},
			[]string{"1.1", "1.01", "-0.1", "2", "1e0", "-1"}},
		{`{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}`,
			[]string{"0.5", "0.01"},
			[]string{"0", "1", "0.0", "0.000", "1.0", "-0"}},
		{`{"type":"string","pattern":"^a(b|c)*d?$"}`,
			[]string{`"a"`, `"abcbd"`, `"ad"`},
			[]string{`"b"`, `"ae"`, `"abd "`}},
		{`{"type":"string","pattern":"x"}`,
			[]string{`"x"`, `"axb"`, `"\"x\\n"`},
			[]string{`"y"`, `""`}},
		{`{"type":"string","pattern":"^[^a]$"}`,
			[]string{`"b"`, `"\""`, `"\\"`, `"\n"`, `"\u0001"`, `"é"`},
			[]string{`"a"`, `"""`, "\"\n\"", `"\u0061"`}},
		{`{"type":"string","minLength":2,"maxLength":3}`,
			[]string{`"ab"`, `"a\nb"`, `"é中x"`},
			[]string{`"a"`, `"abcd"`}},
		{`{"type":"object","properties":{"a":{"type":"boolean"}},"additionalProperties":{"type":"integer"}}`,
			[]string{`{}`, `{"a":true}`, `{"a":true,"b":1,"c":2}`, `{"b":1}`, `{"ab":3}`},
			[]string{`{"a":1}`, `{"b":"x"}`}},
		{`{"enum":["a",1,null,[1,"x"],{"k":true}]}`,
			[]string{`"a"`, `1`, `null`, `[1,"x"]`, `{"k":true}`},
			[]string{`"b"`, `2`, `[1, "x"]`}},
		{`{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3}`,
			[]string{`[1,2]`, `[1, 2, 3]`},
			[]string{`[1]`, `[1,2,3,4]`, `[]`}},
		{`{"type":"string","format":"date-time"}`,
			[]string{`"2024-02-29T23:59:59Z"`, `"2024-12-01T00:00:00.123+05:30"`},
			[]string{`"2024-13-01T00:00:00Z"`, `"2024-12-01 00:00:00Z"`, `"2024-12-01T24:00:00Z"`}},
	} {
		g, err := FromJSONSchema([]byte(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		for _, s := range tc.yes {
			if !accepts(t, g, s) {
				t.Errorf("%s rejects %s\n%s", tc.schema, s, g)
			}
		}
		for _, s := range tc.no {
			if accepts(t, g, s) {
				t.Errorf("%s accepts %s", tc.schema, s)
			}
		}
	}
}

// TestIntegerRangesExhaustive: every integer near the bounds (and a sample
// of far ones) is accepted exactly when in range.
func TestIntegerRangesExhaustive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, b := range []struct {
		lo, hi *int64
	}{
		{p(0), p(0)}, {p(1), p(5)}, {p(-5), p(123)}, {p(17), p(2049)}, {p(-1000), p(-37)}, {p(99), p(100)}, {p(-99), p(1)},
		{p(0), nil}, {p(7), nil}, {p(10), nil}, {p(-7), nil}, {p(12345), nil}, {nil, p(0)}, {nil, p(42)}, {nil, p(-42)}, {nil, p(-1)},
		{p(1000), p(999999)}, {p(-9223372036854775807), p(9223372036854775807)},
	} {
		schema := `{"type":"integer"`
		if b.lo != nil {
			schema += `,"minimum":` + strconv.FormatInt(*b.lo, 10)
		}
		if b.hi != nil {
			schema += `,"maximum":` + strconv.FormatInt(*b.hi, 10)
		}
		schema += "}"
		g, err := FromJSONSchema([]byte(schema))
		if err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
		var cands []int64
		for _, c := range []*int64{b.lo, b.hi} {
			if c != nil {
				for d := int64(-60); d <= 60; d++ {
					cands = append(cands, *c+d)
				}
			}
		}
		for range 200 {
			cands = append(cands, rng.Int64N(1<<40)-1<<39, rng.Int64N(2000)-1000)
		}
		for _, x := range cands {
			want := (b.lo == nil || x >= *b.lo) && (b.hi == nil || x <= *b.hi)
			if got := accepts(t, g, strconv.FormatInt(x, 10)); got != want {
				t.Fatalf("%s: %d accepted %v, want %v", schema, x, got, want)
			}
		}
	}
}

func p(v int64) *int64 { return &v }

func TestSchemaErrors(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type":"object","properties":{"a":{"type":"string","not":{"const":"x"}}}}`, `json schema: /properties/a/not: unsupported keyword "not"`},
		{`{"if":{"type":"string"}}`, `/if: unsupported keyword "if"`},
		{`{"type":"array","uniqueItems":true}`, `/uniqueItems: unsupported keyword "uniqueItems"`},
		{`{"type":"object","patternProperties":{}}`, `/patternProperties: unsupported keyword`},
		{`{"type":"number","multipleOf":2}`, `/multipleOf: unsupported keyword`},
		{`{"type":"string","format":"email"}`, `/format: unsupported format "email"`},
		{`{"type":"strin"}`, `/type: unknown type "strin"`},
		{`{"type":"number","minimum":0.5}`, `/minimum: only integral bounds`},
		{`{"type":"integer","minimum":5,"maximum":4}`, `no integer lies within the bounds`},
		{`{"type":"string","pattern":"(?=a)b"}`, `/pattern: pattern "(?=a)b" at offset 1: lookaround`},
		{`{"type":"string","pattern":"(a)\\1"}`, `backreferences`},
		{`{"type":"string","pattern":"\\bword"}`, `word boundaries`},
		{`{"type":"string","pattern":"a^b"}`, `anchor ^ inside`},
		{`{"type":"string","pattern":"^a","maxLength":3}`, `pattern together with minLength`},
		{`{"$ref":"https://example.com/s.json"}`, `only references within the schema`},
		{`{"$ref":"#/$defs/missing"}`, `does not resolve`},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, `required property "b" has no schema`},
		{`{"type":"array","items":{},"maxItems":100000}`, `/maxItems: 100000 exceeds the supported maximum`},
		{`{"type":"array","minItems":-1}`, `/minItems: must be a non-negative integer`},
		{`{"anyOf":[]}`, `/anyOf: anyOf must be a non-empty array`},
		{`{"anyOf":[{"type":"string"}],"type":"string"}`, `/type: keyword "type" beside anyOf`},
		{`{"$ref":"#/$defs/a","minimum":3,"$defs":{"a":{}}}`, `/minimum: keyword "minimum" beside $ref`},
		{`{"enum":[1,2],"type":"string"}`, `/enum: no value of type string`},
		{`false`, `the schema false matches nothing`},
		{`[1]`, `a schema must be an object or a boolean`},
		{`{"type":"object"`, `not valid JSON`},
		{`{"a":1,"a":2}`, `duplicate key`},
		{`{"properties":{"a":{}},"items":{}}`, `keywords for both object and array`},
		{strings.Repeat(`{"items":`, 70) + "{}" + strings.Repeat("}", 70), "nested deeper"},
	} {
		_, err := FromJSONSchema([]byte(tc.schema))
		if err == nil {
			t.Errorf("%s: converted, want error %q", tc.schema, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.schema, err, tc.want)
		}
		var se *SchemaError
		if !errors.As(err, &se) || !se.InputError() {
			t.Errorf("%s: %T is not a SchemaError", tc.schema, err)
		}
	}
}

// TestPatternsAgainstRegexp: strings sampled from pattern grammars match
// the same pattern in Go's regexp (RE2 and ECMAScript agree on this
// subset), once JSON-decoded.
func TestPatternsAgainstRegexp(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	v := testVocab(rng, jsonAlphabet, 800)
	for _, pat := range []string{`^[a-c]{2,4}$`, `^(ab|c)+\.?$`, `^\d{3}-\d{2}$`, `^[^"\\]{0,3}$`, `^\w\s?\W$`, `ba`, `^x|y$`, `^(?:\"|\\|\n|\t|\x01)+$`, `^[é-ÿ中]+$`, `^.{2}$`} {
		schema := `{"type":"string","pattern":` + jsonString(pat) + `}`
		g, err := FromJSONSchema([]byte(schema))
		if err != nil {
			t.Fatalf("%s: %v", pat, err)
		}
		for i := range 100 {
			text, done := generate(t, g, v, rng, uint64(i), 60)
			if !done {
				continue
			}
			if err := validate([]byte(text), []byte(schema)); err != nil {
				t.Fatalf("pattern %s: output %s: %v", pat, text, err)
			}
		}
	}
}

func FuzzJSONSchema(f *testing.F) {
	for _, tc := range schemaCases {
		f.Add(tc.schema)
	}
	f.Add(`{"type":"string","pattern":"^(a|b{2,3})*[^x-z]\\d?$"}`)
	f.Add(`{"type":"integer","minimum":-3,"exclusiveMaximum":77}`)
	v := testVocab(newRand(2), jsonAlphabet, 50)
	f.Fuzz(func(t *testing.T, schema string) {
		g, err := FromJSONSchema([]byte(schema))
		if err != nil {
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("error %T %v is not a SchemaError", err, err)
			}
			return
		}
		m, err := g.NewMatcher(v)
		if err != nil {
			return
		}
		mask := engine.NewTokenMask(v.Size())
		if _, err := m.Allowed(mask); err != nil {
			return
		}
	})
}
