package jinja

// checkNames refuses unknown filters and tests the way jinja2's compiler
// does: at compile time, except inside an {% if %} (its tests, bodies and
// else) or an inline if-expression, where jinja2 defers the error to the
// moment the filter runs ("soft frames"). A for loop's body, a macro's, a call
// or filter block's and a block set's start a frame that is not soft again.
// The walk keeps its own stack: an expression chain may be long.
func checkNames(body []stmt, lines *lineIndex) error {
	type item struct {
		n    any // stmt, expr, []stmt, target or nil
		soft bool
	}
	stack := make([]item, 0, 64)
	for i := len(body) - 1; i >= 0; i-- {
		stack = append(stack, item{body[i], false})
	}
	push := func(soft bool, nodes ...any) {
		for i := len(nodes) - 1; i >= 0; i-- {
			if nodes[i] != nil {
				stack = append(stack, item{nodes[i], soft})
			}
		}
	}
	pushStmts := func(soft bool, ss []stmt) {
		for i := len(ss) - 1; i >= 0; i-- {
			stack = append(stack, item{ss[i], soft})
		}
	}
	pushArgs := func(soft bool, ca *callArgs) {
		for _, a := range ca.args {
			push(soft, a)
		}
		for _, k := range ca.kwargs {
			push(soft, k.e)
		}
		if ca.dynArgs != nil {
			push(soft, ca.dynArgs)
		}
		if ca.dynKwargs != nil {
			push(soft, ca.dynKwargs)
		}
	}
	fail := func(off int, what, name string) error {
		return &SyntaxError{Pos: lines.pos(off), Msg: "no " + what + " named '" + name + "'"}
	}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		soft := it.soft
		switch n := it.n.(type) {
		case *textStmt, *breakStmt, *continueStmt, *constExpr, *nameExpr:
		case *printStmt:
			push(soft, n.e)
		case *ifStmt:
			for i := range n.tests {
				push(true, n.tests[i])
				pushStmts(true, n.then[i])
			}
			pushStmts(true, n.els)
		case *forStmt:
			push(soft, n.iter)
			if n.cond != nil {
				push(false, n.cond)
			}
			pushStmts(false, n.body)
			pushStmts(false, n.els)
		case *setStmt:
			push(soft, n.value)
		case *setBlockStmt:
			if n.filter != nil {
				push(false, n.filter)
			}
			pushStmts(false, n.body)
		case *macroStmt:
			for _, d := range n.def.defaults {
				push(false, d)
			}
			pushStmts(false, n.def.body)
		case *callBlockStmt:
			push(soft, n.call)
			for _, d := range n.def.defaults {
				push(false, d)
			}
			pushStmts(false, n.def.body)
		case *filterBlockStmt:
			push(false, n.filter)
			pushStmts(false, n.body)
		case *withStmt:
			for _, v := range n.values {
				push(soft, v)
			}
			pushStmts(false, n.body)
		case *tupleExpr:
			for _, e := range n.items {
				push(soft, e)
			}
		case *listExpr:
			for _, e := range n.items {
				push(soft, e)
			}
		case *dictExpr:
			for i := range n.keys {
				push(soft, n.keys[i], n.vals[i])
			}
		case *getattrExpr:
			push(soft, n.obj)
		case *getitemExpr:
			push(soft, n.obj, n.key)
		case *sliceExpr:
			for _, e := range []expr{n.start, n.stop, n.step} {
				if e != nil {
					push(soft, e)
				}
			}
		case *callExpr:
			push(soft, n.fn)
			pushArgs(soft, &n.callArgs)
		case *filterExpr:
			if _, ok := filters[n.name]; !ok && !soft {
				return fail(n.off, "filter", n.name)
			}
			if n.arg != nil {
				push(soft, n.arg)
			}
			pushArgs(soft, &n.callArgs)
		case *testExpr:
			if _, ok := tests[n.name]; !ok && !soft {
				return fail(n.off, "test", n.name)
			}
			push(soft, n.arg)
			pushArgs(soft, &n.callArgs)
		case *binExpr:
			push(soft, n.l, n.r)
		case *concatExpr:
			for _, e := range n.items {
				push(soft, e)
			}
		case *compareExpr:
			push(soft, n.first)
			for _, op := range n.ops {
				push(soft, op.e)
			}
		case *andExpr:
			push(soft, n.l, n.r)
		case *orExpr:
			push(soft, n.l, n.r)
		case *notExpr:
			push(soft, n.e)
		case *negExpr:
			push(soft, n.e)
		case *condExpr:
			push(true, n.test, n.then)
			if n.els_ != nil {
				push(true, n.els_)
			}
		}
	}
	return nil
}
