package jinja

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Hostile templates: each must stop with the limit it exceeds, as a
// *LimitError (or a *SyntaxError for what cannot even be parsed), without
// panicking, without exhausting memory and without leaving goroutines.

type hostileCase struct {
	name  string
	src   string
	limit string // the LimitError.Limit expected; "" for a SyntaxError
	lim   Limits
}

func hostileCases() []hostileCase {
	deep := func(open, close string, n int) string {
		return "{{ " + strings.Repeat(open, n) + "1" + strings.Repeat(close, n) + " }}"
	}
	return []hostileCase{
		{name: "nested loops", src: `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, limit: LimitIterations},
		{name: "loop over a huge range", src: `{% for i in range(10**12) %}x{% endfor %}`, limit: LimitRange},
		{name: "range with a huge step count", src: `{{ range(-9223372036854775807, 9223372036854775807)|length }}`, limit: LimitRange},
		{name: "recursive macro", src: `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, limit: LimitCallDepth},
		{name: "mutually recursive macros", src: `{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, limit: LimitCallDepth},
		{name: "recursive loop", src: `{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}`, limit: LimitCallDepth},
		{name: "caller recursion", src: `{% macro m() %}{{ caller() }}{% endmacro %}{% macro r() %}{% call m() %}{{ r() }}{% endcall %}{% endmacro %}{{ r() }}`, limit: LimitCallDepth},
		{name: "string repetition", src: `{{ 'x' * 10**9 }}`, limit: LimitAlloc},
		{name: "list repetition", src: `{{ [1, 2, 3] * 10**8 }}`, limit: LimitAlloc},
		{name: "string doubling", src: `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}`, limit: LimitAlloc},
		{name: "list doubling", src: `{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}`, limit: LimitAlloc},
		{name: "replace growth", src: `{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s.replace('x', 'xx') %}{% endfor %}`, limit: LimitAlloc},
		{name: "join growth", src: `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = [ns.s, ns.s]|join %}{% endfor %}`, limit: LimitAlloc},
		{name: "format width", src: `{{ "%999999999d"|format(1) }}`, limit: LimitAlloc},
		{name: "center width", src: `{{ "x".center(10**12) }}`, limit: LimitAlloc},
		{name: "output flood", src: `{% for i in range(100000) %}{{ "x" * 1000 }}{% endfor %}`, limit: LimitOutput},
		{name: "deep values", src: `{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}`, limit: LimitNesting},
		{name: "deep namespaces", src: `{% set ns = namespace(n=none) %}{% for i in range(100000) %}{% set ns.n = namespace(n=ns.n) %}{% endfor %}{{ ns }}`, limit: LimitNesting},
		{name: "long operator chain", src: "{{ 1" + strings.Repeat(" - 1", 100000) + " }}", limit: LimitNesting},
		{name: "long sum of strings", src: "{{ 'x'" + strings.Repeat(" + 'xxxxxxxxxx'", 100000) + " }}", limit: LimitSteps, lim: Limits{Steps: 150000}},
		{name: "long attribute chain", src: "{{ x" + strings.Repeat(".y", 100000) + " }}", limit: LimitNesting},
		{name: "long filter chain", src: "{{ 'x'" + strings.Repeat("|upper", 100000) + " }}", limit: LimitNesting},
		{name: "steps", src: `{% for i in range(100000) %}{% for j in range(10) %}{{ j }}{% endfor %}{% endfor %}`, limit: LimitSteps, lim: Limits{Steps: 100000}},
		{name: "nested parentheses", src: deep("(", ")", 100000)},
		{name: "nested lists", src: deep("[", "]", 100000)},
		{name: "nested dicts", src: deep("{'a': ", "}", 100000)},
		{name: "nested not", src: "{{ " + strings.Repeat("not ", 100000) + "1 }}"},
		{name: "nested minus", src: "{{ " + strings.Repeat("-", 100000) + "1 }}"},
		{name: "nested ifs", src: strings.Repeat("{% if 1 %}", 100000) + strings.Repeat("{% endif %}", 100000)},
		{name: "nested calls", src: "{{ f" + strings.Repeat("(f", 100000) + strings.Repeat(")", 100000) + " }}"},
	}
}

func TestHostileTemplates(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	for _, c := range hostileCases() {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			tmpl, err := Parse(c.src)
			if c.limit == "" {
				var se *SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("Parse: %v, want a *SyntaxError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
			defer cancel()
			_, err = tmpl.Render(ctx, map[string]Value{"f": Value{}}, &RenderOptions{Limits: c.lim})
			var le *LimitError
			if !errors.As(err, &le) {
				t.Fatalf("Render: %v, want a *LimitError", err)
			}
			if le.Limit != c.limit {
				t.Fatalf("Render: %v, want the %q limit", err, c.limit)
			}
			runtime.ReadMemStats(&after)
			// Generous: the render may allocate Limits.Alloc (64 MiB) plus
			// buffers growing by doubling and bookkeeping, never more.
			grew := after.TotalAlloc - before.TotalAlloc
			if grew > 512<<20 {
				t.Errorf("render allocated %d MB", grew>>20)
			}
			t.Logf("allocated %d MB", grew>>20)
		})
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines before, %d after", goroutines, n)
	}
}

// TestRenderCancelled: a render that would run for a long time stops with the
// context's error.
func TestRenderCancelled(t *testing.T) {
	tmpl, err := Parse(`{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	unlimited := Limits{Steps: -1, Iterations: -1, Output: -1, Alloc: -1}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	_, err = tmpl.Render(ctx, nil, &RenderOptions{Limits: unlimited})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Render: %v, want context.Canceled", err)
	}
	// an already finished context stops the render before it starts
	_, err = tmpl.Render(ctx, nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Render with a done context: %v", err)
	}
}

