package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/runtime/engine"
)

// ChatMessage is a message of a chat request. Content is a string, null or
// an array of parts of which only "text" parts are accepted. An assistant
// message may carry the tool calls it made, a tool message the id of the
// call it answers.
type ChatMessage struct {
	Role             string            `json:"role"`
	Content          json.RawMessage   `json:"content"`
	ToolCalls        []engine.ToolCall `json:"tool_calls"`
	ToolCallID       string            `json:"tool_call_id"`
	Name             string            `json:"name"`
	ReasoningContent string            `json:"reasoning_content"`
}

// StringList is a string or an array of strings (OpenAI's "stop").
type StringList []string

// UnmarshalJSON accepts a string, an array of strings or null.
func (s *StringList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = StringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("must be a string or an array of strings")
	}
	*s = many
	return nil
}

// ResponseFormat is OpenAI's response_format (see constraint.go). Schema
// is llama-server's extension of the json_object type.
type ResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
	Schema     json.RawMessage `json:"schema,omitempty"`
}

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// samplingFields are the request fields shared by both endpoints. Fields
// beyond OpenAI's (top_k, min_p, repeat_penalty, repeat_last_n, grammar,
// json_schema) are llama-server's extensions; choices is phonellm's
// (constraint.go).
type samplingFields struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float32        `json:"temperature"`
	TopP                *float32        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float32        `json:"min_p"`
	RepeatPenalty       *float32        `json:"repeat_penalty"`
	RepeatLastN         *int            `json:"repeat_last_n"`
	FrequencyPenalty    *float32        `json:"frequency_penalty"`
	PresencePenalty     *float32        `json:"presence_penalty"`
	Seed                *int64          `json:"seed"`
	N                   *int            `json:"n"`
	Stop                StringList      `json:"stop"`
	ResponseFormat      *ResponseFormat `json:"response_format"`
	Grammar             *string         `json:"grammar"`
	JSONSchema          json.RawMessage `json:"json_schema"`
	Choices             []string        `json:"choices"`
	CachePrompt         *bool           `json:"cache_prompt"`
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	samplingFields
	Messages           []ChatMessage              `json:"messages"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	Tools              []json.RawMessage          `json:"tools"`
	ToolChoice         json.RawMessage            `json:"tool_choice"`
	ParallelToolCalls  *bool                      `json:"parallel_tool_calls"`
	// Logprobs asks for the log-probability of each output token,
	// TopLogprobs (0-20) for that many most likely alternatives too.
	Logprobs    *bool `json:"logprobs"`
	TopLogprobs *int  `json:"top_logprobs"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	samplingFields
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	// Logprobs (an integer, 0-20) asks for the log-probability of each
	// output token and of that many most likely alternatives.
	Logprobs json.RawMessage `json:"logprobs"`
}

const maxStops = 16

// request converts the shared fields into an engine request.
func (f *samplingFields) request(defaults engine.SamplingParams, lim Limits) (engine.Request, *httpx.Error) {
	var r engine.Request
	if f.N != nil && *f.N != 1 {
		return r, httpx.BadRequest("n", "", "n must be 1 (got %d)", *f.N)
	}
	switch {
	case f.MaxCompletionTokens != nil:
		r.MaxTokens = *f.MaxCompletionTokens
		if r.MaxTokens < 1 {
			return r, httpx.BadRequest("max_completion_tokens", "", "max_completion_tokens must be at least 1")
		}
	case f.MaxTokens != nil:
		r.MaxTokens = *f.MaxTokens
		if r.MaxTokens < 1 {
			return r, httpx.BadRequest("max_tokens", "", "max_tokens must be at least 1")
		}
	}
	if len(f.Stop) > maxStops {
		return r, httpx.BadRequest("stop", "array_above_max_length", "at most %d stop sequences", maxStops)
	}
	for i, stop := range f.Stop {
		if len(stop) > lim.MaxStopBytes {
			return r, tooLong(fmt.Sprintf("stop[%d]", i), len(stop), lim.MaxStopBytes)
		}
	}
	r.Stop = f.Stop
	p := defaults
	if f.Temperature != nil {
		p.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		p.TopP = *f.TopP
	}
	if f.TopK != nil {
		p.TopK = *f.TopK
	}
	if f.MinP != nil {
		p.MinP = *f.MinP
	}
	if f.RepeatPenalty != nil {
		p.RepeatPenalty = *f.RepeatPenalty
	}
	if f.RepeatLastN != nil {
		p.RepeatLastN = *f.RepeatLastN
	}
	if f.FrequencyPenalty != nil {
		p.FrequencyPenalty = *f.FrequencyPenalty
	}
	if f.PresencePenalty != nil {
		p.PresencePenalty = *f.PresencePenalty
	}
	if f.Seed != nil {
		s := uint64(*f.Seed)
		p.Seed = &s
	}
	if p.Temperature > 2 {
		return r, httpx.BadRequest("temperature", "", "temperature %v is above 2", p.Temperature)
	}
	if err := p.Validate(); err != nil {
		return r, httpx.BadRequest("", "", "%v", err)
	}
	r.Sampling = p
	if f.CachePrompt != nil && !*f.CachePrompt {
		r.NoCache = true
	}
	return r, nil
}

