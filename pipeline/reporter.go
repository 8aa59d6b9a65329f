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

// ItemReporter is implemented by reporters that can show a step's rate in its own unit ("120 tokens/s")
// rather than in bytes.
type ItemReporter interface {
	// BeginItems starts a step whose total counts unit (plural, e.g. "tokens"); <0 when unknown.
	BeginItems(step string, total int64, unit string)
}

// BeginItems starts a step on r whose total counts items of unit rather than bytes: r's BeginItems when it has
// one, else its Begin.
func BeginItems(r Reporter, step string, total int64, unit string) {
	if ir, ok := r.(ItemReporter); ok {
		ir.BeginItems(step, total, unit)
		return
	}
	r.Begin(step, total)
}

// Discard is a Reporter that drops everything.
var Discard Reporter = discard{}

type discard struct{}

func (discard) Begin(string, int64) {}
func (discard) Add(int64)           {}
func (discard) End(string, error)   {}
func (discard) Note(Level, string)  {}
