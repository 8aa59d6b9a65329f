package modelcheck

import (
	"fmt"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// vocabulary checks the tokenizer metadata against the embedding: every token id the tokenizer can produce
// must be a row of token_embd (ggml_get_rows asserts), and the per-token arrays must be as long as the token
// list (llama.cpp reads scores and types without bounds). The vocabulary's content (empty, duplicate or
// oversized tokens, malformed merges) is the tokenizer's to check: CheckFile builds it (internal/tokenizer).
func (c *checker) vocabulary(h *hparams) {
	if h.vocabRows == 0 {
		return // token_embd itself is broken, already reported
	}
	const (
		kModel  = "tokenizer.ggml.model"
		kTokens = "tokenizer.ggml.tokens"
		kTypes  = "tokenizer.ggml.token_type"
		kScores = "tokenizer.ggml.scores"
		kMerges = "tokenizer.ggml.merges"
	)
	if m, present, ok := c.str(kModel); ok && !present {
		c.keyf(kModel, "missing")
	} else if ok && m != "gpt2" {
		c.add(Problem{Key: kModel, Unsupported: true, Msg: fmt.Sprintf("%q: the engine runs byte-level BPE (gpt2) vocabularies, as Qwen's are", m)})
	}
	tokens, ok := c.array(kTokens, gguf.ValueString, true)
	if !ok {
		return
	}
	n := tokens.Len()
	switch {
	case n == 0:
		c.keyf(kTokens, "empty vocabulary")
		return
	case uint64(n) > h.vocabRows:
		c.keyf(kTokens, "%d tokens, more than the %d rows of token_embd.weight (a token id past the embedding cannot be looked up)", n, h.vocabRows)
		return
	}
	if types, ok := c.array(kTypes, gguf.ValueInt32, false); ok && types.Values != nil && types.Len() != n {
		c.keyf(kTypes, "%d entries for %d tokens", types.Len(), n)
	}
	if scores, ok := c.array(kScores, gguf.ValueFloat32, false); ok && scores.Values != nil && scores.Len() != n {
		c.keyf(kScores, "%d entries for %d tokens", scores.Len(), n)
	}
	c.array(kMerges, gguf.ValueString, true)
	for _, key := range []string{"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
		"tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.eot_token_id"} {
		if id, present, ok := c.u32(key, false, 0, uint64(1)<<32-1); ok && present && id >= uint64(n) {
			c.keyf(key, "%d is not a token id (the vocabulary has %d tokens)", id, n)
		}
	}
	if ids, ok := c.array("tokenizer.ggml.eos_token_ids", gguf.ValueInt32, false); ok && ids.Values != nil {
		for _, id := range ids.Values.([]int32) {
			if id < 0 || int(id) >= n {
				c.keyf("tokenizer.ggml.eos_token_ids", "%d is not a token id (the vocabulary has %d tokens)", id, n)
				break
			}
		}
	}
	for _, key := range []string{"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"} {
		c.boolean(key)
	}
	for _, key := range []string{"tokenizer.ggml.pre", "tokenizer.chat_template"} {
		c.str(key)
	}
}

// array reads an array key whose elements must be of type elem. An absent optional key returns ok with a zero
// Array.
func (c *checker) array(key string, elem gguf.ValueType, required bool) (gguf.Array, bool) {
	x, present, ok := c.value(key, gguf.ValueArray, required)
	if !ok || !present {
		return gguf.Array{}, ok
	}
	a := x.(gguf.Array)
	if a.Elem != elem {
		c.keyf(key, "is an array of %s, want %s", a.Elem, elem)
		return gguf.Array{}, false
	}
	return a, true
}
