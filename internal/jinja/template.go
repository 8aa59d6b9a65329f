package jinja

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
)

// Template is a parsed template. It is immutable and safe for concurrent
// Render calls.
type Template struct {
	body  []stmt
	lines *lineIndex
	// sizeHint is the size of the last output plus some: the next render's
	// output buffer starts that large instead of growing by doubling.
	sizeHint atomic.Int64
}

// Parse parses a template's source. Its errors are *SyntaxError (with the
// line and column) when the source is not a template this package can run.
func Parse(src string) (*Template, error) {
	toks, lines, err := lex(src)
	if err != nil {
		return nil, err
	}
	body, err := parse(toks, lines)
	if err != nil {
		return nil, err
	}
	if err := checkNames(body, lines); err != nil {
		return nil, err
	}
	return &Template{body: body, lines: lines}, nil
}

// RenderOptions are the per-render settings; a nil *RenderOptions means the
// defaults.
type RenderOptions struct {
	// Limits bound the render (zero fields: DefaultLimits).
	Limits Limits
	// Now is the clock strftime_now reads (default time.Now, local time).
	Now func() time.Time
}

// Render runs the template with the given variables (besides the built-in
// globals range, namespace, dict, cycler, joiner, raise_exception and
// strftime_now) and returns the text. It stops when ctx ends (returning an
// error that wraps ctx.Err()) or a limit is exceeded (*LimitError); template
// errors are *Error or *RaiseError.
func (t *Template) Render(ctx context.Context, vars map[string]Value, o *RenderOptions) (out string, err error) {
	defer func() {
		// A bug of this package must not take a server down with it: it
		// becomes this render's error (the fuzz targets call render, without
		// this net, so that such bugs are found).
		if p := recover(); p != nil {
			out, err = "", &Error{Pos: Pos{1, 1}, Msg: fmt.Sprintf("internal error: %v\n%s", p, debug.Stack())}
		}
	}()
	return t.render(ctx, vars, o)
}

func (t *Template) render(ctx context.Context, vars map[string]Value, o *RenderOptions) (string, error) {
	r := &renderer{t: t, ctx: ctx, done: ctx.Done(), vars: vars, lim: DefaultLimits.withDefaults(), now: time.Now}
	if o != nil {
		r.lim = o.Limits.withDefaults()
		if o.Now != nil {
			r.now = o.Now
		}
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("jinja: render: %w", err)
	}
	r.out = &outBuf{top: true}
	if hint := t.sizeHint.Load(); hint > 0 && hint <= r.lim.Output {
		r.out.b.Grow(int(hint))
	}
	root := &scope{}
	if _, err := r.execBlock(t.body, root); err != nil {
		return "", err
	}
	out := r.out.String()
	t.sizeHint.Store(int64(len(out)) + int64(len(out))/8)
	return out, nil
}

// renderer is the state of one render.
type renderer struct {
	t     *Template
	ctx   context.Context
	done  <-chan struct{}
	vars  map[string]Value
	lim   Limits
	now   func() time.Time
	steps int64
	iters int64
	work  int64 // steps and iterations since the context was last checked
	alloc int64
	depth int // evaluation nesting
	calls int // macro / caller / recursive loop depth
	out   *outBuf
}

// outBuf collects output. A buffer that received one string holds it
// without copying (a macro's body is often one {{ expression }}).
type outBuf struct {
	b     strings.Builder
	first string // the only write so far, when b is empty
	n     int    // bytes written
	top   bool
}

func (o *outBuf) writeString(s string) {
	switch {
	case o.n == 0:
		o.first = s
	case o.b.Len() == 0:
		o.b.Grow(o.n + len(s))
		o.b.WriteString(o.first)
		o.first = ""
		o.b.WriteString(s)
	default:
		o.b.WriteString(s)
	}
	o.n += len(s)
}

func (o *outBuf) String() string {
	if o.b.Len() == 0 {
		return o.first
	}
	return o.b.String()
}

// ctrl is how a block ended.
type ctrl uint8

const (
	ctrlNone ctrl = iota
	ctrlBreak
	ctrlContinue
)

