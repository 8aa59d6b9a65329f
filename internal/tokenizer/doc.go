// Package tokenizer is the runtime's byte-level BPE tokenizer for Qwen models (Qwen2, Qwen2.5, Qwen3,
// Qwen3-MoE, Qwen3.5): text to token ids and back, exactly as Hugging Face tokenizers does with the model's
// tokenizer.json and as llama.cpp does with its GGUF, and bounded for text from strangers.
//
// A Tokenizer is built from the tokenizer.ggml.* keys of a GGUF file (FromGGUF) or a Vocab, which New
// checks first: vocabularies come from files downloaded from strangers, and one that is empty, oversized,
// has empty or duplicate tokens, a token_type array of the wrong length or merges naming unknown tokens is
// refused with an *Error naming the key, never tokenized.
//
// Encode runs the pipeline of the tokenizer.json of Qwen models:
//
//  1. special tokens are split out of the text (control tokens when Options.ParseSpecial is set,
//     user-defined tokens always), leftmost-longest, in one linear scan (special.go);
//  2. the text between them is normalized to NFC (nfc.go);
//  3. split into pieces by the pre-tokenizer regex, implemented as a hand-written scanner that is linear in
//     the text (pretok.go; RegexQwen2, RegexQwen35);
//  4. each piece's bytes become byte-level symbols (package bytelevel) and are merged by rank, the leftmost
//     pair first among pairs of equal rank (bpe.go).
//
// Options bound the input bytes and the output tokens (a *LimitError names the bound), and Encode stops with
// the context's error when it ends. Time is O(n log n) and memory O(n) with a small constant, also for a
// single word of many megabytes.
//
// Decode and Piece turn ids back into bytes, byte-level characters decoded; a piece may end inside a UTF-8
// character (engine.TextStream holds such bytes back).
package tokenizer
