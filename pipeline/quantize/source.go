package quantize

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/pipeline/quantize/kquant"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// Source is a model to quantize: its metadata and tensors, each readable row block by row block. A GGUF file
// ([OpenGGUF]) and an HF checkpoint converted on the fly (package convert) both provide one.
type Source struct {
	Name    string // file or folder, for messages
	Arch    string
	KVs     []gguf.KV
	Tensors []SourceTensor
	Close   func() error
}

// SourceTensor is one input tensor.
type SourceTensor struct {
	Name  string
	Type  gguf.Type // type of the data as stored (or as an intermediate file would store it)
	Shape []uint64  // ggml ne order
	// ReadRows decodes rows [row0, row0+n) (a row is Shape[0] values) to float32, dequantizing if needed.
	// It must be safe for concurrent use.
	ReadRows func(ctx context.Context, row0, n int64, dst []float32) ([]float32, error)
	// Raw returns the stored bytes, for tensors copied unchanged; nil when the data only exists as rows.
	Raw func() (io.Reader, error)
}

// Rows is the number of rows of the tensor.
func (t SourceTensor) Rows() int64 {
	n := int64(1)
	for _, d := range t.Shape[1:] {
		n *= int64(d)
	}
	return n
}

// OpenGGUF opens a GGUF file as a Source. The whole file is checked (offsets, sizes) before anything is read,
// so a truncated input is reported before any output exists.
func OpenGGUF(path string) (*Source, error) {
	f, err := gguf.OpenFile(path)
	if err != nil {
		return nil, err
	}
	src := &Source{Name: path, Arch: f.Architecture(), KVs: f.KVs, Close: f.Close}
	var rawPool sync.Pool // stored bytes of a row block, reused across calls and goroutines
	if src.Arch == "" {
		f.Close()
		return nil, &gguf.FormatError{File: path, Offset: -1, Msg: "general.architecture is missing"}
	}
	// The input must be a model the engines load (metadata, shapes, vocabulary, finite norms): a hostile file
	// is refused here, naming the key or tensor, rather than becoming a quantized file ship sends to phones.
	if err := modelcheck.CheckFile(f, modelcheck.Options{}); err != nil {
		f.Close()
		return nil, err
	}
	for _, ti := range f.Tensors {
		ti := ti
		sr, err := f.TensorReader(ti.Name)
		if err != nil {
			f.Close()
			return nil, err
		}
		rowBytes, err := ti.Type.RowBytes(int64(ti.Shape[0]))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: tensor %q: %w", path, ti.Name, err)
		}
		dec, err := rowDecoder(ti.Type)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: tensor %q: %w", path, ti.Name, err)
		}
		ne0 := int64(ti.Shape[0])
		src.Tensors = append(src.Tensors, SourceTensor{
			Name: ti.Name, Type: ti.Type, Shape: ti.Shape,
			Raw: func() (io.Reader, error) { return io.NewSectionReader(sr, 0, sr.Size()), nil },
			ReadRows: func(ctx context.Context, row0, n int64, dst []float32) ([]float32, error) {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				var raw []byte
				if b, ok := rawPool.Get().(*[]byte); ok {
					raw = *b
				}
				raw = grow(raw, int(n*rowBytes))
				defer rawPool.Put(&raw)
				if _, err := sr.ReadAt(raw, row0*rowBytes); err != nil {
					return nil, fmt.Errorf("%s: tensor %q rows %d..%d: %w", path, ti.Name, row0, row0+n, err)
				}
				dst = grow(dst, int(n*ne0))
				dec(dst, raw)
				return dst, nil
			},
		})
	}
	return src, nil
}

// rowDecoder returns a decoder of stored bytes to float32 for a type.
func rowDecoder(t gguf.Type) (func(dst []float32, src []byte), error) {
	switch t {
	case gguf.TypeF32:
		return func(d []float32, s []byte) { half.DecodeF32LE(d, s) }, nil
	case gguf.TypeF16:
		return func(d []float32, s []byte) { half.DecodeF16LE(d, s) }, nil
	case gguf.TypeBF16:
		return func(d []float32, s []byte) { half.DecodeBF16LE(d, s) }, nil
	}
	if f, ok := kquant.ForType(uint32(t)); ok {
		return f.Dequantize, nil
	}
	return nil, &plan.UnsupportedError{What: fmt.Sprintf("reading tensors of type %s", t)}
}

// rowEncoder returns an encoder of float32 rows into a target type.
func rowEncoder(t gguf.Type) (func(dst []byte, src []float32), error) {
	switch t {
	case gguf.TypeF32:
		return func(d []byte, s []float32) { half.EncodeF32LE(d, s) }, nil
	case gguf.TypeF16:
		return func(d []byte, s []float32) { half.EncodeF16LE(d, s) }, nil
	case gguf.TypeBF16:
		return func(d []byte, s []float32) { half.EncodeBF16LE(d, s) }, nil
	}
	f, err := kernelFormat(t)
	if err != nil {
		return nil, err
	}
	return f.Quantize, nil
}

// kernelFormat returns the kquant format of a block-quantized type.
func kernelFormat(t gguf.Type) (kquant.Format, error) {
	if f, ok := kquant.ForType(uint32(t)); ok {
		return f, nil
	}
	return kquant.Format{}, &plan.UnsupportedError{What: fmt.Sprintf("writing tensors of type %s", t)}
}

func grow[T any](b []T, n int) []T {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]T, n)
}

// KVString returns a string metadata value of the source, or "".
func (s *Source) KVString(key string) string {
	for _, kv := range s.KVs {
		if kv.Key == key {
			v, _ := kv.Value.V.(string)
			return v
		}
	}
	return ""
}