// TestLimitsDefaultsAndUnlimited checks how Limits fills its zero fields.
func TestLimitsDefaultsAndUnlimited(t *testing.T) {
	l := Limits{}.withDefaults()
	if l != DefaultLimits {
		t.Fatalf("zero Limits = %+v, want DefaultLimits %+v", l, DefaultLimits)
	}
	u := Limits{Steps: -1, Nesting: -1}.withDefaults()
	if u.Steps < 1<<60 || u.Nesting != maxNesting {
		t.Fatalf("unlimited = %+v", u)
	}
}

// TestLimitErrorNamesLimitAndPosition checks the error's text.
func TestLimitErrorNamesLimitAndPosition(t *testing.T) {
	tmpl, err := Parse("line one\n{{ 'x' * 10**9 }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(context.Background(), nil, nil)
	want := "jinja: line 2:8: template exceeded the limit on allocated bytes (67108864)"
	if err == nil || err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

// TestHostileFormats: format widths and precisions cannot make a render
// allocate gigabytes.
func TestHostileFormats(t *testing.T) {
	for _, src := range []string{
		`{{ "%.999999999f" % 1.5 }}`, `{{ "%999999999999999999999d" % 1 }}`, `{{ "{:.999999999f}".format(1.5) }}`,
		`{{ "{:99999999999999999999}".format(1) }}`, `{{ "x"|truncate(9223372036854775807) }}`,
		`{{ "abc"|truncate(3, leeway=9223372036854775807) }}`,
	} {
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		out, err := tmpl.Render(context.Background(), nil, nil)
		var le *LimitError
		var e *Error
		if err == nil && len(out) > 16 || err != nil && !errors.As(err, &le) && !errors.As(err, &e) {
			t.Errorf("%s: %d bytes, %v", src, len(out), err)
		}
	}
}

// TestConcurrentRenders: one Template renders from many goroutines (run
// with -race in CI's race job).
func TestConcurrentRenders(t *testing.T) {
	tmpl, err := Parse(`{% for i in range(n) %}{{ i }}{{ "," if not loop.last }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for n := 0; n < 50; n++ {
				out, err := tmpl.Render(context.Background(), map[string]Value{"n": Int(int64(n))}, nil)
				if err == nil && strings.Count(out, ",") != max(n-1, 0) {
					err = errors.New("wrong output " + out)
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
