package tokenizer

import (
	"fmt"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Tokenizer is a byte-level BPE tokenizer built from a checked Vocab. It is immutable and safe for
// concurrent use.
type Tokenizer struct {
	file   string
	pre    string
	marks  bool // Qwen3.5 pre-tokenizer
	nfc    bool
	tokens []string
	types  []Type

	byteID [256]int32 // the token of each single byte, or noSymbol
	// noSymbol (= Len()) stands for a byte the vocabulary has no token for: it never merges and makes no
	// token; missingBytes says whether there is any.
	noSymbol     int32
	missingBytes bool
	merges       pairTable
	tokLen       []int32 // bytes each token stands for (its characters, one per byte, for byte-level tokens)
	maxLen       int     // the longest token BPE can produce, in bytes
	maxTok       int     // MaxBytesPerToken

	all, userOnly *matcher // special tokens split out of text: all of them, or only user-defined ones

	pieces []string // every token rendered (see buildPieces)

	bos, eos       int32
	eosList        []int32
	addBOS, addEOS bool
}

// FromGGUF reads the tokenizer.ggml.* keys of a GGUF file and builds its tokenizer. A file without
// tokenizer.ggml.pre gets the pre-tokenizer of its architecture (qwen2/qwen3/qwen3moe: "qwen2";
// qwen35/qwen35moe/qwen3next: "qwen35"), the regex Ollama's engine hard-codes for them.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	c := checker{file: f.Name}
	v := Vocab{File: f.Name, BOS: noToken, EOS: noToken}
	var err error
	if v.Model, err = ggufString(f, c, KeyModel, true); err != nil {
		return nil, err
	}
	if v.Pre, err = ggufString(f, c, KeyPre, false); err != nil {
		return nil, err
	}
	if v.Pre == "" {
		switch f.Architecture() {
		case "qwen2", "qwen3", "qwen3moe":
			v.Pre = "qwen2"
		case "qwen35", "qwen35moe", "qwen3next":
			v.Pre = "qwen35"
		default:
			return nil, c.unsupported(KeyPre, "missing, and architecture %q has no default", f.Architecture())
		}
	}
	if v.Tokens, err = ggufStrings(f, c, KeyTokens, true); err != nil {
		return nil, err
	}
	if v.Merges, err = ggufStrings(f, c, KeyMerges, true); err != nil {
		return nil, err
	}
	if val, ok := f.KV(KeyTypes); ok {
		a, ok := val.V.(gguf.Array)
		types, ok2 := a.Values.([]int32)
		if !ok || !ok2 {
			return nil, c.bad(KeyTypes, "is %s, want an array of int32", describe(val))
		}
		v.Types = make([]Type, len(types))
		for i, typ := range types {
			if typ < 0 || typ > int32(Byte) {
				return nil, c.bad(KeyTypes, "token %d has type %d (known: 0-6)", i, typ)
			}
			v.Types[i] = Type(typ)
		}
	}
	for _, k := range []struct {
		key string
		id  *int
	}{{KeyBOS, &v.BOS}, {KeyEOS, &v.EOS}} {
		val, ok := f.KV(k.key)
		if !ok {
			continue
		}
		u, ok := val.AsUint64()
		if !ok {
			return nil, c.bad(k.key, "is %s, want a non-negative integer", describe(val))
		}
		if u < MaxTokens {
			*k.id = int(u)
		}
	}
	if val, ok := f.KV(KeyEOSList); ok {
		a, ok := val.V.(gguf.Array)
		if !ok || a.Len() > MaxTokens {
			return nil, c.bad(KeyEOSList, "is %s, want an array of token ids", describe(val))
		}
		for i := range a.Len() {
			u, ok := gguf.Value{Type: a.Elem, V: arrayElem(a, i)}.AsUint64()
			if !ok {
				return nil, c.bad(KeyEOSList, "element %d is not a token id", i)
			}
			if u < MaxTokens {
				v.EOSList = append(v.EOSList, int(u))
			}
		}
	}
	for _, k := range []struct {
		key  string
		flag *bool
	}{{KeyAddBOS, &v.AddBOS}, {KeyAddEOS, &v.AddEOS}} {
		val, ok := f.KV(k.key)
		if !ok {
			continue
		}
		b, ok := val.V.(bool)
		if !ok {
			return nil, c.bad(k.key, "is %s, want a bool", describe(val))
		}
		*k.flag = b
	}
	return New(v)
}

func ggufString(f *gguf.File, c checker, key string, required bool) (string, error) {
	val, ok := f.KV(key)
	if !ok {
		if required {
			return "", c.bad(key, "missing")
		}
		return "", nil
	}
	s, ok := val.V.(string)
	if !ok {
		return "", c.bad(key, "is %s, want a string", describe(val))
	}
	return s, nil
}

func ggufStrings(f *gguf.File, c checker, key string, required bool) ([]string, error) {
	val, ok := f.KV(key)
	if !ok {
		if required {
			return nil, c.bad(key, "missing")
		}
		return nil, nil
	}
	a, ok := val.V.(gguf.Array)
	s, ok2 := a.Values.([]string)
	if !ok || !ok2 {
		return nil, c.bad(key, "is %s, want an array of strings", describe(val))
	}
	return s, nil
}

func describe(v gguf.Value) string {
	if a, ok := v.V.(gguf.Array); ok {
		return fmt.Sprintf("an array of %s", a.Elem)
	}
	return "a " + v.Type.String()
}

func arrayElem(a gguf.Array, i int) any {
	switch v := a.Values.(type) {
	case []uint8:
		return v[i]
	case []int8:
		return v[i]
	case []uint16:
		return v[i]
	case []int16:
		return v[i]
	case []uint32:
		return v[i]
	case []int32:
		return v[i]
	case []uint64:
		return v[i]
	case []int64:
		return v[i]
	}
	return nil
}

// Len is the number of tokens.
func (t *Tokenizer) Len() int { return len(t.tokens) }

// Pre is the pre-tokenizer name (tokenizer.ggml.pre, or the architecture's default).
func (t *Tokenizer) Pre() string { return t.pre }

// Token is the text of token id as the vocabulary spells it (byte-level characters for normal tokens).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Type is the type of token id (tokenizer.ggml.token_type; Normal when the file has none).
//
// llama.cpp also makes control tokens of tokens whose text it knows as an end-of-generation or
// fill-in-the-middle marker, whatever their type: on Qwen3's vocabulary that turns the ordinary BPE token
// "</s>" into a special token ("a</s>b" → a, </s>, b, where Hugging Face gives a, </, s, >b). This package
// keeps the file's types, as Hugging Face does.
func (t *Tokenizer) Type(id int32) Type {
	if id < 0 || int(id) >= len(t.types) {
		return Undefined
	}
	return t.types[id]
}

// MaxBytesPerToken bounds the bytes of text one token stands for, so that text longer than n times this
// makes more than n tokens: four times the longest token BPE can produce (NFC shortens text by at most a
// factor of three: a Hangul syllable composed from three jamo) or the longest special token. (A vocabulary
// without a token for some byte makes no token for it, so there the bound does not hold.)
func (t *Tokenizer) MaxBytesPerToken() int { return t.maxTok }

// BOS is the begin-of-sequence token, -1 when the vocabulary has none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS lists the end-of-sequence tokens (tokenizer.ggml.eos_token_id first, then eos_token_ids).
func (t *Tokenizer) EOS() []int32 { return append([]int32(nil), t.eosList...) }
