package convert

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

func tokDir(t *testing.T, tok map[string]any, tc map[string]any, cfg map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	writeJSON(t, dir, "tokenizer.json", tok)
	if tc != nil {
		writeJSON(t, dir, "tokenizer_config.json", tc)
	}
	if cfg == nil {
		cfg = map[string]any{"vocab_size": 10}
	}
	writeJSON(t, dir, "config.json", cfg)
	return dir
}

func loadTok(t *testing.T, dir string) (*vocab, error) {
	t.Helper()
	h, err := loadHParams(dir)
	if err != nil {
		t.Fatal(err)
	}
	return loadTokenizer(dir, h, 0)
}

func kvMap(kvs []gguf.KV) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

func TestPreTokenizerDetection(t *testing.T) {
	adapted := `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	for regex, want := range map[string]string{qwen2Regex: "qwen2", qwen35Regex: "qwen35", adapted: "qwen2"} {
		v, err := loadTok(t, tokDir(t, tinyTokenizer(regex, nil), nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		if v.pre != want {
			t.Errorf("pre = %q, want %q", v.pre, want)
		}
	}
	llama3 := `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	_, err := loadTok(t, tokDir(t, tinyTokenizer(llama3, nil), nil, nil))
	if err == nil || !strings.Contains(err.Error(), `\\p{N}{1,3}`) || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("unknown regex: err = %v", err)
	}
	tok := tinyTokenizer(qwen2Regex, nil)
	tok["pre_tokenizer"] = map[string]any{"type": "ByteLevel"}
	if _, err := loadTok(t, tokDir(t, tok, nil, nil)); err == nil {
		t.Error("pre_tokenizer without Split accepted")
	}
}

func TestVocabPaddingAndTypes(t *testing.T) {
	tok := tinyTokenizer(qwen2Regex, nil)
	tok["added_tokens"] = append(tok["added_tokens"].([]any),
		map[string]any{"id": 8, "content": "<think>", "special": false, "normalized": false},
		map[string]any{"id": 9, "content": "<|fim_pad|>", "special": false, "normalized": false})
	v, err := loadTok(t, tokDir(t, tok, nil, map[string]any{"vocab_size": 12}))
	if err != nil {
		t.Fatal(err)
	}
	wantTok := []string{"a", "b", "c", "d", "e", "ab", "<|endoftext|>", "<|im_end|>", "<think>", "<|fim_pad|>", "[PAD10]", "[PAD11]"}
	wantType := []int32{1, 1, 1, 1, 1, 1, 3, 3, 4, 3, 5, 5} // <|fim_pad|> looks special → CONTROL
	if !slices.Equal(v.tokens, wantTok) || !slices.Equal(v.types, wantType) {
		t.Errorf("tokens %q types %v", v.tokens, v.types)
	}
	// An id beyond vocab_size is an error, not a silent drop.
	if _, err := loadTok(t, tokDir(t, tok, nil, map[string]any{"vocab_size": 9})); err == nil || !strings.Contains(err.Error(), "vocab_size") {
		t.Errorf("id past vocab_size: err = %v", err)
	}
}

