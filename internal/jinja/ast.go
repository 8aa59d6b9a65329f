package jinja

// Statements.

type stmt interface{ stmtOff() int }

type (
	textStmt struct {
		off int
		s   string
	}
	printStmt struct {
		off int
		e   expr
	}
	ifStmt struct {
		off   int
		tests []expr
		then  [][]stmt
		els   []stmt
	}
	forStmt struct {
		off       int
		target    target
		iter      expr
		cond      expr // the `if` filter of the loop, or nil
		recursive bool
		body      []stmt
		els       []stmt
		usesLoop  bool // the body reads `loop` (needs length and look-ahead)
	}
	setStmt struct {
		off    int
		target target
		value  expr
	}
	setBlockStmt struct {
		off    int
		target target
		filter *filterExpr // chain applied to the body, with a nil innermost arg
		body   []stmt
	}
	macroStmt struct {
		off  int
		def  *macroDef
		name string
	}
	callBlockStmt struct {
		off  int
		def  *macroDef // the caller's signature and body
		call *callExpr
	}
	filterBlockStmt struct {
		off    int
		filter *filterExpr
		body   []stmt
	}
	withStmt struct {
		off     int
		targets []target
		values  []expr
		body    []stmt
	}
	breakStmt    struct{ off int }
	continueStmt struct{ off int }
)

func (s *textStmt) stmtOff() int        { return s.off }
func (s *printStmt) stmtOff() int       { return s.off }
func (s *ifStmt) stmtOff() int          { return s.off }
func (s *forStmt) stmtOff() int         { return s.off }
func (s *setStmt) stmtOff() int         { return s.off }
func (s *setBlockStmt) stmtOff() int    { return s.off }
func (s *macroStmt) stmtOff() int       { return s.off }
func (s *callBlockStmt) stmtOff() int   { return s.off }
func (s *filterBlockStmt) stmtOff() int { return s.off }
func (s *withStmt) stmtOff() int        { return s.off }
func (s *breakStmt) stmtOff() int       { return s.off }
func (s *continueStmt) stmtOff() int    { return s.off }

// macroDef is a macro's (or a call block's caller's) signature and body.
type macroDef struct {
	name      string
	params    []string
	defaults  []expr // defaults for the last len(defaults) params
	body      []stmt
	varargs   bool // the body reads varargs
	kwargs    bool // the body reads kwargs
	hasCaller bool // the body reads caller
}

// Assignment targets.

type target interface{ targetOff() int }

type (
	nameTarget struct {
		off  int
		name string
	}
	tupleTarget struct {
		off   int
		items []target
	}
	nsTarget struct {
		off  int
		name string
		attr string
	}
)

func (t *nameTarget) targetOff() int  { return t.off }
func (t *tupleTarget) targetOff() int { return t.off }
func (t *nsTarget) targetOff() int    { return t.off }

// Expressions.

type expr interface{ exprOff() int }

type kwExpr struct {
	name string
	e    expr
}

type callArgs struct {
	args      []expr
	kwargs    []kwExpr
	dynArgs   expr // *args
	dynKwargs expr // **kwargs
}

type (
	constExpr struct {
		off int
		v   Value
	}
	nameExpr struct {
		off  int
		name string
	}
	tupleExpr struct {
		off   int
		items []expr
	}
	listExpr struct {
		off   int
		items []expr
	}
	dictExpr struct {
		off  int
		keys []expr
		vals []expr
	}
	getattrExpr struct {
		off  int
		obj  expr
		attr string
	}
	getitemExpr struct {
		off int
		obj expr
		key expr
	}
	sliceExpr struct {
		off               int
		start, stop, step expr // nil when omitted
	}
	callExpr struct {
		off int
		fn  expr
		callArgs
	}
	filterExpr struct {
		off  int
		arg  expr // nil for the innermost filter of a filter block or block set
		name string
		callArgs
	}
	testExpr struct {
		off  int
		arg  expr
		name string
		callArgs
	}
	binExpr struct {
		off  int
		op   string // + - * / // % **
		l, r expr
	}
	concatExpr struct {
		off   int
		items []expr
	}
	cmpOp struct {
		op string // == != < <= > >= in notin
		e  expr
	}
	compareExpr struct {
		off   int
		first expr
		ops   []cmpOp
	}
	andExpr struct {
		off  int
		l, r expr
	}
	orExpr struct {
		off  int
		l, r expr
	}
	notExpr struct {
		off int
		e   expr
	}
	negExpr struct {
		off int
		e   expr
		neg bool // false for unary +
	}
	condExpr struct {
		off              int
		test, then, els_ expr // els_ nil: Undefined when the test fails
	}
)

func (e *constExpr) exprOff() int   { return e.off }
func (e *nameExpr) exprOff() int    { return e.off }
func (e *tupleExpr) exprOff() int   { return e.off }
func (e *listExpr) exprOff() int    { return e.off }
func (e *dictExpr) exprOff() int    { return e.off }
func (e *getattrExpr) exprOff() int { return e.off }
func (e *getitemExpr) exprOff() int { return e.off }
func (e *sliceExpr) exprOff() int   { return e.off }
func (e *callExpr) exprOff() int    { return e.off }
func (e *filterExpr) exprOff() int  { return e.off }
func (e *testExpr) exprOff() int    { return e.off }
func (e *binExpr) exprOff() int     { return e.off }
func (e *concatExpr) exprOff() int  { return e.off }
func (e *compareExpr) exprOff() int { return e.off }
func (e *andExpr) exprOff() int     { return e.off }
func (e *orExpr) exprOff() int      { return e.off }
func (e *notExpr) exprOff() int     { return e.off }
func (e *negExpr) exprOff() int     { return e.off }
func (e *condExpr) exprOff() int    { return e.off }
