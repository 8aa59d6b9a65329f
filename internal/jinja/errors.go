package jinja

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Pos is a position in a template's source: 1-based line and column (the
// column counts characters, not bytes).
type Pos struct {
	Line, Col int
}

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Line, p.Col) }

// SyntaxError reports a template that does not parse.
type SyntaxError struct {
	Pos Pos
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("jinja: syntax error at line %s: %s", e.Pos, e.Msg)
}

// Error reports a failure while rendering: a type error, an undefined value
// used where a value is needed, an unknown filter, a call with wrong
// arguments. Pos is where in the template it happened.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string {
	return fmt.Sprintf("jinja: line %s: %s", e.Pos, e.Msg)
}

// RaiseError is the error of the template's own raise_exception(message):
// the template refuses its input (e.g. "Conversation roles must alternate").
type RaiseError struct {
	Pos     Pos
	Message string
}

func (e *RaiseError) Error() string {
	return fmt.Sprintf("jinja: line %s: template raised: %s", e.Pos, e.Message)
}

// LimitError reports a render stopped because it exceeded one of its Limits.
// Limit names the limit ("steps", "loop iterations", "call depth", "nesting
// depth", "output bytes", "allocated bytes", "range size"), Max its value.
type LimitError struct {
	Limit string
	Max   int64
	Pos   Pos
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("jinja: line %s: template exceeded the limit on %s (%d)", e.Pos, e.Limit, e.Max)
}

// Limit names used in LimitError.
const (
	LimitSteps      = "steps"
	LimitIterations = "loop iterations"
	LimitCallDepth  = "call depth"
	LimitNesting    = "nesting depth"
	LimitOutput     = "output bytes"
	LimitAlloc      = "allocated bytes"
	LimitRange      = "range size"
)

// lineIndex maps byte offsets of a source to line:column positions.
type lineIndex struct {
	src    string
	starts []int // byte offset of each line's first byte
}

func newLineIndex(src string) *lineIndex {
	li := &lineIndex{src: src, starts: []int{0}}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			li.starts = append(li.starts, i+1)
		}
	}
	return li
}

func (li *lineIndex) pos(off int) Pos {
	if off < 0 {
		off = 0
	}
	if off > len(li.src) {
		off = len(li.src)
	}
	lo, hi := 0, len(li.starts)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if li.starts[mid] <= off {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return Pos{Line: lo + 1, Col: utf8.RuneCountInString(li.src[li.starts[lo]:off]) + 1}
}

// quoteForError shortens s for an error message.
func quoteForError(s string) string {
	const max = 40
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		s = string(r[:max]) + "…"
	}
	return "'" + strings.ReplaceAll(s, "'", "\\'") + "'"
}
