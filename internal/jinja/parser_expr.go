package jinja

// Expressions, lowest precedence first (see parser.go for the grammar).

import (
	"strings"
)

// parseTuple parses an expression or a comma-separated tuple of them.
func (p *parser) parseTuple(simplified, withCond bool, extraEnd []string, explicitParens bool) (expr, error) {
	off := p.cur().off
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isTupleEnd(extraEnd) {
			break
		}
		var e expr
		var err error
		if simplified {
			e, err = p.parsePrimary()
		} else {
			e, err = p.parseExpression(withCond)
		}
		if err != nil {
			return nil, err
		}
		items = append(items, e)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.fail(p.cur().off, "expected an expression, got "+p.cur().describe())
		}
	}
	return &tupleExpr{off: off, items: items}, nil
}

func (p *parser) parseExpression(withCond bool) (expr, error) {
	if err := p.enter(p.cur().off); err != nil {
		return nil, err
	}
	defer p.leave()
	if !withCond {
		return p.parseOr()
	}
	off := p.cur().off
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.skipName("else") {
			if els, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		e = &condExpr{off: off, test: test, then: e, els_: els}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		off := p.advance().off
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &orExpr{off: off, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		off := p.advance().off
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &andExpr{off: off, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		off := p.advance().off
		if err := p.enter(off); err != nil {
			return nil, err
		}
		defer p.leave()
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{off: off, e: e}, nil
	}
	return p.parseCompare()
}

var compareOps = map[string]bool{"==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true}

func (p *parser) parseCompare() (expr, error) {
	off := p.cur().off
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var ops []cmpOp
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && compareOps[t.val]:
			p.advance()
			op = t.val
		case t.kind == tName && t.val == "in":
			p.advance()
			op = "in"
		case t.kind == tName && t.val == "not" && p.peek().kind == tName && p.peek().val == "in":
			p.advance()
			p.advance()
			op = "notin"
		}
		if op == "" {
			break
		}
		e, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		ops = append(ops, cmpOp{op: op, e: e})
	}
	if len(ops) == 0 {
		return first, nil
	}
	return &compareExpr{off: off, first: first, ops: ops}, nil
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		t := p.advance()
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{off: t.off, op: t.val, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseConcat() (expr, error) {
	off := p.cur().off
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	if !p.isOp("~") {
		return first, nil
	}
	items := []expr{first}
	for p.skipOp("~") {
		e, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return &concatExpr{off: off, items: items}, nil
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		t := p.advance()
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{off: t.off, op: t.val, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		t := p.advance()
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{off: t.off, op: "**", l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	t := p.cur()
	var e expr
	if t.kind == tOp && (t.val == "-" || t.val == "+") {
		p.advance()
		if err := p.enter(t.off); err != nil {
			return nil, err
		}
		inner, err := p.parseUnary(false)
		p.leave()
		if err != nil {
			return nil, err
		}
		e = &negExpr{off: t.off, e: inner, neg: t.val == "-"}
	} else {
		var err error
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	e, err := p.parsePostfix(e)
	if err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.advance()
		switch t.val {
		case "true", "True":
			return &constExpr{off: t.off, v: Bool(true)}, nil
		case "false", "False":
			return &constExpr{off: t.off, v: Bool(false)}, nil
		case "none", "None":
			return &constExpr{off: t.off, v: None()}, nil
		}
		p.noteName(t.val)
		return &nameExpr{off: t.off, name: t.val}, nil
	case tString:
		p.advance()
		s := t.val
		if p.cur().kind == tString {
			var b strings.Builder
			b.WriteString(s)
			for p.cur().kind == tString {
				b.WriteString(p.advance().val)
			}
			s = b.String()
		}
		return &constExpr{off: t.off, v: String(s)}, nil
	case tInt:
		p.advance()
		return &constExpr{off: t.off, v: Int(t.ival)}, nil
	case tFloat:
		p.advance()
		return &constExpr{off: t.off, v: Float(t.fval)}, nil
	case tOp:
		switch t.val {
		case "(":
			p.advance()
			e, err := p.parseTuple(false, true, nil, true)
			if err != nil {
				return nil, err
			}
			if _, err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return e, nil
		case "[":
			p.advance()
			l := &listExpr{off: t.off}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if _, err := p.expectOp(","); err != nil {
						return nil, err
					}
				}
				if p.isOp("]") {
					break
				}
				e, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
			}
			p.advance()
			return l, nil
		case "{":
			p.advance()
			d := &dictExpr{off: t.off}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if _, err := p.expectOp(","); err != nil {
						return nil, err
					}
				}
				if p.isOp("}") {
					break
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if _, err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.advance()
			return d, nil
		}
	}
	return nil, p.fail(t.off, "unexpected "+t.describe())
}

// noteName records reads of varargs, kwargs and caller in the macro body
// being parsed (jinja2 gives a macro these only when its body reads them).
func (p *parser) noteName(name string) {
	if len(p.frames) == 0 {
		return
	}
	fr := p.frames[len(p.frames)-1]
	if fr.params[name] {
		return
	}
	switch name {
	case "varargs":
		fr.def.varargs = true
	case "kwargs":
		fr.def.kwargs = true
	case "caller":
		fr.def.hasCaller = true
	}
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		t := p.cur()
		if t.kind != tOp {
			return e, nil
		}
		var err error
		switch t.val {
		case ".", "[":
			e, err = p.parseSubscript(e)
		case "(":
			e, err = p.parseCall(e)
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		t := p.cur()
		var err error
		switch {
		case t.kind == tOp && t.val == "|":
			e, err = p.parseFilter(e, false)
		case t.kind == tName && t.val == "is":
			e, err = p.parseTest(e)
		case t.kind == tOp && t.val == "(":
			e, err = p.parseCall(e)
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(obj expr) (expr, error) {
	t := p.advance()
	if t.val == "." {
		a := p.cur()
		switch a.kind {
		case tName:
			p.advance()
			return &getattrExpr{off: t.off, obj: obj, attr: a.val}, nil
		case tInt:
			p.advance()
			return &getitemExpr{off: t.off, obj: obj, key: &constExpr{off: a.off, v: Int(a.ival)}}, nil
		}
		return nil, p.fail(a.off, "expected name or number after '.'")
	}
	if err := p.enter(t.off); err != nil {
		return nil, err
	}
	defer p.leave()
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		a, err := p.parseSubscribed()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	p.advance()
	if len(args) == 1 {
		return &getitemExpr{off: t.off, obj: obj, key: args[0]}, nil
	}
	return &getitemExpr{off: t.off, obj: obj, key: &tupleExpr{off: t.off, items: args}}, nil
}

func (p *parser) parseSubscribed() (expr, error) {
	off := p.cur().off
	var args [3]expr
	if p.isOp(":") {
		p.advance()
	} else {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return e, nil
		}
		p.advance()
		args[0] = e
	}
	stopEnd := func() bool { return p.isOp("]") || p.isOp(",") }
	if !p.isOp(":") && !stopEnd() {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		args[1] = e
	}
	if p.skipOp(":") && !stopEnd() {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		args[2] = e
	}
	return &sliceExpr{off: off, start: args[0], stop: args[1], step: args[2]}, nil
}

func (p *parser) parseCallArgs() (callArgs, error) {
	var ca callArgs
	open, err := p.expectOp("(")
	if err != nil {
		return ca, err
	}
	if err := p.enter(open.off); err != nil {
		return ca, err
	}
	defer p.leave()
	bad := func() error { return p.fail(open.off, "invalid syntax for function call expression") }
	needComma := false
	for !p.isOp(")") {
		if needComma {
			if _, err := p.expectOp(","); err != nil {
				return ca, err
			}
			if p.isOp(")") {
				break
			}
		}
		switch {
		case p.isOp("*"):
			if ca.dynArgs != nil || ca.dynKwargs != nil {
				return ca, bad()
			}
			p.advance()
			if ca.dynArgs, err = p.parseExpression(true); err != nil {
				return ca, err
			}
		case p.isOp("**"):
			if ca.dynKwargs != nil {
				return ca, bad()
			}
			p.advance()
			if ca.dynKwargs, err = p.parseExpression(true); err != nil {
				return ca, err
			}
		case p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "=":
			if ca.dynKwargs != nil {
				return ca, bad()
			}
			key := p.advance().val
			p.advance()
			v, err := p.parseExpression(true)
			if err != nil {
				return ca, err
			}
			ca.kwargs = append(ca.kwargs, kwExpr{name: key, e: v})
		default:
			if ca.dynArgs != nil || ca.dynKwargs != nil || len(ca.kwargs) > 0 {
				return ca, bad()
			}
			v, err := p.parseExpression(true)
			if err != nil {
				return ca, err
			}
			ca.args = append(ca.args, v)
		}
		needComma = true
	}
	p.advance()
	return ca, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	off := p.cur().off
	ca, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{off: off, fn: fn, callArgs: ca}, nil
}

func (p *parser) parseFilter(arg expr, startInline bool) (expr, error) {
	for p.isOp("|") || startInline {
		if !startInline {
			p.advance()
		}
		startInline = false
		name, err := p.expectKind(tName, "filter name")
		if err != nil {
			return nil, err
		}
		n := name.val
		for p.isOp(".") {
			p.advance()
			part, err := p.expectKind(tName, "filter name")
			if err != nil {
				return nil, err
			}
			n += "." + part.val
		}
		f := &filterExpr{off: name.off, arg: arg, name: n}
		if p.isOp("(") {
			if f.callArgs, err = p.parseCallArgs(); err != nil {
				return nil, err
			}
		}
		arg = f
	}
	return arg, nil
}

func (p *parser) parseTest(arg expr) (expr, error) {
	off := p.advance().off
	negated := p.skipName("not")
	name, err := p.expectKind(tName, "test name")
	if err != nil {
		return nil, err
	}
	n := name.val
	for p.isOp(".") {
		p.advance()
		part, err := p.expectKind(tName, "test name")
		if err != nil {
			return nil, err
		}
		n += "." + part.val
	}
	t := &testExpr{off: off, arg: arg, name: n}
	c := p.cur()
	switch {
	case c.kind == tOp && c.val == "(":
		if t.callArgs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat ||
		c.kind == tOp && (c.val == "[" || c.val == "{")) &&
		!(c.kind == tName && (c.val == "else" || c.val == "or" || c.val == "and")):
		if c.kind == tName && c.val == "is" {
			return nil, p.fail(c.off, "you cannot chain multiple tests with is")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		t.args = []expr{a}
	}
	if negated {
		return &notExpr{off: off, e: t}, nil
	}
	return t, nil
}
