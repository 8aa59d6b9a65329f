package jinja

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct {
		src  string
		pos  Pos
		want string // substring of the message
	}{
		{"{{ 1 + }}", Pos{1, 8}, "unexpected end of print statement"},
		{"line one\n  {% for x in %}", Pos{2, 15}, "expected an expression"},
		{"{% if x %}\nopen", Pos{2, 5}, "'elif' or 'else' or 'endif'"},
		{"{% for x in y %}{% if x %}{% endfor %}", Pos{1, 30}, "looking for 'elif' or 'else' or 'endif'"},
		{"{{ 'unterminated }}", Pos{1, 4}, "unterminated string"},
		{"text {# no end", Pos{1, 6}, "missing end of comment tag"},
		{"{% raw %}x", Pos{1, 1}, "missing end of raw directive"},
		{"{{ a b }}", Pos{1, 6}, "expected end of print statement, got 'b'"},
		{"{% endfor %}", Pos{1, 4}, "unknown tag 'endfor'"},
		{"{% include 'x.jinja' %}", Pos{1, 4}, "not supported"},
		{"{% break %}", Pos{1, 4}, "'break' outside of a loop"},
		{"{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", Pos{1, 35}, "'break' outside of a loop"},
		{"{{ (1, 2] }}", Pos{1, 9}, "unexpected ']', expected ')'"},
		{"{{ 1 }} }}\n{{ ) }}", Pos{2, 4}, "unexpected ')'"},
		{"{% set 1 = 2 %}", Pos{1, 8}, "can't assign"},
		{"{% set true = 2 %}", Pos{1, 8}, "can't assign to constant"},
		{"{% macro m(a=1, b) %}{% endmacro %}", Pos{1, 17}, "non-default argument follows default argument"},
		{"{{ f(a=1, 2) }}", Pos{1, 5}, "invalid syntax for function call"},
		{"{{ x is defined is defined }}", Pos{1, 17}, "cannot chain multiple tests"},
		{"{{ x is 5 }}", Pos{1, 9}, "expected test name"},
		{"{{ 99999999999999999999 }}", Pos{1, 4}, "integer literal too large"},
		{"{{ '\\x4' }}", Pos{1, 4}, "truncated \\x escape"},
		{"{{ x @ y }}", Pos{1, 6}, "unexpected char '@'"},
		{"é\n  é {{ ? }}", Pos{2, 8}, "unexpected char '?'"},
		{"{% %}", Pos{1, 4}, "tag name expected"},
		{"{{ x", Pos{1, 1}, "missing '}}'"},
		{"{% if x", Pos{1, 1}, "missing '%}'"},
	} {
		_, err := Parse(c.src)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%q: %v, want a *SyntaxError", c.src, err)
			continue
		}
		if se.Pos != c.pos || !strings.Contains(se.Msg, c.want) {
			t.Errorf("%q: %v, want %s: …%s…", c.src, err, c.pos, c.want)
		}
	}
}

// TestRenderErrorPositions: runtime errors name the line and column of the
// failing expression.
func TestRenderErrorPositions(t *testing.T) {
	for _, c := range []struct {
		src  string
		pos  Pos
		want string
	}{
		{"a\n{{ 1 + 'x' }}", Pos{2, 6}, "unsupported operand type(s) for +: 'int' and 'str'"},
		{"{% for m in messages %}\n  {{ m.content.x.y }}{% endfor %}", Pos{2, 17}, "has no attribute"},
		{"{{ raise_exception('Conversation roles must alternate') }}", Pos{1, 19}, "template raised: Conversation roles must alternate"},
	} {
		tmpl, err := Parse(c.src)
		if err != nil {
			t.Fatal(err)
		}
		vars := map[string]Value{"messages": NewList(func() Value { d := NewDict(); d.Set("content", String("hi")); return d.Value() }())}
		_, err = tmpl.Render(context.Background(), vars, nil)
		var pos Pos
		var e *Error
		var re *RaiseError
		switch {
		case errors.As(err, &e):
			pos = e.Pos
		case errors.As(err, &re):
			pos = re.Pos
		default:
			t.Errorf("%q: %v, want *Error or *RaiseError", c.src, err)
			continue
		}
		if pos != c.pos || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %s: …%s…", c.src, err, c.pos, c.want)
		}
	}
}

