package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/charmbracelet/lipgloss"
	"golang.org/x/term"
)

// Streams are the standard streams of the process and how to draw on them.
type Streams struct {
	In       io.Reader
	Out      io.Writer // results
	Err      io.Writer // people
	ErrTTY   bool      // stderr is a terminal: progress bars allowed
	Color    bool      // styles allowed on stderr
	JSON     bool      // results as JSON on stdout
	Quiet    bool      // no progress at all
	Verbose  bool
	mu       sync.Mutex
	renderer *lipgloss.Renderer
}

// System returns the process streams with terminal detection and NO_COLOR honoured.
func System() *Streams {
	tty := term.IsTerminal(int(os.Stderr.Fd()))
	s := &Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, ErrTTY: tty}
	s.Color = tty && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
	return s
}

// Test returns streams writing to the given buffers, with no terminal and no colour.
func Test(out, err io.Writer) *Streams {
	return &Streams{Out: out, Err: err}
}

func (s *Streams) style() *lipgloss.Renderer {
	if s.renderer == nil {
		s.renderer = lipgloss.NewRenderer(s.Err)
		if !s.Color {
			s.renderer.SetColorProfile(0) // Ascii: no colour codes
		}
	}
	return s.renderer
}

// Styled renders text in a named style when colour is on: "ok", "warn", "err", "dim", "accent", "bold".
func (s *Streams) Styled(name, text string) string {
	if !s.Color {
		return text
	}
	st := s.style().NewStyle()
	switch name {
	case "ok":
		st = st.Foreground(lipgloss.Color("2"))
	case "warn":
		st = st.Foreground(lipgloss.Color("3"))
	case "err":
		st = st.Foreground(lipgloss.Color("1")).Bold(true)
	case "dim":
		st = st.Faint(true)
	case "accent":
		st = st.Foreground(lipgloss.Color("6"))
	case "bold":
		st = st.Bold(true)
	}
	return st.Render(text)
}

// Printf writes a line for people on stderr (never results), unless quiet.
func (s *Streams) Printf(format string, args ...any) {
	if s.Quiet {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.Err, format, args...)
}

// Warnf writes a warning on stderr, even when quiet.
func (s *Streams) Warnf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(s.Err, s.Styled("warn", "warning: ")+fmt.Sprintf(format, args...))
}

// Result prints a command's result on stdout: as indented JSON with --json, else through text.
func (s *Streams) Result(v any, text func(w io.Writer)) error {
	if s.JSON {
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	text(s.Out)
	return nil
}
