package eval

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/phonellm/phonellm/runtime/engine"
)

// LogitCache is a LogitModel that computes the logits of each token sequence once with the model it wraps and
// replays them from a temporary file afterwards. Comparing many candidates against one reference on the same
// prompts (the sensitivity measurements of quantize auto) then runs the reference once. The file holds
// positions × vocabulary float32 values; memory holds an index of the sequences only.
type LogitCache struct {
	m     LogitModel
	f     *os.File
	vocab int
	index map[[32]byte]span
	end   int64
	buf   []byte
	row   []float32
}

type span struct {
	off int64
	n   int
}

// NewLogitCache wraps m; the cache file is created in dir ("" = the system's temporary folder) and removed by
// Close, which also closes m.
func NewLogitCache(m LogitModel, dir string) (*LogitCache, error) {
	f, err := os.CreateTemp(dir, ".phonellm-logits-*")
	if err != nil {
		return nil, fmt.Errorf("eval: logit cache: %w", err)
	}
	vocab := m.Info().VocabSize
	return &LogitCache{m: m, f: f, vocab: vocab, index: map[[32]byte]span{}, row: make([]float32, vocab)}, nil
}

// Info implements LogitModel.
func (c *LogitCache) Info() engine.ModelInfo { return c.m.Info() }

// Tokenize implements LogitModel.
func (c *LogitCache) Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error) {
	return c.m.Tokenize(ctx, text, addSpecial)
}

// ApplyChatTemplate implements LogitModel.
func (c *LogitCache) ApplyChatTemplate(ctx context.Context, ms []engine.Message, o engine.TemplateOptions) (string, error) {
	return c.m.ApplyChatTemplate(ctx, ms, o)
}

// Logits implements LogitModel: from the file when the same tokens were evaluated before, from the model
// (recording them) otherwise. A failed evaluation records nothing.
func (c *LogitCache) Logits(ctx context.Context, tokens []int32, fn func(pos int, logits []float32) error) error {
	key := tokensKey(tokens)
	if s, ok := c.index[key]; ok {
		return c.replay(ctx, s, fn)
	}
	start := c.end
	w := bufio.NewWriterSize(io.NewOffsetWriter(c.f, start), 1<<20)
	n := 0
	err := c.m.Logits(ctx, tokens, func(pos int, l []float32) error {
		if len(l) != c.vocab {
			return fmt.Errorf("eval: logit cache: %d logits at position %d, want %d", len(l), pos, c.vocab)
		}
		c.buf = c.buf[:0]
		for _, x := range l {
			c.buf = binary.LittleEndian.AppendUint32(c.buf, math.Float32bits(x))
		}
		if _, err := w.Write(c.buf); err != nil {
			return fmt.Errorf("eval: logit cache: %w", err)
		}
		n++
		return fn(pos, l)
	})
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	if n != len(tokens) {
		return fmt.Errorf("eval: logit cache: %d positions for %d tokens", n, len(tokens))
	}
	c.index[key] = span{off: start, n: n}
	c.end = start + int64(n)*int64(c.vocab)*4
	return nil
}

func (c *LogitCache) replay(ctx context.Context, s span, fn func(int, []float32) error) error {
	r := bufio.NewReaderSize(io.NewSectionReader(c.f, s.off, int64(s.n)*int64(c.vocab)*4), 1<<20)
	raw := make([]byte, 4*c.vocab)
	for pos := range s.n {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, raw); err != nil {
			return fmt.Errorf("eval: logit cache: %w", err)
		}
		for i := range c.row {
			c.row[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		if err := fn(pos, c.row); err != nil {
			return err
		}
	}
	return nil
}

// Close removes the cache file and closes the wrapped model.
func (c *LogitCache) Close() error {
	name := c.f.Name()
	err := errors.Join(c.f.Close(), os.Remove(name))
	return errors.Join(err, c.m.Close())
}

func tokensKey(tokens []int32) [32]byte {
	h := sha256.New()
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}
