package tokenizer

import (
	"context"
	"math"
)

// Options of one Encode call. The zero value adds nothing, matches only user-defined tokens in the text and
// sets no limits.
type Options struct {
	// AddSpecial adds the BOS and EOS tokens the vocabulary asks for (tokenizer.ggml.add_bos_token /
	// add_eos_token; Qwen asks for neither).
	AddSpecial bool
	// ParseSpecial turns the text of control tokens (such as "<|im_start|>") into their ids. User-defined
	// tokens (Qwen's "<think>", "<tool_call>", …) are always matched, as llama.cpp and Hugging Face do.
	ParseSpecial bool
	// MaxInputBytes refuses longer text before any work (0: no limit).
	MaxInputBytes int
	// MaxTokens stops tokenization as soon as the text is known to make more tokens (0: no limit). A word is
	// refused before its merges when its length alone shows it would pass the limit (no token is longer
	// than the vocabulary's longest), so the work done stays proportional to the limit.
	MaxTokens int
}

// Encode tokenizes text as Hugging Face tokenizers does with the model's tokenizer.json (and llama.cpp with
// the GGUF, on text in NFC): special tokens are split out first, the text between them is normalized (NFC
// for Qwen), split by the pre-tokenizer, mapped to byte-level characters and merged by rank.
//
// It stops with ctx's error when ctx ends, and with a *LimitError when the text exceeds a bound of o. Time
// is O(n log n) in the length of the text and memory O(n). Text that is not valid UTF-8 is tokenized byte by
// byte where it is invalid.
func (t *Tokenizer) Encode(ctx context.Context, text string, o Options) ([]int32, error) {
	if o.MaxInputBytes > 0 && len(text) > o.MaxInputBytes {
		return nil, &LimitError{Limit: LimitInputBytes, Max: o.MaxInputBytes, Count: len(text)}
	}
	if len(text) > math.MaxInt32 {
		return nil, &LimitError{Limit: LimitInputBytes, Max: math.MaxInt32, Count: len(text)}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	size := min(len(text)/4+2, 1<<16)
	if o.MaxTokens > 0 {
		size = min(size, o.MaxTokens+2)
	}
	e := encoder{t: t, ctx: ctx, max: o.MaxTokens, out: make([]int32, 0, size)}
	if o.AddSpecial && t.addBOS {
		if err := e.emit(t.bos); err != nil {
			return nil, err
		}
	}
	m := t.userOnly
	if o.ParseSpecial {
		m = t.all
	}
	err := m.split(ctx, text, func(sp span) error {
		if sp.id >= 0 {
			return e.emit(sp.id)
		}
		return e.text(text[sp.start:sp.end])
	})
	if err != nil {
		return nil, err
	}
	if o.AddSpecial && t.addEOS {
		if err := e.emit(t.eos); err != nil {
			return nil, err
		}
	}
	return e.out, nil
}

// encoder is the state of one Encode call.
type encoder struct {
	t   *Tokenizer
	ctx context.Context
	max int
	out []int32
	sc  scratch
}

func (e *encoder) emit(id int32) error {
	if e.max > 0 && len(e.out)+1 > e.max {
		return &LimitError{Limit: LimitTokens, Max: e.max, Count: len(e.out) + 1}
	}
	e.out = append(e.out, id)
	return nil
}

// text tokenizes a span of text without special tokens.
func (e *encoder) text(s string) error {
	t := e.t
	if t.nfc {
		s = nfc(s)
	}
	p := newPretok(t.marks)
	done := 0
	for i := 0; i < len(s); {
		if i-done >= checkEvery {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			done = i
		}
		end := p.next(s, i)
		if e.max > 0 {
			// The word makes at least this many tokens.
			least := (end - i + t.maxLen - 1) / t.maxLen
			if len(e.out)+least > e.max {
				return &LimitError{Limit: LimitTokens, Max: e.max, Count: len(e.out) + least}
			}
		}
		var err error
		if e.out, err = t.bpe(e.ctx, s[i:end], &e.sc, e.out); err != nil {
			return err
		}
		if e.max > 0 && len(e.out) > e.max {
			return &LimitError{Limit: LimitTokens, Max: e.max, Count: len(e.out)}
		}
		i = end
	}
	return nil
}
