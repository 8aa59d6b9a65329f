package tokenizer

import (
	"fmt"
	"strings"
)

// Error reports a vocabulary the tokenizer refuses: malformed (a hostile or corrupt file) or valid but
// unsupported. It names the source file and the GGUF key at fault. It is an input error (exit 3).
type Error struct {
	File        string // source file, when known
	Key         string // metadata key at fault, e.g. "tokenizer.ggml.merges"
	Msg         string
	Unsupported bool // a well-formed vocabulary of a kind this package does not implement
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("tokenizer: ")
	if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	if e.Unsupported {
		b.WriteString("unsupported ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// InputError classifies Error as a problem with the input file (pipeline.IsInputError).
func (e *Error) InputError() bool { return true }

// Limit names a bound of Options.
type Limit string

const (
	LimitInputBytes Limit = "input bytes"
	LimitTokens     Limit = "tokens"
)

// LimitError reports text that exceeds a bound set in Options. Tokenization stopped there, so for
// LimitTokens, Count is a lower bound of the tokens the whole text makes. It is an input error: the
// caller's request was too large (an HTTP API maps it to 400).
type LimitError struct {
	Limit Limit
	Max   int // the bound
	Count int // the input length (LimitInputBytes), or at least this many tokens (LimitTokens)
}

func (e *LimitError) Error() string {
	if e.Limit == LimitTokens {
		return fmt.Sprintf("tokenizer: text makes more than %d tokens (stopped at %d)", e.Max, e.Count)
	}
	return fmt.Sprintf("tokenizer: text of %d bytes is more than the %d %s allowed", e.Count, e.Max, e.Limit)
}

// InputError classifies LimitError as a problem with the caller's input.
func (e *LimitError) InputError() bool { return true }
