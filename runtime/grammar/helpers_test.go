package grammar

import "github.com/phonellm/phonellm/runtime/engine"

// byteVocab is a vocabulary of the 256 bytes (token id = byte), then the
// extra pieces, then one end-of-generation token.
func byteVocab(extra ...string) *engine.Vocabulary {
	var toks []engine.VocabToken
	for b := range 256 {
		toks = append(toks, engine.VocabToken{Piece: string([]byte{byte(b)}), Text: string([]byte{byte(b)})})
	}
	for _, e := range extra {
		toks = append(toks, engine.VocabToken{Piece: e, Text: e})
	}
	toks = append(toks, engine.VocabToken{Text: "<|im_end|>", EOG: true})
	return engine.NewVocabulary(toks)
}
