package grammar

import (
	"fmt"
	"slices"
	"strings"
)

// Namespace returns src with prefix put before every rule name, in the
// rules' definitions and in every reference to them, so that several
// grammars (say, the JSON schemas of several tools' parameters) can be
// combined into one source without their rule names clashing: the root rule
// of src becomes prefix+"root", and the combined grammar defines its own
// root. Everything else (literals, classes, token references, comments) is
// kept byte for byte. src must parse (its syntax error is returned); prefix
// must consist of rule-name characters.
func Namespace(src, prefix string) (string, error) {
	for i := 0; i < len(prefix); i++ {
		if !isWordChar(prefix[i]) {
			return "", &Error{Msg: fmt.Sprintf("namespace %q: only letters, digits, '-' and '_' may prefix a rule name", prefix)}
		}
	}
	tree, err := parseGBNF(src, Limits{})
	if err != nil {
		return "", err
	}
	// Line starts, to turn the parser's 1-based line and byte column into offsets.
	starts := []int{0}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			starts = append(starts, i+1)
		}
	}
	offset := func(line, col int) int { return starts[line-1] + col - 1 }
	var at []int
	var walk func(e *expr)
	walk = func(e *expr) {
		if e.kind == xRef {
			at = append(at, offset(e.line, e.col))
		}
		for _, x := range e.items {
			walk(x)
		}
	}
	for _, r := range tree.rules {
		at = append(at, offset(r.line, r.col))
		walk(r.body)
	}
	slices.Sort(at)
	var sb strings.Builder
	sb.Grow(len(src) + len(at)*len(prefix))
	prev := 0
	for _, i := range at {
		sb.WriteString(src[prev:i])
		sb.WriteString(prefix)
		prev = i
	}
	sb.WriteString(src[prev:])
	return sb.String(), nil
}
