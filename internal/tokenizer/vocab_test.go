package tokenizer

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// TestHostileVocabularies feeds New the vocabularies a file from a stranger may carry; each must be
// refused with an input error naming the key.
func TestHostileVocabularies(t *testing.T) {
	base := func() Vocab {
		return synthVocab([][2]string{{"a", "b"}, {"ab", "c"}}, []string{"<|im_end|>"}, []Type{Control})
	}
	cases := []struct {
		name, key, msg string
		edit           func(*Vocab)
	}{
		{"model", KeyModel, `"llama"`, func(v *Vocab) { v.Model = "llama" }},
		{"pre", KeyPre, `"llama3"`, func(v *Vocab) { v.Pre = "llama3" }},
		{"empty", KeyTokens, "empty vocabulary", func(v *Vocab) { v.Tokens, v.Types, v.Merges = nil, nil, nil }},
		{"empty token", KeyTokens, "token 3 is empty", func(v *Vocab) { v.Tokens[3] = "" }},
		{"all empty", KeyTokens, "token 0 is empty", func(v *Vocab) {
			v.Tokens = make([]string, 1<<20)
			v.Types = nil
		}},
		{"duplicate", KeyTokens, `has ids 97 and 256`, func(v *Vocab) { v.Tokens[256] = v.Tokens[97] }},
		{"long token", KeyTokens, "more than 65536", func(v *Vocab) { v.Tokens[300-44] = strings.Repeat("x", MaxTokenBytes+1) }},
		{"not utf-8", KeyTokens, "not valid UTF-8", func(v *Vocab) { v.Tokens[256] = "a\xff" }},
		{"types length", KeyTypes, "257 entries for 259 tokens", func(v *Vocab) { v.Types = v.Types[:257] }},
		{"type value", KeyTypes, "type 9", func(v *Vocab) { v.Types[5] = 9 }},
		{"merge format", KeyMerges, "not two tokens", func(v *Vocab) { v.Merges[0] = "ab" }},
		{"merge unknown", KeyMerges, `"zz" is not a token`, func(v *Vocab) { v.Merges[0] = "a zz" }},
		{"merge result", KeyMerges, "merged token", func(v *Vocab) { v.Merges[0] = "b a" }},
		{"merge repeated", KeyMerges, "repeats", func(v *Vocab) { v.Merges[1] = v.Merges[0] }},
		{"add bos", KeyAddBOS, "absent", func(v *Vocab) { v.AddBOS, v.BOS = true, 1<<30 }},
		{"specials", KeyTokens, "take more than", func(v *Vocab) {
			for i := range 40 {
				v.Tokens = append(v.Tokens, strings.Repeat(string(rune('A'+i)), 30000))
				v.Types = append(v.Types, UserDefined)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := base()
			c.edit(&v)
			_, err := New(v)
			var te *Error
			if !errors.As(err, &te) || te.Key != c.key || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("New: %v; want an *Error on %s saying %q", err, c.key, c.msg)
			}
			if !pipeline.IsInputError(err) {
				t.Errorf("%v is not an input error", err)
			}
		})
	}
	if _, err := New(base()); err != nil {
		t.Fatalf("the base vocabulary: %v", err)
	}
}

func indexOf(s []string, x string) int {
	for i, v := range s {
		if v == x {
			return i
		}
	}
	return -1
}

// TestAllEmptyVocabularyIsCheap: issue 14's all-empty vocabulary took 2.5 GB in the engine's tokenizer; it
// is refused at the first token, allocating next to nothing.
func TestAllEmptyVocabularyIsCheap(t *testing.T) {
	v := Vocab{Model: "gpt2", Pre: "qwen2", Tokens: make([]string, MaxTokens), Types: make([]Type, MaxTokens)}
	for i := range v.Types {
		v.Types[i] = Control
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := New(v)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("an all-empty vocabulary was accepted")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("refusing it allocated %d MB", grew>>20)
	}
}