func TestMergeFormats(t *testing.T) {
	// The merged tokens must be in the vocabulary (see TestVocabularyChecked).
	withMerged := func(merges any) map[string]any {
		tok := tinyTokenizer(qwen2Regex, merges)
		vocab := tok["model"].(map[string]any)["vocab"].(map[string]any)
		vocab["abc"], vocab["aĠb"], vocab["aĠbc"] = 8, 9, 10
		return tok
	}
	cfg := map[string]any{"vocab_size": 11}
	for _, tc := range []struct {
		merges any
		want   []string
	}{
		{[]any{"a b", "ab c"}, []string{"a b", "ab c"}},
		{[]any{[]any{"a", "b"}, []any{"a b", "c"}}, []string{"a b", "aĠb c"}},
	} {
		v, err := loadTok(t, tokDir(t, withMerged(tc.merges), nil, cfg))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(v.merges, tc.want) {
			t.Errorf("merges %q, want %q", v.merges, tc.want)
		}
	}
	if _, err := loadTok(t, tokDir(t, tinyTokenizer(qwen2Regex, []any{}), nil, nil)); err == nil {
		t.Error("empty merges accepted")
	}
	// merges.txt fallback.
	dir := tokDir(t, withMerged([]any{}), nil, cfg)
	if err := os.WriteFile(filepath.Join(dir, "merges.txt"), []byte("#version: 0.2\na b\nbad\nab c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := loadTok(t, dir)
	if err != nil || !slices.Equal(v.merges, []string{"a b", "ab c"}) {
		t.Errorf("merges.txt: %q %v", v.merges, err)
	}
	if _, err := loadTok(t, tokDir(t, tinyTokenizer(qwen2Regex, []any{3}), nil, nil)); err == nil {
		t.Error("numeric merge accepted")
	}
}

// TestVocabularyChecked: convert refuses a tokenizer.json whose GGUF vocabulary the runtime's tokenizer
// (and llama.cpp) would refuse, instead of writing a file that cannot be served.
func TestVocabularyChecked(t *testing.T) {
	for name, edit := range map[string]func(map[string]any){
		"merge names an unknown token": func(tok map[string]any) { tok["model"].(map[string]any)["merges"] = []any{"a b", "ab zz"} },
		"merged token missing":         func(tok map[string]any) { tok["model"].(map[string]any)["merges"] = []any{"a b", "b a"} },
		"duplicate token": func(tok map[string]any) {
			tok["added_tokens"] = append(tok["added_tokens"].([]any), map[string]any{"id": 8, "content": "ab", "special": false})
		},
		"empty token": func(tok map[string]any) { tok["model"].(map[string]any)["vocab"].(map[string]any)[""] = 9 },
	} {
		tok := tinyTokenizer(qwen2Regex, nil)
		edit(tok)
		_, err := loadTok(t, tokDir(t, tok, nil, nil))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "tokenizer.json") || !strings.Contains(err.Error(), "tokenizer.ggml.") {
			t.Errorf("%s: %v; want a ConfigError on tokenizer.json naming the GGUF key", name, err)
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	// Qwen3-style: tokenizer_config names eos and pad, config.json adds bos; add_bos_token false.
	tc := map[string]any{"add_bos_token": false, "add_eos_token": false, "add_prefix_space": false, "bos_token": nil,
		"eos_token": map[string]any{"content": "<|im_end|>", "lstrip": false}, "pad_token": "<|endoftext|>", "unk_token": nil,
		"chat_template": "TEMPLATE"}
	cfg := map[string]any{"vocab_size": 10, "bos_token_id": 6, "eos_token_id": 6, "pad_token_id": []any{1, 2}}
	v, err := loadTok(t, tokDir(t, tinyTokenizer(qwen2Regex, nil), tc, cfg))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range v.kvs() {
		keys = append(keys, kv.Key)
	}
	want := []string{"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
		"tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.bos_token_id",
		"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.chat_template"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys\n %v\nwant\n %v", keys, want)
	}
	m := kvMap(v.kvs())
	for k, w := range map[string]string{"tokenizer.ggml.eos_token_id": "7", "tokenizer.ggml.padding_token_id": "6",
		"tokenizer.ggml.bos_token_id": "6", "tokenizer.ggml.add_bos_token": "false", "tokenizer.chat_template": `"TEMPLATE"`,
		"tokenizer.ggml.model": `"gpt2"`} {
		if m[k] != w {
			t.Errorf("%s = %s, want %s", k, m[k], w)
		}
	}
	// Special ids come from text_config when the root lacks them.
	cfg = map[string]any{"vocab_size": 10, "text_config": map[string]any{"eos_token_id": 7}}
	v, err = loadTok(t, tokDir(t, tinyTokenizer(qwen2Regex, nil), nil, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if m := kvMap(v.kvs()); m["tokenizer.ggml.eos_token_id"] != "7" || m["tokenizer.chat_template"] != "" {
		t.Errorf("text_config eos: %v", m)
	}
}

func TestChatTemplateSources(t *testing.T) {
	// tokenizer_config.json without chat_template: chat_template.jinja.
	dir := tokDir(t, tinyTokenizer(qwen2Regex, nil), map[string]any{"eos_token": "<|im_end|>"}, nil)
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("JINJA"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := loadTok(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if m := kvMap(v.kvs()); m["tokenizer.chat_template"] != `"JINJA"` {
		t.Errorf("template %v", m["tokenizer.chat_template"])
	}
	// tokenizer_config's own template wins over the file.
	writeJSON(t, dir, "tokenizer_config.json", map[string]any{"chat_template": "CONFIG"})
	v, _ = loadTok(t, dir)
	if m := kvMap(v.kvs()); m["tokenizer.chat_template"] != `"CONFIG"` {
		t.Errorf("template %v", m["tokenizer.chat_template"])
	}
	// Named templates.
	writeJSON(t, dir, "tokenizer_config.json", map[string]any{"chat_template": []any{
		map[string]any{"name": "default", "template": "D"}, map[string]any{"name": "tool use", "template": "T"}}})
	v, _ = loadTok(t, dir)
	m := kvMap(v.kvs())
	if m["tokenizer.chat_template"] != `"D"` || m["tokenizer.chat_template.tool_use"] != `"T"` || m["tokenizer.chat_templates"] != `[string×1: "tool_use"]` {
		t.Errorf("named templates: %v", m)
	}
	// No tokenizer_config.json at all: no template even with a .jinja file (SpecialVocab returns early).
	os.Remove(filepath.Join(dir, "tokenizer_config.json"))
	v, _ = loadTok(t, dir)
	if _, ok := kvMap(v.kvs())["tokenizer.chat_template"]; ok {
		t.Error("template written without tokenizer_config.json")
	}
}

func FuzzTokenizerJSON(f *testing.F) {
	for _, tok := range []map[string]any{tinyTokenizer(qwen2Regex, nil), tinyTokenizer(qwen35Regex, []any{[]any{"a", "b"}})} {
		b, _ := jsonMarshal(tok)
		f.Add(b)
	}
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":-1},"merges":[["a"]]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tj, err := parseTokenizerJSON(data, "tokenizer.json")
		if err != nil {
			return
		}
		_, _ = preTokenizerName(tj.PreTokenizer, "tokenizer.json")
		_, _ = mergeList(tj.Model.Merges, "tokenizer.json")
		tokens, types, err := buildVocab(tj, 64, "tokenizer.json")
		if err == nil && (len(tokens) != 64 || len(types) != 64) {
			t.Fatalf("vocab of %d/%d entries", len(tokens), len(types))
		}
	})
}
