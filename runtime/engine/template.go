package engine

import (
	"fmt"

	"github.com/ardanlabs/jinja"
)

// ChatMLTemplate is used when a GGUF has no tokenizer.chat_template; it is
// llama.cpp's fallback (llm_chat_apply_template, LLM_CHAT_TEMPLATE_CHATML).
const ChatMLTemplate = `{%- for message in messages -%}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}`

// ChatTemplate renders chat messages with a model's Jinja chat template
// (the GGUF key tokenizer.chat_template). It is safe for concurrent use.
type ChatTemplate struct {
	tmpl     *jinja.Template
	bosToken string
	eosToken string
}

// NewChatTemplate compiles src. bosToken and eosToken are the texts of the
// model's BOS and EOS tokens (templates read them as bos_token/eos_token).
// An empty src selects ChatMLTemplate.
func NewChatTemplate(src, bosToken, eosToken string) (*ChatTemplate, error) {
	if src == "" {
		src = ChatMLTemplate
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("engine: compile chat template: %w", err)
	}
	return &ChatTemplate{tmpl: t, bosToken: bosToken, eosToken: eosToken}, nil
}

// Render returns the prompt text for messages.
func (c *ChatTemplate) Render(messages []Message, opts TemplateOptions) (string, error) {
	if len(messages) == 0 {
		return "", fmt.Errorf("engine: chat template: no messages")
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": opts.AddGenerationPrompt,
		"bos_token":             c.bosToken,
		"eos_token":             c.eosToken,
	}
	if opts.EnableThinking != nil {
		data["enable_thinking"] = *opts.EnableThinking
	}
	out, err := c.tmpl.Render(data)
	if err != nil {
		return "", fmt.Errorf("engine: render chat template: %w", err)
	}
	return out, nil
}
