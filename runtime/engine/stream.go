package engine

import (
	"strings"
	"unicode/utf8"
)

// TextStream turns token pieces into visible text: it holds back an
// incomplete UTF-8 sequence at the end and any suffix that may be the start
// of a stop sequence, and cuts the text at the first complete stop sequence.
// Engines use one per request.
type TextStream struct {
	stops   []string
	pending string
	out     strings.Builder
	stopped bool
}

// NewTextStream returns a stream that ends at any of stops (empty strings are
// ignored).
func NewTextStream(stops []string) *TextStream {
	s := &TextStream{}
	for _, st := range stops {
		if st != "" {
			s.stops = append(s.stops, st)
		}
	}
	return s
}

// Push appends a piece and returns the text that became visible. stopped
// reports that a stop sequence completed; the text before it has been
// returned and later pushes return nothing.
func (s *TextStream) Push(piece string) (visible string, stopped bool) {
	if s.stopped {
		return "", true
	}
	s.pending += piece
	// A stop sequence may span pieces; search the whole pending text.
	cut := -1
	for _, st := range s.stops {
		if i := strings.Index(s.pending, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		visible = s.pending[:cut]
		s.pending = ""
		s.stopped = true
		s.out.WriteString(visible)
		return visible, true
	}
	keep := s.holdBack()
	visible = s.pending[:len(s.pending)-keep]
	s.pending = s.pending[len(s.pending)-keep:]
	s.out.WriteString(visible)
	return visible, false
}

// Flush returns the held-back text at the end of generation (an incomplete
// UTF-8 tail is returned as is; the API layer's JSON encoding replaces it).
func (s *TextStream) Flush() string {
	if s.stopped {
		return ""
	}
	v := s.pending
	s.pending = ""
	s.out.WriteString(v)
	return v
}

// Text is everything returned so far.
func (s *TextStream) Text() string { return s.out.String() }

// holdBack is the number of trailing bytes of pending that must wait.
func (s *TextStream) holdBack() int {
	keep := incompleteUTF8(s.pending)
	for _, st := range s.stops {
		// The longest suffix of pending that is a proper prefix of st.
		for n := min(len(st)-1, len(s.pending)); n > keep; n-- {
			if strings.HasSuffix(s.pending, st[:n]) {
				keep = n
				break
			}
		}
	}
	return keep
}

// incompleteUTF8 returns the length of a truncated multi-byte sequence at the
// end of s (0 when s ends on a complete rune or on invalid bytes that no
// continuation could complete).
func incompleteUTF8(s string) int {
	for n := 1; n <= 3 && n <= len(s); n++ {
		b := s[len(s)-n]
		if b&0xC0 == 0x80 { // continuation byte: look further back
			continue
		}
		if !utf8.RuneStart(b) || b < 0x80 {
			return 0
		}
		need := 0
		switch {
		case b&0xE0 == 0xC0:
			need = 2
		case b&0xF0 == 0xE0:
			need = 3
		case b&0xF8 == 0xF0:
			need = 4
		default:
			return 0
		}
		if n < need {
			return n
		}
		return 0
	}
	return 0
}
