package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// messageJSON is Message's wire form (OpenAI's).
type messageJSON struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
	Name             string          `json:"name,omitempty"`
}

// MarshalJSON writes OpenAI's form: content is a string, the array of parts,
// or null for an assistant turn that only calls tools.
func (m Message) MarshalJSON() ([]byte, error) {
	w := messageJSON{Role: m.Role, ReasoningContent: m.ReasoningContent, ToolCalls: m.ToolCalls,
		ToolCallID: m.ToolCallID, Name: m.Name}
	var err error
	switch {
	case m.Parts != nil:
		w.Content, err = json.Marshal(m.Parts)
	case m.Content == "" && len(m.ToolCalls) > 0:
		w.Content = json.RawMessage("null")
	default:
		w.Content, err = json.Marshal(m.Content)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads OpenAI's form: content may be a string, an array of
// parts, null or absent.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w messageJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = Message{Role: w.Role, ReasoningContent: w.ReasoningContent, ToolCalls: w.ToolCalls,
		ToolCallID: w.ToolCallID, Name: w.Name}
	c := bytes.TrimSpace(w.Content)
	switch {
	case len(c) == 0 || bytes.Equal(c, []byte("null")):
	case c[0] == '"':
		return json.Unmarshal(c, &m.Content)
	case c[0] == '[':
		if err := json.Unmarshal(c, &m.Parts); err != nil {
			return fmt.Errorf("message content: %w", err)
		}
		if m.Parts == nil {
			m.Parts = []ContentPart{}
		}
	default:
		return fmt.Errorf("message content must be a string, an array of parts or null, not %s", c)
	}
	return nil
}

// UnmarshalJSON accepts arguments as OpenAI's JSON string or, as some
// clients send them, as a JSON value (kept as its text).
func (f *ToolCallFunction) UnmarshalJSON(b []byte) error {
	var w struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	f.Name = w.Name
	a := bytes.TrimSpace(w.Arguments)
	switch {
	case len(a) == 0 || bytes.Equal(a, []byte("null")):
		f.Arguments = ""
	case a[0] == '"':
		return json.Unmarshal(a, &f.Arguments)
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, a); err != nil {
			return err
		}
		f.Arguments = buf.String()
	}
	return nil
}
