package tokenizer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

// buildPieces renders every token once, as llama.cpp's token_to_piece cache does (with special = true):
//   - Normal: the bytes its byte-level characters stand for; a token with a character outside the table
//     is taken as its own UTF-8 text (Hugging Face's ByteLevel decoder does this per token);
//   - Control, Unknown, UserDefined: the token's text;
//   - Byte: the byte a "<0xXX>" token names;
//   - Unused, Undefined: nothing.
func (t *Tokenizer) buildPieces() {
	t.pieces = make([]string, len(t.tokens))
	var b strings.Builder
	for i, s := range t.tokens {
		switch t.types[i] {
		case Normal:
			b.Reset()
			ok := true
			for _, r := range s {
				c, in := bytelevel.Byte(r)
				if !in {
					ok = false
					break
				}
				b.WriteByte(c)
			}
			if ok {
				t.pieces[i] = b.String()
			} else {
				t.pieces[i] = s
			}
		case Control, Unknown, UserDefined:
			t.pieces[i] = s
		case Byte:
			if len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' {
				if v, err := strconv.ParseUint(s[3:5], 16, 8); err == nil {
					t.pieces[i] = string([]byte{byte(v)})
				}
			}
		}
	}
}

// Decode returns the bytes the tokens stand for, concatenated, with control tokens rendered as their text.
// Byte-level tokens may split a UTF-8 character, so a prefix of a token sequence can decode to text that
// ends in an incomplete character; the whole sequence of a tokenized text decodes to that text (in NFC for
// Qwen). An id outside the vocabulary is an error.
func (t *Tokenizer) Decode(ids []int32) (string, error) {
	n := 0
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.pieces) {
			return "", fmt.Errorf("tokenizer: token %d outside the vocabulary of %d", id, len(t.pieces))
		}
		n += len(t.pieces[id])
	}
	var b strings.Builder
	b.Grow(n)
	for _, id := range ids {
		b.WriteString(t.pieces[id])
	}
	return b.String(), nil
}

// Piece is the text a generated token shows in a chat (llama.cpp's token_to_piece with special = false):
// as in Decode, except that control and unknown tokens show nothing. It may be an incomplete UTF-8 sequence
// (engine.TextStream holds such bytes back until the character is complete). An id outside the vocabulary
// has no piece.
func (t *Tokenizer) Piece(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	if typ := t.types[id]; typ == Control || typ == Unknown {
		return ""
	}
	return t.pieces[id]
}