// messages converts chat messages, accepting string content or text parts,
// within the request limits: the number of messages, each content's bytes
// and their sum, checked before anything is templated or tokenized.
func (c *ChatRequest) messages(lim Limits) ([]engine.Message, *httpx.Error) {
	if len(c.Messages) == 0 {
		return nil, httpx.BadRequest("messages", "", "messages must not be empty")
	}
	if len(c.Messages) > lim.MaxMessages {
		return nil, httpx.BadRequest("messages", "array_above_max_length",
			"Invalid 'messages': array too long: %d messages, at most %d.", len(c.Messages), lim.MaxMessages)
	}
	out := make([]engine.Message, len(c.Messages))
	total := 0
	for i, m := range c.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, httpx.BadRequest(fmt.Sprintf("messages[%d].role", i), "", "unknown role %q", m.Role)
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		param := fmt.Sprintf("messages[%d].content", i)
		// JSON escapes take at most 6 bytes per byte of text: a longer raw value is too long unread.
		if raw := len(m.Content); raw > 6*lim.MaxPromptBytes+2 {
			return nil, tooLong(param, raw, lim.MaxPromptBytes)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, httpx.BadRequest(param, "", "%v", err)
		}
		if len(text) > lim.MaxPromptBytes {
			return nil, tooLong(param, len(text), lim.MaxPromptBytes)
		}
		msg := engine.Message{Role: role, Content: text, ToolCallID: m.ToolCallID, Name: m.Name, ReasoningContent: m.ReasoningContent}
		n := len(text) + len(m.ToolCallID) + len(m.Name) + len(m.ReasoningContent)
		if len(m.ToolCalls) > 0 {
			if role != "assistant" {
				return nil, httpx.BadRequest(fmt.Sprintf("messages[%d].tool_calls", i), "", "Invalid 'messages[%d]': only assistant messages carry tool_calls.", i)
			}
			if len(m.ToolCalls) > maxTools {
				return nil, httpx.BadRequest(fmt.Sprintf("messages[%d].tool_calls", i), "array_above_max_length",
					"Invalid 'messages[%d].tool_calls': at most %d calls.", i, maxTools)
			}
			for j, tc := range m.ToolCalls {
				if tc.Function.Name == "" || (tc.Type != "" && tc.Type != "function") {
					return nil, httpx.BadRequest(fmt.Sprintf("messages[%d].tool_calls[%d]", i, j), "",
						"Invalid 'messages[%d].tool_calls[%d]': want a function call with a name.", i, j)
				}
				n += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
			}
			msg.ToolCalls = m.ToolCalls
		}
		if total += n; total > lim.MaxPromptBytes {
			return nil, httpx.BadRequest("messages", "string_above_max_length",
				"Invalid 'messages': the messages hold more than %d bytes of text, more than a prompt for this model's context may have.", lim.MaxPromptBytes)
		}
		out[i] = msg
	}
	return out, nil
}

func totalContent(msgs []engine.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	return n
}

func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content must be a string or an array of text parts")
	}
	if len(parts) > 4096 {
		return "", fmt.Errorf("content has %d parts, at most 4096", len(parts))
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part type %q is not supported (text only)", p.Type)
		}
		sb.WriteString(p.Text)
	}
	return sb.String(), nil
}