// TestFromGGUF reads a vocabulary written to a GGUF file, and refuses wrongly typed keys by name.
func TestFromGGUF(t *testing.T) {
	v := synthVocab([][2]string{{"a", "b"}}, []string{"<|im_start|>", "<|im_end|>"}, []Type{Control, Control})
	types := make([]int32, len(v.Types))
	for i, typ := range v.Types {
		types[i] = int32(typ)
	}
	kvs := func(edit func(map[string]gguf.Value)) []gguf.KV {
		m := map[string]gguf.Value{
			"general.architecture": gguf.String("qwen3"),
			KeyModel:               gguf.String("gpt2"),
			KeyPre:                 gguf.String("qwen2"),
			KeyTokens:              gguf.Strings(v.Tokens),
			KeyTypes:               gguf.Int32s(types),
			KeyMerges:              gguf.Strings(v.Merges),
			KeyBOS:                 gguf.Uint32(uint32(len(v.Tokens) - 2)),
			KeyEOS:                 gguf.Uint32(uint32(len(v.Tokens) - 1)),
			KeyAddBOS:              gguf.Bool(false),
		}
		if edit != nil {
			edit(m)
		}
		var out []gguf.KV
		for _, k := range []string{"general.architecture", KeyModel, KeyPre, KeyTokens, KeyTypes, KeyMerges, KeyBOS, KeyEOS, KeyAddBOS} {
			if val, ok := m[k]; ok {
				out = append(out, gguf.KV{Key: k, Value: val})
			}
		}
		return out
	}
	open := func(kv []gguf.KV) (*Tokenizer, error) {
		path := filepath.Join(t.TempDir(), "v.gguf")
		writeGGUF(t, path, kv)
		f, err := gguf.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return FromGGUF(f)
	}
	tk, err := open(kvs(nil))
	if err != nil {
		t.Fatal(err)
	}
	if tk.Len() != len(v.Tokens) || tk.BOS() != int32(len(v.Tokens)-2) || len(tk.EOS()) != 1 || tk.Type(tk.EOS()[0]) != Control {
		t.Fatalf("read %d tokens, BOS %d, EOS %v", tk.Len(), tk.BOS(), tk.EOS())
	}
	// Without tokenizer.ggml.pre the architecture decides.
	tk, err = open(kvs(func(m map[string]gguf.Value) { delete(m, KeyPre) }))
	if err != nil || tk.Pre() != "qwen2" {
		t.Fatalf("no pre: %v, %v", tk, err)
	}
	for _, c := range []struct {
		key  string
		edit func(map[string]gguf.Value)
	}{
		{KeyTokens, func(m map[string]gguf.Value) { m[KeyTokens] = gguf.Int32s(types) }},
		{KeyTokens, func(m map[string]gguf.Value) { delete(m, KeyTokens) }},
		{KeyMerges, func(m map[string]gguf.Value) { delete(m, KeyMerges) }},
		{KeyTypes, func(m map[string]gguf.Value) { m[KeyTypes] = gguf.Float32s(make([]float32, len(types))) }},
		{KeyTypes, func(m map[string]gguf.Value) { m[KeyTypes] = gguf.Int32s(types[:10]) }},
		{KeyTypes, func(m map[string]gguf.Value) {
			bad := append([]int32(nil), types...)
			bad[0] = -1
			m[KeyTypes] = gguf.Int32s(bad)
		}},
		{KeyBOS, func(m map[string]gguf.Value) { m[KeyBOS] = gguf.String("1") }},
		{KeyAddBOS, func(m map[string]gguf.Value) { m[KeyAddBOS] = gguf.Uint8(1) }},
		{KeyModel, func(m map[string]gguf.Value) { m[KeyModel] = gguf.Uint32(2) }},
		{KeyPre, func(m map[string]gguf.Value) {
			delete(m, KeyPre)
			m["general.architecture"] = gguf.String("llama")
		}},
	} {
		_, err := open(kvs(c.edit))
		var te *Error
		if !errors.As(err, &te) || te.Key != c.key {
			t.Errorf("%s: %v; want an *Error on that key", c.key, err)
		}
	}
}

func writeGGUF(t testing.TB, path string, kvs []gguf.KV) {
	t.Helper()
	var buf bytes.Buffer
	w := gguf.NewWriter()
	for _, kv := range kvs {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteHeader(&buf); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
