package tinygguf

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// TestWrite checks the builder's own output through the project's GGUF reader, so a broken builder is
// reported as such and not as an engine or oracle failure.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "q3.gguf")
	if err := Write(p, Spec{Seed: 1, Output: true, Vocab: ptr(MinimalVocab()), Ctx: 512, Template: "{{ x }}"}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Architecture() != "qwen3" || len(f.Tensors) != 2+11*2+1 {
		t.Fatalf("arch %s, %d tensors", f.Architecture(), len(f.Tensors))
	}
	if n, _ := f.Uint("qwen3.context_length"); n != 512 {
		t.Fatalf("context_length %d", n)
	}
	if id, _ := f.Uint("tokenizer.ggml.eos_token_id"); id != 259 {
		t.Fatalf("eos %d, want <|im_end|> = 259", id)
	}
	if f.String("tokenizer.chat_template") != "{{ x }}" {
		t.Fatal("template missing")
	}

	q35 := filepath.Join(dir, "q35.gguf")
	if err := Write(q35, Spec{Arch: "qwen35", Layers: 4, F16: true, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.OpenFile(q35)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	types := map[string]gguf.Type{}
	var names []string
	for _, ti := range g.Tensors {
		names = append(names, ti.Name)
		types[ti.Name] = ti.Type
	}
	for _, want := range []string{"blk.0.attn_qkv.weight", "blk.0.ssm_a", "blk.2.ssm_dt.bias", "blk.3.attn_q.weight",
		"blk.3.post_attention_norm.weight"} {
		if !slices.Contains(names, want) {
			t.Errorf("qwen35 tensors lack %s", want)
		}
	}
	for _, unwanted := range []string{"blk.3.attn_qkv.weight", "blk.0.attn_q.weight", "blk.0.ffn_norm.weight", "output.weight"} {
		if slices.Contains(names, unwanted) {
			t.Errorf("qwen35 tensors have %s", unwanted)
		}
	}
	if types["blk.0.ssm_conv1d.weight"] != gguf.TypeF32 || types["blk.0.ffn_up.weight"] != gguf.TypeF16 || types["output_norm.weight"] != gguf.TypeF32 {
		t.Errorf("F16 file types: conv %s, ffn_up %s, norm %s", types["blk.0.ssm_conv1d.weight"], types["blk.0.ffn_up.weight"], types["output_norm.weight"])
	}
}

func TestVocabs(t *testing.T) {
	m := MinimalVocab()
	if len(m.Tokens) != 260 || m.ID("Ġt") != 256 || m.ID("<|im_start|>") != 258 || m.Merges[0] != "Ġ t" {
		t.Fatalf("minimal vocab: %d tokens, Ġt %d", len(m.Tokens), m.ID("Ġt"))
	}
	d := DefaultVocab()
	if d.ID("<think>") != len(d.Tokens)-2 || d.Types[d.ID("<think>")] != UserDefined || d.Types[d.ID("<|im_end|>")] != Control {
		t.Fatalf("default vocab specials")
	}
	if bu := bytelevel.Rune; bu[' '] != 'Ġ' || bu['a'] != 'a' || bu[0] != 256 {
		t.Fatalf("byte map")
	}
}

func ptr[T any](v T) *T { return &v }
