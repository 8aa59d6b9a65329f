package ui

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/phonellm/phonellm/pipeline"
)

// Reporter renders pipeline progress on stderr: a redrawn bar with rate and ETA on a terminal, plain lines at
// most every few seconds otherwise, nothing when quiet. Notes (warnings) are always shown.
type Reporter struct {
	s        *Streams
	mu       sync.Mutex
	step     string
	total    int64
	unit     string // what total counts; "" for bytes
	done     int64
	start    time.Time
	last     time.Time
	interval time.Duration
}

// NewReporter returns a Reporter on s.
func NewReporter(s *Streams) *Reporter {
	iv := 5 * time.Second
	if s.ErrTTY {
		iv = 100 * time.Millisecond
	}
	return &Reporter{s: s, interval: iv}
}

var _ pipeline.Reporter = (*Reporter)(nil)

// Begin starts a step whose total is in bytes.
func (r *Reporter) Begin(step string, total int64) { r.BeginItems(step, total, "") }

// BeginItems starts a step whose total counts unit ("tokens"); "" is bytes.
func (r *Reporter) BeginItems(step string, total int64, unit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.step, r.total, r.unit, r.done = step, total, unit, 0
	r.start = time.Now()
	r.last = time.Time{}
	if !r.s.ErrTTY {
		r.s.Printf("%s …\n", step)
	}
}

// Add advances the step.
func (r *Reporter) Add(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done += n
	now := time.Now()
	if now.Sub(r.last) < r.interval {
		return
	}
	r.last = now
	r.draw(now, false)
}

func (r *Reporter) draw(now time.Time, final bool) {
	if r.s.Quiet {
		return
	}
	el := now.Sub(r.start).Seconds()
	rate := ""
	if el > 0.2 && r.done > 0 {
		rate = " " + humanRate(float64(r.done)/el, r.total, r.unit)
	}
	eta := ""
	if r.total > 0 && r.done > 0 && r.done < r.total && el > 0.5 {
		left := time.Duration(float64(r.total-r.done) / (float64(r.done) / el) * float64(time.Second))
		eta = " ETA " + left.Round(time.Second).String()
	}
	if r.s.ErrTTY {
		bar := ""
		if r.total > 0 {
			const width = 24
			fill := int(float64(width) * float64(r.done) / float64(r.total))
			fill = min(max(fill, 0), width)
			bar = r.s.Styled("accent", strings.Repeat("█", fill)) + r.s.Styled("dim", strings.Repeat("░", width-fill)) +
				fmt.Sprintf(" %3.0f%%", 100*float64(r.done)/float64(r.total))
		}
		end := ""
		if final {
			end = "\n"
		}
		r.s.Printf("\r\033[K%s %s%s%s%s", r.step, bar, rate, eta, end)
		return
	}
	if r.total > 0 {
		r.s.Printf("%s: %.0f%%%s%s\n", r.step, 100*float64(r.done)/float64(r.total), rate, eta)
	}
}

// End finishes a step. A failed step is marked, without its error: the command prints the error once, last.
func (r *Reporter) End(step string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s.ErrTTY && !r.s.Quiet {
		r.s.Printf("\r\033[K")
	}
	el := time.Since(r.start).Round(time.Millisecond)
	if err != nil {
		r.s.Printf("%s %s (%s)\n", r.s.Styled("err", "✗"), step, el)
		return
	}
	r.s.Printf("%s %s (%s)\n", r.s.Styled("ok", "✓"), step, el)
}

// Note shows a warning or information.
func (r *Reporter) Note(level pipeline.Level, msg string) {
	if level == pipeline.Warn {
		r.s.Warnf("%s", msg)
		return
	}
	r.s.Printf("%s\n", msg)
}

func humanRate(bps float64, total int64, unit string) string {
	if unit != "" {
		if bps >= 100 {
			return fmt.Sprintf("%.0f %s/s", bps, unit)
		}
		return fmt.Sprintf("%.1f %s/s", bps, unit)
	}
	if total > 0 && total < 10000 {
		return fmt.Sprintf("%.1f/s", bps)
	}
	return HumanBytes(int64(bps)) + "/s"
}

// HumanBytes formats a byte count with a binary-free decimal unit (MB = 10^6), as llama.cpp and the Hub do.
func HumanBytes(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return fmt.Sprintf("%.2f GB", f/1e9)
	case f >= 1e6:
		return fmt.Sprintf("%.1f MB", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.1f kB", f/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
