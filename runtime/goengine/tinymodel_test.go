package goengine

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/tinygguf"
)

// tinyChatTemplate is a small Qwen-style Jinja template written into the
// test GGUFs (the real Qwen templates are longer but use the same features).
const tinyChatTemplate = `{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}`

type tinySpec struct {
	arch    string // qwen2, qwen3, qwen35
	layers  int
	f16     bool
	mtp     bool // add nextn_predict_layers (must be rejected)
	f16Conv bool // write ssm_conv1d in F16 (must be rejected)
	// Dimensions; zero means the tiny defaults (64 wide, 4 heads of 16).
	embd, heads, kvHeads, headDim, ff int
	seed                              uint64
	template                          string // chat template; empty means tinyChatTemplate
	// vocab, when set, edits the default vocabulary before it is written (hostile files).
	vocab func(tokens []string, types []int32, merges []string) ([]string, []int32, []string)
}

// writeTinyGGUF writes a random-weight model of spec to dir (internal/testkit/tinygguf) and returns its path.
func writeTinyGGUF(t testing.TB, dir string, spec tinySpec) string {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("tiny-%s-%d.gguf", spec.arch, spec.seed))
	var voc *tinygguf.Vocab
	if spec.vocab != nil {
		v := tinygguf.DefaultVocab()
		v.Tokens, v.Types, v.Merges = spec.vocab(v.Tokens, v.Types, v.Merges)
		voc = &v
	}
	tmpl := spec.template
	if tmpl == "" {
		tmpl = tinyChatTemplate
	}
	err := tinygguf.Write(path, tinygguf.Spec{Arch: spec.arch, Layers: spec.layers, F16: spec.f16, F16Conv: spec.f16Conv,
		MTP: spec.mtp, Embd: spec.embd, Heads: spec.heads, KVHeads: spec.kvHeads, HeadDim: spec.headDim, FF: spec.ff,
		Seed: spec.seed, Template: tmpl, Vocab: voc})
	if err != nil {
		t.Fatal(err)
	}
	return path
}