func (r *renderer) pos(off int) Pos { return r.t.lines.pos(off) }

func (r *renderer) errorf(off int, format string, args ...any) error {
	return &Error{Pos: r.pos(off), Msg: fmt.Sprintf(format, args...)}
}

func (r *renderer) limit(off int, name string, max int64) error {
	return &LimitError{Limit: name, Max: max, Pos: r.pos(off)}
}

// step counts one evaluation step and checks the context now and then.
func (r *renderer) step(off int) error {
	r.steps++
	if r.steps > r.lim.Steps {
		return r.limit(off, LimitSteps, r.lim.Steps)
	}
	return r.tick(off, 1)
}

// iterate counts n loop iterations (for loops, items a filter goes through);
// they count as steps too.
func (r *renderer) iterate(off int, n int64) error {
	r.iters += n
	if r.iters > r.lim.Iterations {
		return r.limit(off, LimitIterations, r.lim.Iterations)
	}
	r.steps += n
	if r.steps > r.lim.Steps {
		return r.limit(off, LimitSteps, r.lim.Steps)
	}
	return r.tick(off, n)
}

// tick checks the context every 1024 units of work.
func (r *renderer) tick(off int, n int64) error {
	r.work += n
	if r.work < 1024 {
		return nil
	}
	r.work = 0
	select {
	case <-r.done:
		return fmt.Errorf("jinja: line %s: render stopped: %w", r.pos(off), r.ctx.Err())
	default:
	}
	return nil
}

// charge counts n bytes the render is about to allocate.
func (r *renderer) charge(off int, n int64) error {
	if n < 0 || n > r.lim.Alloc {
		return r.limit(off, LimitAlloc, r.lim.Alloc)
	}
	r.alloc += n
	if r.alloc > r.lim.Alloc {
		return r.limit(off, LimitAlloc, r.lim.Alloc)
	}
	return nil
}

// Sizes charged for containers (roughly what Go allocates).
const (
	valueBytes = 56
	entryBytes = 2*valueBytes + 16
)

func (r *renderer) chargeList(off, n int) error { return r.charge(off, int64(n)*valueBytes+32) }

func (r *renderer) write(off int, s string) error {
	if r.out.top {
		if int64(r.out.n)+int64(len(s)) > r.lim.Output {
			return r.limit(off, LimitOutput, r.lim.Output)
		}
	} else if err := r.charge(off, int64(len(s))); err != nil {
		return err
	}
	r.out.writeString(s)
	return nil
}

// capture runs f with a fresh output buffer and returns what it wrote.
func (r *renderer) capture(f func() error) (string, error) {
	saved := r.out
	r.out = &outBuf{}
	err := f()
	s := r.out.String()
	r.out = saved
	return s, err
}

// scope holds the variables of one frame: the template's top level, a loop
// iteration, a macro call. Lookups walk to the parent, then to the render's
// variables and the globals.
type scope struct {
	parent *scope
	vars   []binding
	inline [4]binding // the first bindings, without a second allocation
}

type binding struct {
	name string
	v    Value
}

func (s *scope) set(name string, v Value) {
	for i := range s.vars {
		if s.vars[i].name == name {
			s.vars[i].v = v
			return
		}
	}
	if s.vars == nil {
		s.vars = s.inline[:0]
	}
	s.vars = append(s.vars, binding{name, v})
}

func (r *renderer) lookup(sc *scope, name string) (Value, bool) {
	for s := sc; s != nil; s = s.parent {
		for i := range s.vars {
			if s.vars[i].name == name {
				return s.vars[i].v, true
			}
		}
	}
	if v, ok := r.vars[name]; ok {
		return v, true
	}
	if v, ok := globals[name]; ok {
		return v, true
	}
	return Value{}, false
}

func (r *renderer) execBlock(body []stmt, sc *scope) (ctrl, error) {
	for _, s := range body {
		c, err := r.exec(s, sc)
		if err != nil || c != ctrlNone {
			return c, err
		}
	}
	return ctrlNone, nil
}

