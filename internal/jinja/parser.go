package jinja

import (
	"strconv"
	"strings"
)

// The parser follows jinja2's grammar (parser.py, 3.1): the same statements
// (if, for with else/if-filter/recursive, set, block set, macro, call, filter,
// with, break, continue, raw, and transformers' generation tag) and the same
// expression precedence, lowest first: conditional (a if b else c), or, and,
// not, comparisons and in/not in (chained), + and -, ~, * / // %, **, unary
// - and +, then postfix .attr [item] (call), filters |f and tests `is t`.

// maxParseDepth bounds the nesting the recursive-descent parser follows
// (parentheses, nested blocks, chains of not and unary minus).
const maxParseDepth = 256

type parser struct {
	toks   []token
	pos    int
	lines  *lineIndex
	depth  int
	tags   []string   // open block tags, innermost last (for error messages)
	frames []*pframe  // macro and call-block bodies being parsed
	loops  int        // for-loop bodies open around the current statement (within the current macro)
	ends   [][]string // the end tags the open blocks wait for, innermost last
}

// pframe records which special names a macro body reads.
type pframe struct {
	def    *macroDef
	params map[string]bool
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) peek() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }
func (p *parser) advance() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) fail(off int, msg string) error {
	return &SyntaxError{Pos: p.lines.pos(off), Msg: msg}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.advance()
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.advance()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) (token, error) {
	if !p.isOp(op) {
		return token{}, p.fail(p.cur().off, "expected token '"+op+"', got "+p.cur().describe())
	}
	return p.advance(), nil
}

func (p *parser) expectKind(k tokKind, what string) (token, error) {
	if p.cur().kind != k {
		return token{}, p.fail(p.cur().off, "expected "+what+", got "+p.cur().describe())
	}
	return p.advance(), nil
}

func (p *parser) expectName(name string) error {
	if !p.isName(name) {
		return p.fail(p.cur().off, "expected '"+name+"', got "+p.cur().describe())
	}
	p.advance()
	return nil
}

func (p *parser) enter(off int) error {
	p.depth++
	if p.depth > maxParseDepth {
		return p.fail(off, "template nests deeper than "+strconv.Itoa(maxParseDepth)+" levels")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parse parses a whole template.
func parse(toks []token, lines *lineIndex) ([]stmt, error) {
	p := &parser{toks: toks, lines: lines}
	body, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if p.cur().kind != tEOF {
		return nil, p.fail(p.cur().off, "unexpected "+p.cur().describe())
	}
	return body, nil
}

// subparse parses statements until a block tag named in end (left current:
// the tag name) or the end of the template.
func (p *parser) subparse(end []string) ([]stmt, error) {
	if err := p.enter(p.cur().off); err != nil {
		return nil, err
	}
	defer p.leave()
	if end != nil {
		p.ends = append(p.ends, end)
		defer func() { p.ends = p.ends[:len(p.ends)-1] }()
	}
	var body []stmt
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if end != nil {
				return nil, p.eofError(t.off, end)
			}
			return body, nil
		case tData:
			p.advance()
			body = append(body, &textStmt{off: t.off, s: t.val})
		case tVarBegin:
			p.advance()
			e, err := p.parseTuple(false, true, nil, false)
			if err != nil {
				return nil, err
			}
			if _, err := p.expectKind(tVarEnd, "end of print statement"); err != nil {
				return nil, err
			}
			body = append(body, &printStmt{off: t.off, e: e})
		case tBlockBegin:
			p.advance()
			name := p.cur()
			if name.kind != tName {
				return nil, p.fail(name.off, "tag name expected")
			}
			for _, e := range end {
				if name.val == e {
					return body, nil
				}
			}
			s, err := p.statement()
			if err != nil {
				return nil, err
			}
			if s != nil {
				body = append(body, s...)
			}
			if _, err := p.expectKind(tBlockEnd, "end of statement block"); err != nil {
				return nil, err
			}
		default:
			return nil, p.fail(t.off, "unexpected "+t.describe())
		}
	}
}

func (p *parser) eofError(off int, end []string) error {
	var names []string
	for _, e := range end {
		names = append(names, "'"+e+"'")
	}
	msg := "unexpected end of template; looking for " + strings.Join(names, " or ")
	if len(p.tags) > 0 {
		msg += "; the innermost open block is '" + p.tags[len(p.tags)-1] + "'"
	}
	return p.fail(off, msg)
}

// statements parses the body of a block up to one of end, consuming the
// end tag's name; the block end after it is left for the caller.
func (p *parser) statements(end []string) ([]stmt, error) {
	p.skipOp(":")
	if _, err := p.expectKind(tBlockEnd, "end of statement block"); err != nil {
		return nil, err
	}
	return p.subparse(end)
}

// isolatedStatements parses a body that break and continue cannot leave
// (block set, filter block: jinja2 compiles them as functions).
func (p *parser) isolatedStatements(end string) ([]stmt, error) {
	loops := p.loops
	p.loops = 0
	body, err := p.statements([]string{end})
	p.loops = loops
	return body, err
}

