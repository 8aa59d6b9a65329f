package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

// Type is a token's type: tokenizer.ggml.token_type (llama.cpp llama_token_type, gguf-py TokenType).
type Type uint8

// Token types.
const (
	Undefined   Type = 0
	Normal      Type = 1
	Unknown     Type = 2
	Control     Type = 3
	UserDefined Type = 4
	Unused      Type = 5
	Byte        Type = 6
)

// Bounds on vocabularies read from files. Real ones: Qwen3.5 has 248k tokens and ~247k merges (the largest
// vocabularies, Gemma's, 262k tokens), the longest tokens are a few hundred bytes, and special tokens take a
// few KiB in all. Building a tokenizer takes about 100 bytes per token and 32 per merge.
const (
	MaxTokens       = 1 << 20 // tokens in a vocabulary
	MaxMerges       = 1 << 20
	MaxTokenBytes   = 1 << 16 // bytes of one token string
	MaxSpecialBytes = 1 << 20 // bytes of all control, user-defined and unknown tokens together
)

// GGUF keys this package reads (gguf-py constants.py Keys.Tokenizer).
const (
	KeyModel     = "tokenizer.ggml.model"
	KeyPre       = "tokenizer.ggml.pre"
	KeyTokens    = "tokenizer.ggml.tokens"
	KeyTypes     = "tokenizer.ggml.token_type"
	KeyMerges    = "tokenizer.ggml.merges"
	KeyBOS       = "tokenizer.ggml.bos_token_id"
	KeyEOS       = "tokenizer.ggml.eos_token_id"
	KeyEOSList   = "tokenizer.ggml.eos_token_ids" // Ollama's converter: more end-of-sequence ids
	KeyAddBOS    = "tokenizer.ggml.add_bos_token"
	KeyAddEOS    = "tokenizer.ggml.add_eos_token"
	modelGPT2    = "gpt2"
	noToken      = -1
	bytesSymbols = 256
)

// Vocab is a byte-level BPE vocabulary as GGUF stores it. Build one from a file with FromGGUF, or fill it
// in directly (tests, the converter's check of what it is about to write).
type Vocab struct {
	// File names the source in errors.
	File string
	// Model is tokenizer.ggml.model; only "gpt2" (byte-level BPE) is supported.
	Model string
	// Pre is tokenizer.ggml.pre, the pre-tokenizer: "qwen2" (Qwen2, Qwen2.5, Qwen3, Qwen3-MoE, and
	// "deepseek-r1-qwen" for the distilled models) or "qwen35" (Qwen3.5).
	Pre    string
	Tokens []string
	// Types has one entry per token; nil means every token is Normal.
	Types []Type
	// Merges are "left right" pairs, highest priority first.
	Merges []string
	// BOS and EOS are the begin/end-of-sequence ids, -1 when absent; EOSList holds further end-of-sequence
	// ids. AddBOS and AddEOS ask Encode with AddSpecial to add them.
	BOS, EOS       int
	EOSList        []int
	AddBOS, AddEOS bool
}

// preTokenizer describes one supported tokenizer.ggml.pre value.
type preTokenizer struct {
	marks bool // Qwen3.5's regex: \p{M} joins letter runs
	nfc   bool // the tokenizer.json this comes from normalizes with NFC
}

// preTokenizers maps tokenizer.ggml.pre to the Split regex it stands for (llama.cpp src/llama-vocab.cpp,
// LLAMA_VOCAB_PRE_TYPE_QWEN2 and _QWEN35, which cite the tokenizer.json regexes RegexQwen2 and RegexQwen35)
// and to whether the model's tokenizer.json normalizes with NFC. Qwen's do; llama.cpp never normalizes, so
// on text that is not in NFC the two differ and this package follows Hugging Face tokenizers, the model's
// own tokenizer. For DeepSeek-R1-Distill-Qwen, whose GGUFs carry "deepseek-r1-qwen", it follows llama.cpp.
var preTokenizers = map[string]preTokenizer{
	"qwen2":            {nfc: true},
	"deepseek-r1-qwen": {},
	"qwen35":           {marks: true, nfc: true},
}

