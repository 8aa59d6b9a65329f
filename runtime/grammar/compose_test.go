package grammar

import (
	"errors"
	"strings"
	"testing"
)

func TestNamespace(t *testing.T) {
	src := "root ::= item (\",\" item)* # items\nitem ::= [a-z]+ | \"<\" root \">\" | <think> | \"item root\"\n"
	got, err := Namespace(src, "t0-")
	if err != nil {
		t.Fatal(err)
	}
	want := "t0-root ::= t0-item (\",\" t0-item)* # items\nt0-item ::= [a-z]+ | \"<\" t0-root \">\" | <think> | \"item root\"\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}

	// Two schemas' grammars combined under one root: each keeps its own rules.
	a, err := JSONSchemaGBNF([]byte(`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":3}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := JSONSchemaGBNF([]byte(`{"type":"object","properties":{"n":{"type":"string","maxLength":2}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	na, err := Namespace(a, "a-")
	if err != nil {
		t.Fatal(err)
	}
	nb, err := Namespace(b, "b-")
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse("root ::= \"A\" a-root | \"B\" b-root\n" + na + nb)
	if err != nil {
		t.Fatal(err)
	}
	for text, ok := range map[string]bool{
		`A{"n": 2}`: true, `A{"n": 4}`: false, `A{"n": "x"}`: false,
		`B{"n": "xy"}`: true, `B{"n": "xyz"}`: false, `B{"n": 2}`: false,
	} {
		if accepts(t, g, text) != ok {
			t.Errorf("%q: accepted %v, want %v", text, !ok, ok)
		}
	}

	// CRLF line ends and a rule continued inside parentheses keep their offsets.
	got, err = Namespace("root ::= (\r\n  x\r\n)\r\nx ::= \"x\"\r\n", "p_")
	if err != nil || got != "p_root ::= (\r\n  p_x\r\n)\r\np_x ::= \"x\"\r\n" {
		t.Fatalf("%q, %v", got, err)
	}

	var se *SyntaxError
	if _, err := Namespace("root ::= [", "p-"); !errors.As(err, &se) {
		t.Fatalf("bad grammar: %v", err)
	}
	if _, err := Namespace("root ::= \"x\"", "p q"); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("bad prefix: %v", err)
	}
}

func FuzzNamespace(f *testing.F) {
	f.Add("root ::= a b\na ::= \"a\" # c\nb ::= [b] | <x> a{2}\n")
	f.Add("root ::= (\n x |\n y)*\nx ::= \"\\\"x\"\ny ::= !<[3]>\n")
	f.Fuzz(func(t *testing.T, src string) {
		out, err := Namespace(src, "ns-")
		if err != nil {
			return
		}
		// The result parses, has the same number of rules, all prefixed.
		tree, err := parseGBNF(out, Limits{})
		if err != nil {
			t.Fatalf("%q → %q: %v", src, out, err)
		}
		orig, _ := parseGBNF(src, Limits{})
		if len(tree.rules) != len(orig.rules) {
			t.Fatalf("%q → %q: %d rules, was %d", src, out, len(tree.rules), len(orig.rules))
		}
		for i, r := range tree.rules {
			if r.name != "ns-"+orig.rules[i].name {
				t.Fatalf("%q → %q: rule %q, was %q", src, out, r.name, orig.rules[i].name)
			}
		}
	})
}
