package jinja

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/jinjaoracle"
)

// TestRandomTemplatesAgainstPython renders templates drawn at random from a
// small grammar (literals, variables, operators, filters, tests, methods,
// conditionals, loops, macros, namespaces) and compares each render with
// jinja2's: the same text, or an error on both sides. The draw is seeded, so
// a failure reproduces.
func TestRandomTemplatesAgainstPython(t *testing.T) {
	o := jinjaoracle.Python(t)
	const n = 600
	g := templateGen{rng: rand.New(rand.NewPCG(2026, 7))}
	ctx := `{"s": "Héllo, World  ", "n": 7, "f": 2.5, "neg": -3, "z": 0, "l": [3, 1, 2], "ls": ["b", "A", "a"], "e": [],
		"d": {"b": 1, "a": 2}, "nested": {"x": {"y": [1, {"z": "q"}]}}, "t": true, "no": null,
		"ms": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}]}`
	templates := map[string]string{}
	cases := make([]jinjaoracle.Case, n)
	for i := range cases {
		name := fmt.Sprint(i)
		templates[name] = g.template()
		cases[i] = jinjaoracle.Case{Template: name, Context: json.RawMessage(ctx), Now: jinjaoracle.Now.Format(time.RFC3339)}
	}
	res := o.Run(t, templates, cases)
	vars := featureVars(t, ctx)
	bad, rendered := 0, 0
	for i, c := range cases {
		src := templates[c.Template]
		var got string
		tmpl, err := Parse(src)
		if err == nil {
			got, err = tmpl.Render(context.Background(), vars, &RenderOptions{Now: func() time.Time { return oracleNow }})
		}
		want := res[i]
		switch {
		case want.Output == nil && err == nil:
			bad++
			t.Errorf("%s\n  jinja2 fails (%s), we render %q", src, want.Error, got)
		case want.Output != nil && err != nil:
			bad++
			t.Errorf("%s\n  jinja2 renders %q, we fail: %v", src, *want.Output, err)
		case want.Output != nil && got != *want.Output:
			bad++
			t.Errorf("%s\n  jinja2 renders %q, we %q", src, *want.Output, got)
		case want.Output != nil:
			rendered++
		}
		if bad >= 10 {
			t.Fatal("too many differences")
		}
	}
	t.Logf("%d random templates, %d rendered identically, the others fail on both sides", n, rendered)
}

// templateGen draws templates; method calls always have a parenthesized
// receiver (a.b|f.m() would name the filter "f.m").
type templateGen struct{ rng *rand.Rand }

var (
	genAtoms = []string{"s", "n", "f", "neg", "z", "l", "ls", "e", "d", "nested", "t", "no", "missing", "ms",
		"'ab'", "''", "'x y'", "1", "0", "-1", "2.0", "0.5", "true", "false", "none", "[1, 2]", "[]", "(1,)", "{'k': 1}",
		"nested.x", "nested.x.y", "nested.x.y[1]", "ms[0]", "ms[-1].tool_calls", "l[0]", "l[1:]", "s[::-1]", "s[2:5]",
		"d['a']", "d.b", "ms|length", "range(3)", "loopvar"}
	genFilters = []string{"length", "upper", "lower", "trim", "first", "last", "list", "string", "int", "float", "abs", "join",
		"join(',')", "tojson", "tojson(indent=2)", "sort", "reverse|list", "unique|list", "items|list", "dictsort", "default('D')",
		"default('D', true)", "title", "capitalize", "replace('l', 'L')", "indent(2)", "round", "round(1)", "sum", "min", "max",
		"map('string')|list", "select('odd')|list", "reject|list", "selectattr('role', 'equalto', 'user')|list",
		"map(attribute='role')|list", "batch(2)|list", "slice(2)|list", "truncate(5)", "wordcount", "center(9)", "e", "safe",
		"count", "string|length", "list|length"}
	genTests = []string{"defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
		"odd", "even", "true", "false", "boolean", "lower", "upper", "divisibleby 2", "in [1, 2, 'ab']", "eq 7", "gt 1"}
	genMethods = []string{"upper()", "lower()", "strip()", "split()", "split(',')", "startswith('H')", "endswith(' ')",
		"replace('l', '')", "title()", "find('l')", "count('l')", "get('a')", "get('x', 0)", "items()|list", "keys()|list",
		"values()|list", "format(1)", "center(5)", "zfill(3)", "rstrip()", "lstrip()", "rsplit(' ', 1)", "partition(',')",
		"splitlines()", "isdigit()", "index(1)", "copy()"}
	genOps = []string{"+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"}
)

func (g *templateGen) pick(xs []string) string { return xs[g.rng.IntN(len(xs))] }

func (g *templateGen) expr(d int) string {
	r := g.rng.Float64()
	switch {
	case d > 3 || r < 0.3:
		return g.pick(genAtoms)
	case r < 0.5:
		return g.expr(d+1) + "|" + g.pick(genFilters)
	case r < 0.6:
		not := ""
		if g.rng.Float64() < 0.3 {
			not = "not "
		}
		return g.expr(d+1) + " is " + not + g.pick(genTests)
	case r < 0.7:
		return "(" + g.expr(d+1) + ")." + g.pick(genMethods)
	case r < 0.9:
		return "(" + g.expr(d+1) + " " + g.pick(genOps) + " " + g.expr(d+1) + ")"
	case r < 0.95:
		return "(" + g.expr(d+1) + " if " + g.expr(d+1) + " else " + g.expr(d+1) + ")"
	}
	return "not " + g.expr(d+1)
}

func (g *templateGen) stmt(d int) string {
	r := g.rng.Float64()
	switch {
	case d > 2 || r < 0.4:
		return "{{ " + g.expr(0) + " }}"
	case r < 0.55:
		return "{% for loopvar in " + g.expr(0) + " %}[{{ loop.index }}" + g.stmt(d+1) + "]{% else %}E{% endfor %}"
	case r < 0.7:
		return "{% if " + g.expr(0) + " %}" + g.stmt(d+1) + "{% else %}" + g.stmt(d+1) + "{% endif %}"
	case r < 0.8:
		return "{% set v = " + g.expr(0) + " %}{{ v }}" + g.stmt(d+1)
	case r < 0.9:
		return "{% macro mm(a, b=2) %}{{ a }}-{{ b }}{{ " + g.expr(0) + " }}{% endmacro %}{{ mm(" + g.expr(0) + ") }}"
	}
	return "{% set ns = namespace(c=0) %}{% for x in range(3) %}{% set ns.c = ns.c + x %}{% endfor %}{{ ns.c }}" + g.stmt(d+1)
}

func (g *templateGen) template() string {
	parts := make([]string, 1+g.rng.IntN(3))
	for i := range parts {
		parts[i] = g.stmt(0)
	}
	return strings.Join(parts, " ")
}
