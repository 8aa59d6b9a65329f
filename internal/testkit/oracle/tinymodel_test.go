package oracle

import (
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/tinygguf"
)

// The oracle's tests run llama.cpp on tiny random-weight models written by internal/testkit/tinygguf, with the
// 260-token vocabulary below so token ids are easy to name. What llama.cpp needs to load qwen3 and qwen35 is
// listed in shared/reference/gguf-quant-convert.md §10.2.

type tinyConfig struct {
	Vocab     int // 260: tinygguf.MinimalVocab
	Embd      int
	Layers    int
	Ctx       int
	Seed      uint64
	Tied      bool   // omit output.weight
	Template  string // tokenizer.chat_template; empty omits it
	Arch      string // general.architecture: "qwen3" (default) or "qwen35"
	SkipMerge bool   // write no tokenizer.ggml.merges (llama.cpp must reject the file)
}

func tinyQwen35Config() tinyConfig {
	c := defaultTinyConfig()
	c.Arch = "qwen35"
	c.Layers = 4
	return c
}

func defaultTinyConfig() tinyConfig {
	return tinyConfig{Vocab: 260, Embd: 64, Layers: 2, Ctx: 512, Seed: 1, Template: chatMLTemplate}
}

const chatMLTemplate = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + " +
	"'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// Token ids of the tiny vocabulary (tinygguf.MinimalVocab): 0..255 byte tokens (GPT-2 byte-to-unicode order
// by byte value), 256 = "Ġt" (the one merge "Ġ t"), then three control tokens.
const (
	tokMergedSpaceT = 256
	tokEndOfText    = 257
	tokImStart      = 258
	tokImEnd        = 259
)

// writeTinyQwen3 writes the model to dir/name and returns its path.
func writeTinyQwen3(t testing.TB, dir, name string, c tinyConfig) string {
	t.Helper()
	path := filepath.Join(dir, name)
	v := tinygguf.MinimalVocab()
	if len(v.Tokens) != c.Vocab {
		t.Fatalf("vocab has %d tokens, config wants %d", len(v.Tokens), c.Vocab)
	}
	pre := "qwen2"
	if c.Arch == "qwen35" {
		pre = "qwen35"
	}
	err := tinygguf.Write(path, tinygguf.Spec{Arch: c.Arch, Layers: c.Layers, Embd: c.Embd, Ctx: c.Ctx, Seed: c.Seed,
		Output: !c.Tied, Vocab: &v, NoMerges: c.SkipMerge, Pre: pre, Template: c.Template})
	if err != nil {
		t.Fatalf("write tiny gguf %s: %v", path, err)
	}
	return path
}
