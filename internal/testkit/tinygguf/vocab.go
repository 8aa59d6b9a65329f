package tinygguf

import "github.com/phonellm/phonellm/internal/tokenizer/bytelevel"

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	Normal      = 1
	Control     = 3
	UserDefined = 4
)

// Vocab is a byte-level BPE vocabulary as GGUF stores it.
type Vocab struct {
	Tokens []string
	Types  []int32
	Merges []string
}

// ID returns the id of a token text, or -1.
func (v Vocab) ID(text string) int {
	for i, t := range v.Tokens {
		if t == text {
			return i
		}
	}
	return -1
}

// ByteVocab is the 256 byte symbols (id = byte value), then one token per merge (its left and right parts
// joined, in the byte-level alphabet: " t" is written "Ġt"), then control tokens, then user-defined tokens.
func ByteVocab(merges [][2]string, control, user []string) Vocab {
	var v Vocab
	bu := bytelevel.Rune
	for b := range 256 {
		v.Tokens = append(v.Tokens, string(bu[b]))
		v.Types = append(v.Types, Normal)
	}
	for _, m := range merges {
		v.Merges = append(v.Merges, m[0]+" "+m[1])
		v.Tokens = append(v.Tokens, m[0]+m[1])
		v.Types = append(v.Types, Normal)
	}
	for _, s := range control {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, Control)
	}
	for _, s := range user {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, UserDefined)
	}
	return v
}

// qwenControl are Qwen's control tokens, which every vocabulary here has after its merges.
var qwenControl = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// DefaultVocab is the vocabulary of a zero Spec: bytes, seven merges, Qwen's three control tokens and
// <think>/</think> as user-defined tokens.
func DefaultVocab() Vocab {
	return ByteVocab([][2]string{{"h", "e"}, {"l", "l"}, {"Ġ", "w"}, {"o", "r"}, {"i", "s"}, {"Ġ", "t"}, {"Ġt", "he"}},
		qwenControl, []string{"<think>", "</think>"})
}

// MinimalVocab is 260 tokens: bytes, the one merge "Ġ t" (id 256) and the three control tokens
// <|endoftext|> (257), <|im_start|> (258), <|im_end|> (259).
func MinimalVocab() Vocab { return ByteVocab([][2]string{{"Ġ", "t"}}, qwenControl, nil) }