func (r *renderer) exec(s stmt, sc *scope) (ctrl, error) {
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > r.lim.Nesting {
		return ctrlNone, r.limit(s.stmtOff(), LimitNesting, int64(r.lim.Nesting))
	}
	if err := r.step(s.stmtOff()); err != nil {
		return ctrlNone, err
	}
	switch s := s.(type) {
	case *textStmt:
		return ctrlNone, r.write(s.off, s.s)
	case *printStmt:
		v, err := r.eval(s.e, sc)
		if err != nil {
			return ctrlNone, err
		}
		if v.kind == KindString {
			return ctrlNone, r.write(s.off, v.s)
		}
		str, err := r.str(s.off, v)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.write(s.off, str)
	case *ifStmt:
		for i, test := range s.tests {
			v, err := r.eval(test, sc)
			if err != nil {
				return ctrlNone, err
			}
			if v.truth() {
				return r.execBlock(s.then[i], sc)
			}
		}
		return r.execBlock(s.els, sc)
	case *forStmt:
		iter, err := r.eval(s.iter, sc)
		if err != nil {
			return ctrlNone, err
		}
		_, err = r.runLoop(s, sc, iter, 0, false)
		return ctrlNone, err
	case *setStmt:
		v, err := r.eval(s.value, sc)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.assign(sc, s.target, v)
	case *setBlockStmt:
		text, err := r.capture(func() error {
			c, err := r.execBlock(s.body, sc)
			if err == nil && c != ctrlNone {
				err = r.errorf(s.off, "break or continue outside a loop")
			}
			return err
		})
		if err != nil {
			return ctrlNone, err
		}
		v := String(text)
		if s.filter != nil {
			if v, err = r.applyFilterChain(s.filter, v, sc); err != nil {
				return ctrlNone, err
			}
		}
		return ctrlNone, r.assign(sc, s.target, v)
	case *macroStmt:
		sc.set(s.name, Value{kind: KindCallable, p: &macro{def: s.def, sc: sc}})
		return ctrlNone, nil
	case *callBlockStmt:
		caller := Value{kind: KindCallable, p: &macro{def: s.def, sc: sc, isCaller: true}}
		v, err := r.evalCall(s.call, sc, &caller)
		if err != nil {
			return ctrlNone, err
		}
		str, err := r.str(s.off, v)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.write(s.off, str)
	case *filterBlockStmt:
		text, err := r.capture(func() error {
			c, err := r.execBlock(s.body, sc)
			if err == nil && c != ctrlNone {
				err = r.errorf(s.off, "break or continue outside a loop")
			}
			return err
		})
		if err != nil {
			return ctrlNone, err
		}
		v, err := r.applyFilterChain(s.filter, String(text), sc)
		if err != nil {
			return ctrlNone, err
		}
		str, err := r.str(s.off, v)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.write(s.off, str)
	case *withStmt:
		inner := &scope{parent: sc}
		for i, t := range s.targets {
			v, err := r.eval(s.values[i], sc)
			if err != nil {
				return ctrlNone, err
			}
			if err := r.assign(inner, t, v); err != nil {
				return ctrlNone, err
			}
		}
		return r.execBlock(s.body, inner)
	case *breakStmt:
		return ctrlBreak, nil
	case *continueStmt:
		return ctrlContinue, nil
	}
	return ctrlNone, r.errorf(s.stmtOff(), "internal error: unknown statement %T", s)
}

// applyFilterChain applies a filter chain whose innermost argument is nil to
// v, innermost first (without recursion: a chain may be long).
func (r *renderer) applyFilterChain(f *filterExpr, v Value, sc *scope) (Value, error) {
	var chain []*filterExpr
	for x := f; x != nil; {
		chain = append(chain, x)
		if x.arg == nil {
			break
		}
		inner, ok := x.arg.(*filterExpr)
		if !ok {
			return Value{}, r.errorf(x.off, "internal error: filter chain")
		}
		x = inner
	}
	for i := len(chain) - 1; i >= 0; i-- {
		if err := r.step(chain[i].off); err != nil {
			return Value{}, err
		}
		var err error
		if v, err = r.callFilter(chain[i], v, sc); err != nil {
			return Value{}, err
		}
	}
	return v, nil
}