func TestFromJSON(t *testing.T) {
	v, err := FromJSON([]byte(`{"z": 1, "a": [1.5, 2, "x", null, true, {"k": 1e2}], "z": 3, "big": 123456789012345678901}`))
	if err != nil {
		t.Fatal(err)
	}
	d := v.dict()
	var keys []string
	for _, k := range d.keys {
		keys = append(keys, k.s)
	}
	if strings.Join(keys, ",") != "z,a,big" {
		t.Fatalf("key order %v, want z,a,big (first place of a repeated key)", keys)
	}
	if z, _ := d.getStr("z"); z.kind != KindInt || z.i != 3 {
		t.Fatalf("z = %+v, want the last value 3", z)
	}
	a, _ := d.getStr("a")
	kinds := []Kind{KindFloat, KindInt, KindString, KindNone, KindBool, KindDict}
	for i, it := range a.list().items {
		if it.kind != kinds[i] {
			t.Errorf("a[%d] kind %d, want %d", i, it.kind, kinds[i])
		}
	}
	if k, _ := a.list().items[5].dict().getStr("k"); k.kind != KindFloat || k.f != 100 {
		t.Errorf("1e2 = %+v, want float 100", k)
	}
	if big, _ := d.getStr("big"); big.kind != KindFloat {
		t.Errorf("an int beyond 64 bits = %+v, want a float", big)
	}
	for _, bad := range []string{``, `{`, `[1,]`, `{"a" 1}`, `1 2`, strings.Repeat("[", 600) + strings.Repeat("]", 600)} {
		if _, err := FromJSON([]byte(bad)); err == nil {
			t.Errorf("FromJSON(%.20q) succeeded", bad)
		}
	}
}

func TestFromGo(t *testing.T) {
	type custom struct{}
	v, err := FromGo(map[string]any{
		"b": []any{1, 2.0, 2.5, "s", nil, true, json.RawMessage(`{"y": 1, "x": 2}`), json.Number("7")},
		"a": map[string]string{"q": "r"},
		"u": uint64(math.MaxUint64),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &renderer{lim: DefaultLimits}
	s, err := r.repr(0, v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{'a': {'q': 'r'}, 'b': [1, 2, 2.5, 's', None, True, {'y': 1, 'x': 2}, 7], 'u': 1.8446744073709552e+19}`
	if s != want {
		t.Fatalf("FromGo gave %s\nwant %s", s, want)
	}
	if _, err := FromGo(custom{}); err == nil {
		t.Error("FromGo(struct) succeeded")
	}
	if _, err := FromGo(map[int]int{1: 1}); err == nil {
		t.Error("FromGo(map[int]int) succeeded")
	}
}

// fuzzSeeds are the real templates and the feature table's sources.
func fuzzSeeds(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "templates", "*.jinja"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(string(b))
		}
	}
	for _, c := range featureCases {
		f.Add(c.src)
	}
	for _, c := range hostileCases() {
		if len(c.src) < 4096 {
			f.Add(c.src)
		}
	}
}

// fuzzLimits keep each fuzz render small.
var fuzzLimits = Limits{Steps: 200_000, Iterations: 20_000, CallDepth: 32, Nesting: 256, Output: 1 << 20, Alloc: 8 << 20, Range: 10_000}

// FuzzParse: any source parses or fails with a *SyntaxError, never panics.
func FuzzParse(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, src string) {
		_, err := Parse(src)
		var se *SyntaxError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("Parse error %T: %v", err, err)
		}
	})
}

// FuzzRender: whatever parses renders or fails with one of this package's
// errors within the limits, never panics (render runs without Render's
// recover, so a panic fails the fuzz run).
func FuzzRender(f *testing.F) {
	fuzzSeeds(f)
	convs := loadConversations(f)
	msgs, err := FromJSON(convs.Conversations["tool_call_answered"])
	if err != nil {
		f.Fatal(err)
	}
	tools, err := FromJSON(convs.Tools)
	if err != nil {
		f.Fatal(err)
	}
	vars := map[string]Value{"messages": msgs, "tools": tools, "add_generation_prompt": Bool(true),
		"bos_token": String("<s>"), "eos_token": String("</s>")}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse(src)
		if err != nil {
			return
		}
		out, err := tmpl.render(context.Background(), vars, &RenderOptions{Limits: fuzzLimits})
		if err != nil {
			var e *Error
			var re *RaiseError
			var le *LimitError
			if !errors.As(err, &e) && !errors.As(err, &re) && !errors.As(err, &le) {
				t.Fatalf("Render error %T: %v", err, err)
			}
			return
		}
		if int64(len(out)) > fuzzLimits.Output {
			t.Fatalf("output of %d bytes beyond the limit", len(out))
		}
	})
}