// checker builds the errors of one vocabulary.
type checker struct{ file string }

func (c checker) bad(key, format string, a ...any) error {
	return &Error{File: c.file, Key: key, Msg: fmt.Sprintf(format, a...)}
}

func (c checker) unsupported(key, format string, a ...any) error {
	return &Error{File: c.file, Key: key, Msg: fmt.Sprintf(format, a...), Unsupported: true}
}

// New checks v and builds its tokenizer. Every refusal is an *Error naming the key: an unsupported model or
// pre-tokenizer; a vocabulary that is empty, too large, has empty, oversized, non-UTF-8 or duplicate tokens,
// a token_type array of another length or with unknown values, or merges that are malformed, repeated or
// name tokens it does not have.
func New(v Vocab) (*Tokenizer, error) {
	c := checker{file: v.File}
	if v.Model != modelGPT2 {
		return nil, c.unsupported(KeyModel, "%q (only %q, byte-level BPE)", v.Model, modelGPT2)
	}
	pre, ok := preTokenizers[v.Pre]
	if !ok {
		return nil, c.unsupported(KeyPre, "%q (supported: qwen2, qwen35, deepseek-r1-qwen)", v.Pre)
	}
	n := len(v.Tokens)
	switch {
	case n == 0:
		return nil, c.bad(KeyTokens, "empty vocabulary")
	case n > MaxTokens:
		return nil, c.bad(KeyTokens, "%d tokens, more than %d", n, MaxTokens)
	case v.Types != nil && len(v.Types) != n:
		return nil, c.bad(KeyTypes, "%d entries for %d tokens", len(v.Types), n)
	case len(v.Merges) > MaxMerges:
		return nil, c.bad(KeyMerges, "%d merges, more than %d", len(v.Merges), MaxMerges)
	}
	t := &Tokenizer{
		file:   v.File,
		pre:    v.Pre,
		marks:  pre.marks,
		nfc:    pre.nfc,
		tokens: v.Tokens,
		types:  make([]Type, n),
		bos:    noToken,
		eos:    noToken,
	}
	// Check every token before building anything that grows with the vocabulary.
	specialBytes := 0
	for i, s := range v.Tokens {
		switch {
		case s == "":
			return nil, c.bad(KeyTokens, "token %d is empty", i)
		case len(s) > MaxTokenBytes:
			return nil, c.bad(KeyTokens, "token %d is %d bytes long, more than %d", i, len(s), MaxTokenBytes)
		case !utf8.ValidString(s):
			return nil, c.bad(KeyTokens, "token %d is not valid UTF-8", i)
		}
		typ := Normal
		if v.Types != nil {
			typ = v.Types[i]
			if typ > Byte {
				return nil, c.bad(KeyTypes, "token %d has type %d (known: 0-6)", i, typ)
			}
		}
		t.types[i] = typ
		if typ.special() {
			if specialBytes += len(s); specialBytes > MaxSpecialBytes {
				return nil, c.bad(KeyTokens, "control and user-defined tokens take more than %d bytes", MaxSpecialBytes)
			}
		}
	}
	ids := make(map[string]int32, n)
	for i, s := range v.Tokens {
		if j, dup := ids[s]; dup {
			return nil, c.bad(KeyTokens, "token %q has ids %d and %d", clip(s), j, i)
		}
		ids[s] = int32(i)
	}
	// A byte without a token (no real vocabulary lacks one) becomes a symbol of its own that no merge joins
	// and that makes no token, as in llama.cpp, whose BPE starts from the byte-level characters and drops
	// those that are not tokens at the end. (Hugging Face drops them first, letting their neighbours merge.)
	t.noSymbol = int32(n)
	for b := range bytesSymbols {
		id, ok := ids[string(bytelevel.Rune[b])]
		if !ok {
			id, t.missingBytes = t.noSymbol, true
		}
		t.byteID[b] = id
	}
	if err := t.buildMerges(c, v.Merges, ids); err != nil {
		return nil, err
	}
	t.setSpecialIDs(v)
	if v.AddBOS && t.bos == noToken {
		return nil, c.bad(KeyAddBOS, "true, but %s is absent or outside the vocabulary", KeyBOS)
	}
	if v.AddEOS && t.eos == noToken {
		return nil, c.bad(KeyAddEOS, "true, but %s is absent or outside the vocabulary", KeyEOS)
	}
	t.addBOS, t.addEOS = v.AddBOS, v.AddEOS
	t.maxTok = 4 * t.maxLen
	for i, typ := range t.types {
		if typ.special() {
			t.maxTok = max(t.maxTok, len(t.tokens[i]))
		}
	}
	t.buildPieces()
	t.all = newMatcher(t, func(typ Type) bool { return typ.special() })
	t.userOnly = newMatcher(t, func(typ Type) bool { return typ == UserDefined })
	return t, nil
}

