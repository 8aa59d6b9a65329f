package tokenizer

// The Split pre-tokenizer regexes of Qwen's tokenizer.json files, as the JSON stores them (after JSON
// unescaping), which the scanner in pretok.go implements. llama.cpp's src/llama-vocab.cpp quotes them as the
// "original regex from tokenizer.json" of LLAMA_VOCAB_PRE_TYPE_QWEN2 and LLAMA_VOCAB_PRE_TYPE_QWEN35 and
// uses case-expanded spellings of the same expressions (RegexQwen2CaseExpanded, RegexQwen35CaseExpanded).
// The sha256 of the first two are the 1ff7f410… and 00431aed… that Ollama's converter recognizes.
const (
	// RegexQwen2 is the regex of Qwen2, Qwen2.5, Qwen3 and Qwen3-MoE (tokenizer.ggml.pre "qwen2").
	RegexQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// RegexQwen35 is Qwen3.5's (tokenizer.ggml.pre "qwen35"): combining marks \p{M} join the letter runs and
	// leave the punctuation class (transformers models/qwen3_5/tokenization_qwen3_5.py PRETOKENIZE_REGEX).
	RegexQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

	RegexQwen2CaseExpanded  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	RegexQwen35CaseExpanded = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// PreForRegex returns the tokenizer.ggml.pre value of a tokenizer.json Split regex: "qwen2", "qwen35", or ""
// for a regex this package does not implement.
func PreForRegex(regex string) string {
	switch regex {
	case RegexQwen2, RegexQwen2CaseExpanded:
		return "qwen2"
	case RegexQwen35, RegexQwen35CaseExpanded:
		return "qwen35"
	}
	return ""
}
