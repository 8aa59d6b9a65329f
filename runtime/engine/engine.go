package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/phonellm/phonellm/internal/jinja"
)

// Engine runs one loaded model. All methods are safe for concurrent use;
// Generate calls beyond the engine's parallel slots wait for a free slot (or
// for their context to end).
type Engine interface {
	// Info describes the loaded model and the engine's limits.
	Info() ModelInfo
	// Tokenize turns text into token ids; it stops with ctx's error when ctx ends.
	// Special tokens written in the text
	// (such as "<|im_start|>") become their single ids. addSpecial adds the
	// BOS token when the model asks for it.
	Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error)
	// Detokenize turns token ids back into text.
	Detokenize(tokens []int32) (string, error)
	// ApplyChatTemplate renders messages with the model's chat template; it stops
	// with ctx's error when ctx ends.
	ApplyChatTemplate(ctx context.Context, messages []Message, opts TemplateOptions) (string, error)
	// Generate evaluates the prompt and samples until an end-of-generation
	// token, a stop sequence, MaxTokens or the context limit. emit, when not
	// nil, is called in order for every generated token that becomes visible;
	// an error from emit stops generation and is returned. Cancelling ctx
	// stops generation promptly and frees the slot; Generate then returns the
	// partial Response with FinishCancelled and ctx's error.
	Generate(ctx context.Context, req Request, emit func(Token) error) (Response, error)
	// Close releases the model. Generate must not be called afterwards.
	Close() error
}

// ModelInfo describes a loaded model and the engine serving it.
type ModelInfo struct {
	// ID is the name the model is served under (file base name by default).
	ID           string `json:"id"`
	Path         string `json:"path,omitempty"`
	Architecture string `json:"architecture"`
	Engine       string `json:"engine"`
	// ContextLength is the number of tokens one request may use (prompt plus
	// generated), per slot.
	ContextLength int `json:"context_length"`
	// TrainContextLength is the model's own context length from its metadata.
	TrainContextLength int `json:"train_context_length,omitempty"`
	Parallel           int `json:"parallel"`
	Threads            int `json:"threads,omitempty"`
	BatchSize          int `json:"batch_size,omitempty"`
	VocabSize          int `json:"vocab_size"`
	// HasChatTemplate is false when the file carries no tokenizer.chat_template
	// and ChatML is used instead.
	HasChatTemplate bool `json:"has_chat_template"`
	// RepackedTensors counts the quantized matrices the engine moved into
	// interleaved GEMM layouts at load (goengine; 0 when none qualify).
	RepackedTensors int `json:"repacked_tensors,omitempty"`
	// ResumesAtCheckpoints is true when a cached prefix can be reused only
	// up to a saved state (a hybrid model's recurrent layers): callers that
	// know where later prompts will diverge say so in Request.CacheBoundary.
	ResumesAtCheckpoints bool `json:"resumes_at_checkpoints,omitempty"`
}

// Message is one chat message, in OpenAI's chat-completions shape (its JSON
// form is OpenAI's, see message.go). A chat template sees it as the mapping
// transformers and llama-server pass: role and content always, the other
// keys only when set.
type Message struct {
	Role string `json:"role"`
	// Content is the message's text. When Parts is not nil the content is
	// that list of parts instead (OpenAI's array form) and Content is unused.
	Content string        `json:"-"`
	Parts   []ContentPart `json:"-"`
	// ReasoningContent is the reasoning of an earlier assistant turn, which
	// thinking models' templates (Qwen3, Qwen3.5, DeepSeek-R1) read.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// ToolCalls are the function calls an assistant turn made.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on a tool message (or the author's name).
	Name string `json:"name,omitempty"`
}