func (p *parser) statement() ([]stmt, error) {
	t := p.cur()
	p.tags = append(p.tags, t.val)
	defer func() { p.tags = p.tags[:len(p.tags)-1] }()
	var s stmt
	var err error
	switch t.val {
	case "if":
		s, err = p.parseIf()
	case "for":
		s, err = p.parseFor()
	case "set":
		s, err = p.parseSet()
	case "macro":
		s, err = p.parseMacro()
	case "call":
		s, err = p.parseCallBlock()
	case "filter":
		s, err = p.parseFilterBlock()
	case "with":
		s, err = p.parseWith()
	case "break", "continue":
		if p.loops == 0 {
			return nil, p.fail(t.off, "'"+t.val+"' outside of a loop")
		}
		p.advance()
		if t.val == "break" {
			s = &breakStmt{off: t.off}
		} else {
			s = &continueStmt{off: t.off}
		}
	case "generation":
		// transformers' AssistantTracker tag: renders its body as is.
		p.advance()
		body, err := p.statements([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		p.advance()
		return body, nil
	case "print":
		p.advance()
		var items []expr
		for p.cur().kind != tBlockEnd {
			if len(items) > 0 {
				if _, err := p.expectOp(","); err != nil {
					return nil, err
				}
			}
			e, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			items = append(items, e)
		}
		out := make([]stmt, len(items))
		for i, e := range items {
			out[i] = &printStmt{off: t.off, e: e}
		}
		return out, nil
	case "extends", "include", "import", "from", "block", "autoescape", "do":
		return nil, p.fail(t.off, "tag '"+t.val+"' is not supported in chat templates")
	default:
		msg := "encountered unknown tag '" + t.val + "'"
		if len(p.ends) > 0 {
			var names []string
			for _, e := range p.ends[len(p.ends)-1] {
				names = append(names, "'"+e+"'")
			}
			msg += "; looking for " + strings.Join(names, " or ")
			if len(p.tags) > 1 {
				msg += "; the innermost open block is '" + p.tags[len(p.tags)-2] + "'"
			}
		}
		return nil, p.fail(t.off, msg)
	}
	if err != nil {
		return nil, err
	}
	return []stmt{s}, nil
}

func (p *parser) parseIf() (stmt, error) {
	off := p.advance().off
	s := &ifStmt{off: off}
	for {
		test, err := p.parseTuple(false, false, nil, false)
		if err != nil {
			return nil, err
		}
		body, err := p.statements([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		s.tests = append(s.tests, test)
		s.then = append(s.then, body)
		tag := p.advance()
		switch tag.val {
		case "elif":
			continue
		case "else":
			els, err := p.statements([]string{"endif"})
			if err != nil {
				return nil, err
			}
			p.advance()
			s.els = els
		}
		return s, nil
	}
}

func (p *parser) parseFor() (stmt, error) {
	off := p.advance().off
	tgt, err := p.parseAssignTarget(true, false, []string{"in"}, false)
	if err != nil {
		return nil, err
	}
	if err := p.expectName("in"); err != nil {
		return nil, err
	}
	iter, err := p.parseTuple(false, false, []string{"recursive"}, false)
	if err != nil {
		return nil, err
	}
	s := &forStmt{off: off, target: tgt, iter: iter}
	if p.skipName("if") {
		if s.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	s.recursive = p.skipName("recursive")
	p.loops++
	s.body, err = p.statements([]string{"endfor", "else"})
	p.loops--
	if err != nil {
		return nil, err
	}
	if p.advance().val == "else" {
		if s.els, err = p.statements([]string{"endfor"}); err != nil {
			return nil, err
		}
		p.advance()
	}
	return s, nil
}

func (p *parser) parseSet() (stmt, error) {
	off := p.advance().off
	tgt, err := p.parseAssignTarget(true, false, nil, true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		v, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return nil, err
		}
		return &setStmt{off: off, target: tgt, value: v}, nil
	}
	var f *filterExpr
	if p.isOp("|") {
		e, err := p.parseFilter(nil, false)
		if err != nil {
			return nil, err
		}
		f = e.(*filterExpr)
	}
	body, err := p.isolatedStatements("endset")
	if err != nil {
		return nil, err
	}
	p.advance()
	return &setBlockStmt{off: off, target: tgt, filter: f, body: body}, nil
}

// parseSignature parses `(a, b=default, ...)`.
func (p *parser) parseSignature(def *macroDef) error {
	if _, err := p.expectOp("("); err != nil {
		return err
	}
	for !p.isOp(")") {
		if len(def.params) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return err
			}
		}
		t, err := p.expectKind(tName, "parameter name")
		if err != nil {
			return err
		}
		if p.skipOp("=") {
			d, err := p.parseExpression(true)
			if err != nil {
				return err
			}
			def.defaults = append(def.defaults, d)
		} else if len(def.defaults) > 0 {
			return p.fail(t.off, "non-default argument follows default argument")
		}
		for _, q := range def.params {
			if q == t.val {
				return p.fail(t.off, "duplicate parameter '"+t.val+"'")
			}
		}
		def.params = append(def.params, t.val)
	}
	p.advance()
	return nil
}

// macroBody parses a macro's or call block's body in its own frame.
func (p *parser) macroBody(def *macroDef, end string) error {
	fr := &pframe{def: def, params: map[string]bool{}}
	for _, q := range def.params {
		fr.params[q] = true
	}
	p.frames = append(p.frames, fr)
	loops := p.loops
	p.loops = 0
	body, err := p.statements([]string{end})
	p.loops = loops
	p.frames = p.frames[:len(p.frames)-1]
	if err != nil {
		return err
	}
	p.advance()
	def.body = body
	return nil
}

func (p *parser) parseMacro() (stmt, error) {
	off := p.advance().off
	name, err := p.expectKind(tName, "macro name")
	if err != nil {
		return nil, err
	}
	def := &macroDef{name: name.val}
	if err := p.parseSignature(def); err != nil {
		return nil, err
	}
	if err := p.macroBody(def, "endmacro"); err != nil {
		return nil, err
	}
	return &macroStmt{off: off, def: def, name: name.val}, nil
}

func (p *parser) parseCallBlock() (stmt, error) {
	off := p.advance().off
	def := &macroDef{name: "caller"}
	if p.isOp("(") {
		if err := p.parseSignature(def); err != nil {
			return nil, err
		}
	}
	e, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := e.(*callExpr)
	if !ok {
		return nil, p.fail(off, "expected call")
	}
	if err := p.macroBody(def, "endcall"); err != nil {
		return nil, err
	}
	return &callBlockStmt{off: off, def: def, call: call}, nil
}

func (p *parser) parseFilterBlock() (stmt, error) {
	off := p.advance().off
	e, err := p.parseFilter(nil, true)
	if err != nil {
		return nil, err
	}
	body, err := p.isolatedStatements("endfilter")
	if err != nil {
		return nil, err
	}
	p.advance()
	return &filterBlockStmt{off: off, filter: e.(*filterExpr), body: body}, nil
}

func (p *parser) parseWith() (stmt, error) {
	off := p.advance().off
	s := &withStmt{off: off}
	for p.cur().kind != tBlockEnd {
		if len(s.targets) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseAssignTarget(true, false, nil, false)
		if err != nil {
			return nil, err
		}
		if _, err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		s.targets = append(s.targets, t)
		s.values = append(s.values, v)
	}
	body, err := p.statements([]string{"endwith"})
	if err != nil {
		return nil, err
	}
	p.advance()
	s.body = body
	return s, nil
}

// parseAssignTarget parses a name, a tuple of names, or ns.attr.
func (p *parser) parseAssignTarget(withTuple, nameOnly bool, extraEnd []string, withNamespace bool) (target, error) {
	if err := p.enter(p.cur().off); err != nil {
		return nil, err
	}
	defer p.leave()
	one := func() (target, error) {
		t := p.cur()
		if t.kind == tOp && t.val == "(" {
			p.advance()
			tg, err := p.parseAssignTarget(true, false, nil, false)
			if err != nil {
				return nil, err
			}
			_, err = p.expectOp(")")
			return tg, err
		}
		if t.kind != tName {
			return nil, p.fail(t.off, "can't assign to "+t.describe())
		}
		switch t.val {
		case "true", "false", "True", "False", "none", "None":
			return nil, p.fail(t.off, "can't assign to constant '"+t.val+"'")
		}
		p.advance()
		if withNamespace && p.isOp(".") {
			p.advance()
			attr, err := p.expectKind(tName, "attribute name")
			if err != nil {
				return nil, err
			}
			return &nsTarget{off: t.off, name: t.val, attr: attr.val}, nil
		}
		return &nameTarget{off: t.off, name: t.val}, nil
	}
	if nameOnly || !withTuple {
		return one()
	}
	off := p.cur().off
	var items []target
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
		t, err := one()
		if err != nil {
			return nil, err
		}
		items = append(items, t)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) == 0 {
			return nil, p.fail(off, "expected an assignment target, got "+p.cur().describe())
		}
		return items[0], nil
	}
	for _, t := range items {
		if _, ok := t.(*nsTarget); ok {
			return nil, p.fail(t.targetOff(), "can't assign to a namespace attribute in a tuple")
		}
	}
	return &tupleTarget{off: off, items: items}, nil
}

func (p *parser) isTupleEnd(extra []string) bool {
	t := p.cur()
	switch t.kind {
	case tVarEnd, tBlockEnd, tEOF:
		return true
	case tOp:
		return t.val == ")" || t.val == "]" || t.val == "}"
	case tName:
		for _, e := range extra {
			if t.val == e {
				return true
			}
		}
	}
	return false
}
