package grammar

import (
	"fmt"
)

// SyntaxError reports a malformed GBNF grammar. Line and Col are 1-based;
// Col counts bytes.
type SyntaxError struct {
	Line, Col int
	Msg       string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("grammar: %d:%d: %s", e.Line, e.Col, e.Msg)
}

// InputError marks the error as the request's fault (pipeline's error contract).
func (e *SyntaxError) InputError() bool { return true }

// Error reports a grammar that parses but cannot be used: an undefined or
// missing rule, left recursion, a bound exceeded, a token reference the
// vocabulary lacks.
type Error struct {
	// Rule names the rule concerned, when there is one.
	Rule string
	Msg  string
}

func (e *Error) Error() string {
	if e.Rule != "" {
		return fmt.Sprintf("grammar: rule %q: %s", e.Rule, e.Msg)
	}
	return "grammar: " + e.Msg
}

// InputError marks the error as the request's fault.
func (e *Error) InputError() bool { return true }

// SchemaError reports a JSON schema that cannot be turned into a grammar:
// malformed, or using a keyword or value this converter does not support.
// Path is the JSON pointer of the offending keyword ("/properties/age/minimum").
type SchemaError struct {
	Path string
	Msg  string
}

func (e *SchemaError) Error() string {
	p := e.Path
	if p == "" {
		p = "/"
	}
	return fmt.Sprintf("json schema: %s: %s", p, e.Msg)
}

// InputError marks the error as the request's fault.
func (e *SchemaError) InputError() bool { return true }
