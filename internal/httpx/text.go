package httpx

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// CapText makes text that came from a remote party (an error header, an error body) safe to print on one line:
// invalid UTF-8 becomes U+FFFD, control and format characters (newlines, ANSI escapes, bidirectional
// overrides) become spaces, runs of spaces collapse, and the result is cut at a character boundary to at most
// max bytes, followed by "…" when it was cut. A 900 KB X-Error-Message must not reach a terminal whole.
func CapText(s string, max int) string {
	if max <= 0 {
		return ""
	}
	// Never scan more than needed: a few bytes per kept byte is plenty even when most are dropped.
	cut := false
	if limit := 4*max + 16; len(s) > limit {
		for limit > 0 && !utf8.RuneStart(s[limit]) {
			limit--
		}
		s, cut = s[:limit], true
	}
	var b strings.Builder
	b.Grow(min(len(s), max) + len("…"))
	space := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			space = b.Len() > 0
			continue
		}
		add := utf8.RuneLen(r)
		if space {
			add++
		}
		if b.Len()+add > max {
			cut = true
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r) // an invalid byte decoded as utf8.RuneError is written as U+FFFD
	}
	if cut {
		b.WriteString("…")
	}
	return b.String()
}