// special reports whether tokens of this type are split out of text before pre-tokenization (llama.cpp's
// cache_special_tokens: control, user-defined and unknown).
func (typ Type) special() bool { return typ == Control || typ == UserDefined || typ == Unknown }

// buildMerges parses "left right" merges (split at the first space after the first byte, as llama.cpp
// does) into the pair table, checking that left, right and left+right are tokens and that no pair repeats
// (Hugging Face keeps the last of two equal pairs, llama.cpp the first: a vocabulary with both is refused).
func (t *Tokenizer) buildMerges(c checker, merges []string, ids map[string]int32) error {
	t.merges = newPairTable(len(merges))
	t.tokLen = make([]int32, len(t.tokens)+1) // + noSymbol, one byte
	for i, s := range t.tokens {
		t.tokLen[i] = int32(utf8.RuneCountInString(s))
	}
	t.tokLen[len(t.tokens)] = 1
	t.maxLen = 1
	for rank, m := range merges {
		sp := strings.IndexByte(m[min(1, len(m)):], ' ')
		if sp < 0 {
			return c.bad(KeyMerges, "merge %d %q is not two tokens separated by a space", rank, clip(m))
		}
		sp += min(1, len(m))
		left, right := m[:sp], m[sp+1:]
		a, okA := ids[left]
		b, okB := ids[right]
		r, okR := ids[left+right]
		switch {
		case !okA:
			return c.bad(KeyMerges, "merge %d %q: %q is not a token", rank, clip(m), clip(left))
		case !okB:
			return c.bad(KeyMerges, "merge %d %q: %q is not a token", rank, clip(m), clip(right))
		case !okR:
			return c.bad(KeyMerges, "merge %d %q: the merged token %q is not in the vocabulary", rank, clip(m), clip(left+right))
		}
		if !t.merges.insert(a, b, int32(rank), r) {
			return c.bad(KeyMerges, "merge %d %q repeats an earlier merge", rank, clip(m))
		}
		t.maxLen = max(t.maxLen, int(t.tokLen[r]))
	}
	return nil
}

// setSpecialIDs takes the BOS/EOS ids that name tokens of the vocabulary; others count as absent (llama.cpp
// warns and ignores them).
func (t *Tokenizer) setSpecialIDs(v Vocab) {
	in := func(id int) bool { return id >= 0 && id < len(t.tokens) }
	if in(v.BOS) {
		t.bos = int32(v.BOS)
	}
	if in(v.EOS) {
		t.eos = int32(v.EOS)
		t.eosList = append(t.eosList, int32(v.EOS))
	}
	for _, id := range v.EOSList {
		if in(id) && id != v.EOS {
			t.eosList = append(t.eosList, int32(id))
		}
	}
}

// clip shortens s for an error message.
func clip(s string) string {
	const n = 40
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
