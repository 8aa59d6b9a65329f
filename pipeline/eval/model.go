package eval

import (
	"context"

	"github.com/phonellm/phonellm/runtime/engine"
)

// LogitModel is a loaded model that can report raw next-token logits. runtime/goengine's Engine implements
// it.
type LogitModel interface {
	// Info describes the model; ContextLength bounds one Logits call.
	Info() engine.ModelInfo
	// Tokenize turns text into token ids (special tokens written in the text become their ids).
	Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error)
	// ApplyChatTemplate renders chat messages with the model's template.
	ApplyChatTemplate(ctx context.Context, messages []engine.Message, opts engine.TemplateOptions) (string, error)
	// Logits evaluates tokens from an empty context and calls fn in position order with the full-vocabulary
	// logits after each position (logits of position i predict token i+1). The slice is only valid during
	// the call. An error from fn stops the evaluation and is returned.
	Logits(ctx context.Context, tokens []int32, fn func(pos int, logits []float32) error) error
	// Close releases the model.
	Close() error
}

// Loader loads the GGUF at path for the distribution check.
type Loader func(ctx context.Context, path string) (LogitModel, error)
