package pipeline

// Level is the importance of a [Reporter] note.
type Level int

// Note levels.
const (
	Info Level = iota
	Warn
)

// Reporter receives progress from a stage. Implementations render it for people (on stderr, only when it is a
// terminal, throttled otherwise); a stage never prints results through it. Methods may be called from several
// goroutines.
type Reporter interface {
	// Begin starts a step; total is in bytes or items, <0 when unknown.
	Begin(step string, total int64)
	// Add advances the current step by n.
	Add(n int64)
	// End finishes a step, with its error if it failed.
	End(step string, err error)
	// Note reports a warning or information for people.
	Note(level Level, msg string)
}

// Discard is a Reporter that drops everything.
var Discard Reporter = discard{}

type discard struct{}

func (discard) Begin(string, int64) {}
func (discard) Add(int64)           {}
func (discard) End(string, error)   {}
func (discard) Note(Level, string)  {}