// prompt returns the text or tokens of a completion request's prompt: a
// string, an array with one string, or an array of token ids; text longer
// than lim.MaxPromptBytes and more tokens than the context holds are refused
// before tokenizing.
func (c *CompletionRequest) prompt(lim Limits, contextLength int) (string, []int32, *httpx.Error) {
	raw := bytes.TrimSpace(c.Prompt)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil, httpx.BadRequest("prompt", "", "prompt is required")
	}
	if len(raw) > 6*lim.MaxPromptBytes+16 && raw[0] != '[' {
		return "", nil, tooLong("prompt", len(raw), lim.MaxPromptBytes)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if len(s) > lim.MaxPromptBytes {
			return "", nil, tooLong("prompt", len(s), lim.MaxPromptBytes)
		}
		return s, nil, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) != 1 {
			return "", nil, httpx.BadRequest("prompt", "", "exactly one prompt is supported (got %d)", len(ss))
		}
		if len(ss[0]) > lim.MaxPromptBytes {
			return "", nil, tooLong("prompt[0]", len(ss[0]), lim.MaxPromptBytes)
		}
		return ss[0], nil, nil
	}
	var toks []float64
	if json.Unmarshal(raw, &toks) == nil {
		if len(toks) >= contextLength {
			return "", nil, contextLengthError(len(toks), contextLength, false)
		}
		out := make([]int32, len(toks))
		for i, t := range toks {
			if t != math.Trunc(t) || t < 0 || t > math.MaxInt32 {
				return "", nil, httpx.BadRequest("prompt", "", "prompt token %v is not a token id", t)
			}
			out[i] = int32(t)
		}
		return "", out, nil
	}
	return "", nil, httpx.BadRequest("prompt", "", "prompt must be a string, an array of one string, or an array of token ids")
}

// Usage is OpenAI's usage object.
type Usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails *TokenDetails `json:"prompt_tokens_details,omitempty"`
}

// TokenDetails reports cached prompt tokens.
type TokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Timings is llama-server's timings extension of a response.
type Timings struct {
	PromptN            int     `json:"prompt_n"`
	PromptMS           float64 `json:"prompt_ms"`
	PromptPerSecond    float64 `json:"prompt_per_second"`
	PredictedN         int     `json:"predicted_n"`
	PredictedMS        float64 `json:"predicted_ms"`
	PredictedPerSecond float64 `json:"predicted_per_second"`
	CacheN             int     `json:"cache_n"`
}

func usageOf(r engine.Response) *Usage {
	return &Usage{PromptTokens: r.Timings.PromptTokens, CompletionTokens: len(r.Tokens),
		TotalTokens:         r.Timings.PromptTokens + len(r.Tokens),
		PromptTokensDetails: &TokenDetails{CachedTokens: r.Timings.CachedTokens}}
}

func timingsOf(r engine.Response) *Timings {
	t := r.Timings
	return &Timings{
		PromptN: t.PromptTokens - t.CachedTokens, PromptMS: ms(t.PromptDuration.Seconds()), PromptPerSecond: t.PromptPerSecond(),
		PredictedN: t.GeneratedTokens, PredictedMS: ms(t.GenerateDuration.Seconds()), PredictedPerSecond: t.GeneratePerSecond(),
		CacheN: t.CachedTokens,
	}
}

func ms(s float64) float64 { return math.Round(s*1e6) / 1e3 }

// ChatMessageOut is an assistant message in a response, or the delta of a
// stream chunk. Its content is null when it only calls tools.
type ChatMessageOut struct {
	Role      string        `json:"role,omitempty"`
	Content   string        `json:"content"`
	ToolCalls []ToolCallOut `json:"tool_calls,omitempty"`
}

// MarshalJSON writes content as null in a message that only calls tools,
// as OpenAI does.
func (m ChatMessageOut) MarshalJSON() ([]byte, error) {
	type plain ChatMessageOut
	if m.Content == "" && len(m.ToolCalls) > 0 {
		return json.Marshal(struct {
			Role      string        `json:"role,omitempty"`
			Content   *string       `json:"content"`
			ToolCalls []ToolCallOut `json:"tool_calls"`
		}{m.Role, nil, m.ToolCalls})
	}
	return json.Marshal(plain(m))
}

// ToolCallOut is a function call of the model's answer. In a stream chunk
// the first delta of a call has its index, id, type and name; later deltas
// of the same index add to its arguments.
type ToolCallOut struct {
	Index    *int            `json:"index,omitempty"`
	ID       string          `json:"id,omitempty"`
	Type     string          `json:"type,omitempty"`
	Function ToolFunctionOut `json:"function"`
}

// ToolFunctionOut names the function called and gives its arguments as
// JSON text.
type ToolFunctionOut struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ChatChoice is a choice of a chat completion.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      *ChatMessageOut `json:"message,omitempty"`
	Delta        *ChatMessageOut `json:"delta,omitempty"`
	Logprobs     *ChatLogprobs   `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// ChatResponse is a chat.completion or a chat.completion.chunk.
type ChatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
	Timings           *Timings     `json:"timings,omitempty"`
}

// CompletionChoice is a choice of a text completion.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// CompletionResponse is a text_completion (also used for stream chunks).
type CompletionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
	Timings           *Timings           `json:"timings,omitempty"`
}