// assign binds a target.
func (r *renderer) assign(sc *scope, t target, v Value) error {
	switch t := t.(type) {
	case *nameTarget:
		sc.set(t.name, v)
		return nil
	case *nsTarget:
		ns, ok := r.lookup(sc, t.name)
		if !ok || ns.kind != KindNamespace {
			return r.errorf(t.off, "cannot assign attribute on non-namespace object")
		}
		attrs := ns.p.(*Namespace).attrs
		attrs.set(String(t.attr), v)
		return nil
	case *tupleTarget:
		items, err := r.unpack(t.off, v, len(t.items))
		if err != nil {
			return err
		}
		for i, sub := range t.items {
			if err := r.assign(sc, sub, items[i]); err != nil {
				return err
			}
		}
		return nil
	}
	return r.errorf(t.targetOff(), "internal error: unknown target %T", t)
}

// unpack splits v into exactly n values (Python's a, b = v).
func (r *renderer) unpack(off int, v Value, n int) ([]Value, error) {
	items, err := r.iterItems(off, v)
	if err != nil {
		return nil, err
	}
	if len(items) != n {
		if len(items) < n {
			return nil, r.errorf(off, "not enough values to unpack (expected %d, got %d)", n, len(items))
		}
		return nil, r.errorf(off, "too many values to unpack (expected %d)", n)
	}
	return items, nil
}

// iterItems returns what iterating v yields: a list's items, a dict's keys, a
// string's characters; nothing for Undefined.
func (r *renderer) iterItems(off int, v Value) ([]Value, error) {
	switch v.kind {
	case KindList:
		return v.list().items, nil
	case KindDict:
		return v.dict().keys, nil
	case KindString:
		if err := r.chargeList(off, len(v.s)); err != nil {
			return nil, err
		}
		return splitChars(v.s), nil
	case KindUndefined:
		return nil, nil
	case KindNamespace:
		return nil, r.errorf(off, "'Namespace' object is not iterable")
	}
	return nil, r.errorf(off, "'%s' object is not iterable", v.typeName())
}

// runLoop runs a for loop over iter; depth > 0 for the calls of a recursive
// loop, whose output is returned instead of written when capture is set.
func (r *renderer) runLoop(s *forStmt, sc *scope, iter Value, depth int, capture bool) (string, error) {
	items, err := r.iterItems(s.off, iter)
	if err != nil {
		return "", err
	}
	if s.cond != nil {
		var kept []Value
		for _, it := range items {
			if err := r.iterate(s.off, 1); err != nil {
				return "", err
			}
			tmp := &scope{parent: sc}
			if err := r.assign(tmp, s.target, it); err != nil {
				return "", err
			}
			ok, err := r.eval(s.cond, tmp)
			if err != nil {
				return "", err
			}
			if ok.truth() {
				kept = append(kept, it)
			}
		}
		if err := r.chargeList(s.off, len(kept)); err != nil {
			return "", err
		}
		items = kept
	}
	run := func() error {
		loop := &loopObj{items: items, depth: depth, stmt: s, sc: sc}
		lv := Value{kind: KindObject, p: loop}
		if s.recursive {
			lv = Value{kind: KindCallable, p: loop}
		}
		for i, it := range items {
			if err := r.iterate(s.off, 1); err != nil {
				return err
			}
			loop.index = i
			body := &scope{parent: sc}
			if err := r.assign(body, s.target, it); err != nil {
				return err
			}
			body.set("loop", lv)
			c, err := r.execBlock(s.body, body)
			if err != nil {
				return err
			}
			if c == ctrlBreak {
				break
			}
		}
		if len(items) == 0 && s.els != nil {
			c, err := r.execBlock(s.els, &scope{parent: sc})
			if err != nil {
				return err
			}
			if c != ctrlNone {
				return r.errorf(s.off, "break or continue outside a loop")
			}
		}
		return nil
	}
	if capture {
		return r.capture(run)
	}
	return "", run()
}