// ContentPart is one part of a message's content in OpenAI's array form.
// Chat templates render text parts; other types are for the API to refuse.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ToolCall is one function call of an assistant message.
type ToolCall struct {
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type"` // "function"
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction names the function called and its arguments.
type ToolCallFunction struct {
	Name string `json:"name"`
	// Arguments is the JSON text of the arguments, as OpenAI sends it. A chat
	// template sees a JSON object as a mapping (the form Qwen's, Llama's and
	// most templates iterate over), anything else as this string.
	Arguments string `json:"arguments"`
}

// TemplateOptions are the variables a chat template may read besides the
// messages, and the limits of the render.
type TemplateOptions struct {
	// AddGenerationPrompt appends the assistant turn header.
	AddGenerationPrompt bool
	// EnableThinking, when not nil, is passed as the template's
	// enable_thinking variable (Qwen3 / Qwen3.5 templates read it).
	EnableThinking *bool
	// Tools are OpenAI tool definitions ({"type": "function", "function":
	// {...}}), passed to the template as tools (nil: the template sees None,
	// as transformers passes it without tools). Each is kept as its JSON text
	// so that a template printing it (tools|tojson) prints the client's key
	// order, as transformers does; Go maps would lose it.
	Tools []json.RawMessage
	// Extra are further template variables (OpenAI's chat_template_kwargs),
	// converted with jinja.FromGo (a json.RawMessage keeps its key order).
	// They override EnableThinking and the special tokens; they may not set
	// messages, tools, documents or add_generation_prompt.
	Extra map[string]any
	// Limits bound the render; nil means jinja.DefaultLimits.
	Limits *jinja.Limits
}

// FinishReason tells why generation ended. The values are OpenAI's.
type FinishReason string

const (
	// FinishStop: an end-of-generation token or a stop sequence.
	FinishStop FinishReason = "stop"
	// FinishLength: MaxTokens or the context limit.
	FinishLength FinishReason = "length"
	// FinishCancelled: the context ended or emit returned an error.
	FinishCancelled FinishReason = "cancelled"
)

// Request is one generation request.
type Request struct {
	// Prompt is raw text, already templated; special tokens in it are parsed.
	Prompt string
	// Tokens, when not nil, is used instead of Prompt.
	Tokens []int32
	// AddSpecial adds the model's BOS token when the model asks for it.
	AddSpecial bool
	// MaxTokens bounds the generated tokens; 0 means until the context is full.
	MaxTokens int
	// Stop sequences end generation; the matched text is not returned.
	Stop []string
	// Sampling configures the sampler.
	Sampling SamplingParams
	// NoCache evaluates the whole prompt even when a slot holds its prefix.
	NoCache bool
	// CacheBoundary, when positive, is the number of leading prompt tokens
	// that later requests are expected to share (the rendered system
	// messages): an engine that resumes only at saved states keeps one
	// there, so the next request reuses exactly that prefix, and an engine
	// with several slots does not give that prefix away for a shorter reuse.
	CacheBoundary int
	// IgnoreEOG keeps generating past end-of-generation tokens (for
	// benchmarks, like llama-bench); they are then treated as text.
	IgnoreEOG bool
	// Constraint, when not nil, limits the output to what it allows (a GBNF
	// grammar, a JSON schema, a set of choices: runtime/grammar). It is
	// applied before the sampler chain; generation stops with FinishStop as
	// soon as the output is complete and only an end-of-generation token
	// could follow. A constraint the model's vocabulary cannot follow fails
	// Generate with an error that is an InputError.
	Constraint Constraint
	// Logprobs, when not nil, records the log-probability of every
	// generated token and its most likely alternatives (Token.Logprobs,
	// Response.Logprobs); see LogprobSource for the distribution.
	Logprobs *LogprobOptions
}

// Token is one generated token.
type Token struct {
	ID int32 `json:"id"`
	// Text is the text this token makes visible. It may be empty (a control
	// token, an incomplete UTF-8 sequence, or text held back because it may
	// start a stop sequence) or hold text of earlier tokens released now.
	Text string `json:"text"`
	// Logprobs is the sampler's record for this token when the request
	// asked for it (nil for the flush of held-back text, ID -1).
	Logprobs *StepLogprobs `json:"logprobs,omitempty"`
}

// Response is the result of Generate.
type Response struct {
	Text         string       `json:"text"`
	Tokens       []int32      `json:"tokens"`
	FinishReason FinishReason `json:"finish_reason"`
	Timings      Timings      `json:"timings"`
	// Logprobs holds one record per entry of Tokens when the request asked
	// for them (an end-of-generation token is not in Tokens and has none).
	Logprobs []StepLogprobs `json:"logprobs,omitempty"`
}

// Timings of one request. Durations are nanoseconds in JSON.
type Timings struct {
	// PromptTokens is the full prompt length; CachedTokens of them were
	// reused from the slot's KV cache and not evaluated.
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// PromptDuration runs from the slot being assigned to the first logits.
	PromptDuration time.Duration `json:"prompt_ns"`
	// GeneratedTokens counts sampled tokens (including a final EOG token).
	GeneratedTokens int `json:"generated_tokens"`
	// GenerateDuration runs from the first logits to the last sampled token.
	GenerateDuration time.Duration `json:"generate_ns"`
	// QueueDuration is the wait for a free slot.
	QueueDuration time.Duration `json:"queue_ns"`
}

// PromptPerSecond is the rate at which evaluated (not cached) prompt tokens
// were processed.
func (t Timings) PromptPerSecond() float64 {
	return perSecond(t.PromptTokens-t.CachedTokens, t.PromptDuration)
}

// GeneratePerSecond is the decode rate. The first token comes from the prompt
// pass, so n tokens take n-1 decode steps.
func (t Timings) GeneratePerSecond() float64 {
	return perSecond(t.GeneratedTokens-1, t.GenerateDuration)
}

func perSecond(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ContextLengthError reports a prompt that does not fit the context window.
type ContextLengthError struct {
	PromptTokens  int
	ContextLength int
}

func (e *ContextLengthError) Error() string {
	return fmt.Sprintf("prompt has %d tokens, more than the %d-token context allows (at least one token must be left to generate)", e.PromptTokens, e.ContextLength)
}

// ErrClosed is returned by Generate after Close.
var ErrClosed = errors.New("engine: engine closed")

// ErrEmptyPrompt is returned for a request without prompt tokens.
var ErrEmptyPrompt = errors.New("engine: empty prompt")

// UnsupportedError reports a valid model file the engine cannot run.
type UnsupportedError struct {
	Path   string
	Reason string
	Hint   string
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("engine: %s: %s", e.Path, e.Reason)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// InputError classifies the error (pipeline.IsInputError): the model file is one the engine cannot run.
func (e *UnsupportedError) InputError() bool { return true }
