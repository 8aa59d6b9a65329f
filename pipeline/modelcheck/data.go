package modelcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// maxVectorElems bounds the size of a tensor whose values CheckFile reads: norms, biases and gates are at
// most a few times the embedding width; anything larger is a weight matrix and is not read at load.
const maxVectorElems = 1 << 20

// CheckFile checks an opened GGUF: [Check] on its metadata and tensor infos, then its vocabulary by building the
// runtime tokenizer (unless Options.SkipTokenizer), then the values of its small F32 tensors (norms, biases,
// the recurrent layers' gates), which must be finite. A NaN in a norm weight turns
// every logit into NaN; checking these costs a few MB of reads even for large models.
func CheckFile(f *gguf.File, o Options) error {
	if err := Check(FromFile(f), o); err != nil {
		return err
	}
	c := &checker{m: FromFile(f)}
	if !o.SkipTokenizer {
		// The runtime tokenizer checks the vocabulary's content (empty, duplicate, oversized tokens, merges
		// that are malformed or name tokens that do not exist) as it is built.
		if _, err := tokenizer.FromGGUF(f); err != nil {
			var te *tokenizer.Error
			if !errors.As(err, &te) {
				return err
			}
			c.add(Problem{Key: te.Key, Msg: te.Msg, Unsupported: te.Unsupported})
			return c.err()
		}
	}
	buf := make([]byte, 64<<10)
	for _, t := range f.Tensors {
		if t.Type != gguf.TypeF32 || len(trim(t.Shape)) != 1 || t.NumElements() > maxVectorElems {
			continue
		}
		r, err := f.TensorReader(t.Name)
		if err != nil {
			return err
		}
		if i, bad, err := firstNonFinite(r, buf); err != nil {
			return fmt.Errorf("modelcheck: %s: tensor %s: %w", f.Name, t.Name, err)
		} else if i >= 0 {
			c.tensorf(t.Name, "element %d is %v (norm, bias and gate values must be finite)", i, bad)
		}
	}
	return c.err()
}

// CheckPath opens the GGUF at path and runs [CheckFile] on it.
func CheckPath(path string, o Options) error {
	f, err := gguf.OpenFile(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return CheckFile(f, o)
}

// firstNonFinite returns the index and value of the first NaN or infinity among the little-endian float32s of
// r, or -1.
func firstNonFinite(r io.Reader, buf []byte) (int, float32, error) {
	idx := 0
	for {
		n, err := io.ReadFull(r, buf)
		for i := 0; i+4 <= n; i += 4 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(buf[i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return idx + i/4, v, nil
			}
		}
		idx += n / 4
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return -1, 0, nil
		}
		if err != nil {
			return -1, 0, err
		}
	}
}
