package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/phonellm/phonellm/runtime/engine"
)

// Bounds on prompt files: every byte of them is untrusted.
const (
	maxTextFile  = 256 << 20 // a plain-text prompt file
	maxJSONLLine = 64 << 20  // one JSONL record
	maxMessages  = 1 << 12   // messages in one record
	maxRecords   = 1 << 20   // records in one file
)

// Prompt is one prompt of the distribution check: raw text, or chat messages rendered with the model's chat
// template (with the assistant header, so the last position predicts the answer).
type Prompt struct {
	Text     string           `json:"text,omitempty"`
	Messages []engine.Message `json:"messages,omitempty"`
}

// FormatError reports a prompt or dataset file that is not what it should be.
type FormatError struct {
	File string
	Line int // 1-based; 0 for the whole file
	Msg  string
}

func (e *FormatError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("eval: %s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("eval: %s: %s", e.File, e.Msg)
}

// InputError classifies the error (pipeline.IsInputError): the input is malformed or unsupported.
func (e *FormatError) InputError() bool { return true }

// ReadPrompts reads a prompt set. A ".jsonl" file holds one JSON object per line with "text" (or "prompt")
// or "messages" (labelled task records work too; other fields are ignored); any other file is one plain-text
// document.
func ReadPrompts(path string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	if !strings.HasSuffix(strings.ToLower(path), ".jsonl") {
		b, err := io.ReadAll(io.LimitReader(f, maxTextFile+1))
		if err != nil {
			return nil, fmt.Errorf("eval: read %s: %w", path, err)
		}
		if len(b) > maxTextFile {
			return nil, &FormatError{File: path, Msg: fmt.Sprintf("text prompt file larger than %d bytes", maxTextFile)}
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return nil, &FormatError{File: path, Msg: "empty prompt file"}
		}
		return []Prompt{{Text: string(b)}}, nil
	}
	var out []Prompt
	err = eachJSONL(f, path, func(line int, raw []byte) error {
		var rec struct {
			Text     *string          `json:"text"`
			Prompt   *string          `json:"prompt"`
			Messages []engine.Message `json:"messages"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return &FormatError{File: path, Line: line, Msg: "not a JSON object: " + err.Error()}
		}
		p := Prompt{Messages: rec.Messages}
		switch {
		case rec.Text != nil:
			p.Text = *rec.Text
		case rec.Prompt != nil:
			p.Text = *rec.Prompt
		}
		if err := checkMessages(rec.Messages); err != nil {
			return &FormatError{File: path, Line: line, Msg: err.Error()}
		}
		if p.Text == "" && len(p.Messages) == 0 {
			return &FormatError{File: path, Line: line, Msg: `want a non-empty "text", "prompt" or "messages"`}
		}
		if p.Text != "" && len(p.Messages) > 0 {
			return &FormatError{File: path, Line: line, Msg: `both text and "messages": want one`}
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, &FormatError{File: path, Msg: "no prompts"}
	}
	return out, nil
}

func checkMessages(ms []engine.Message) error {
	if len(ms) > maxMessages {
		return fmt.Errorf("%d messages, at most %d", len(ms), maxMessages)
	}
	for i, m := range ms {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return fmt.Errorf("message %d: role %q: want system, user, assistant or tool", i, m.Role)
		}
	}
	return nil
}

// eachJSONL calls fn for every non-blank line of r, with bounded line length and record count.
func eachJSONL(r io.Reader, path string, fn func(line int, raw []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxJSONLLine)
	line, n := 0, 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		if n++; n > maxRecords {
			return &FormatError{File: path, Line: line, Msg: fmt.Sprintf("more than %d records", maxRecords)}
		}
		if err := fn(line, raw); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &FormatError{File: path, Line: line + 1, Msg: fmt.Sprintf("line longer than %d bytes", maxJSONLLine)}
		}
		return fmt.Errorf("eval: read %s: %w", path, err)
	}
	return nil
}
