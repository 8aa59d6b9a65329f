package grammar

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxChoices bounds the number of answers of a choices constraint.
const MaxChoices = 4096

// Choices returns a constraint whose only complete outputs are the given
// strings (e.g. "RISK_LEVEL: 1" … "RISK_LEVEL: 5"): the model may produce any
// tokenization of one of them, and generation ends as soon as one is
// complete and no longer choice continues it. Duplicates are ignored; an
// empty string is a valid choice (the empty answer).
func Choices(choices []string) (*Grammar, error) {
	if len(choices) == 0 {
		return nil, &Error{Msg: "choices: no choice given"}
	}
	if len(choices) > MaxChoices {
		return nil, &Error{Msg: fmt.Sprintf("choices: %d choices, at most %d allowed", len(choices), MaxChoices)}
	}
	var sb strings.Builder
	sb.WriteString("root ::= ")
	seen := map[string]bool{}
	for i, c := range choices {
		if seen[c] {
			continue
		}
		seen[c] = true
		if strings.IndexByte(c, 0) >= 0 || !utf8.ValidString(c) {
			return nil, &Error{Msg: fmt.Sprintf("choices: choice %d is not valid UTF-8 text without NUL", i)}
		}
		if len(seen) > 1 {
			sb.WriteString(" | ")
		}
		sb.WriteString(Literal(c))
	}
	sb.WriteByte('\n')
	g, err := Parse(sb.String())
	if err != nil {
		return nil, fmt.Errorf("choices: %w", err)
	}
	return g, nil
}

// Literal returns s as a GBNF string literal.
func Literal(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		default:
			if r < 0x20 || r == 0x7F {
				fmt.Fprintf(&sb, `\x%02X`, r)
			} else {
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
	return sb.String()
}
