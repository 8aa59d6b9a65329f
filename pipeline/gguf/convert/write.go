package convert

import (
	"context"
	"fmt"
	"io"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// DefaultBlockElems is the number of float32 values converted per row block (4 MiB), so a conversion holds a
// few such buffers whatever the tensor size (Options.BlockElems overrides it).
const DefaultBlockElems int64 = 1 << 20

// Run converts the checkpoint o.Model to a GGUF file, written atomically: on any error (or cancellation)
// nothing is left under the output name.
func Run(ctx context.Context, o Options, rep pipeline.Reporter) (Result, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	m, err := Load(o.Model, o)
	if err != nil {
		return Result{}, err
	}
	defer m.Close()
	if len(m.Dropped) > 0 {
		rep.Note(pipeline.Info, fmt.Sprintf("convert: skipped %d checkpoint tensors (vision tower, MTP block, rotary caches)", len(m.Dropped)))
	}
	out := o.outPath(m.OutType)
	art, err := m.WriteFile(ctx, out, rep)
	if err != nil {
		return Result{}, err
	}
	res := Result{Arch: m.Arch, HFArch: m.HFArch, OutType: m.OutType, Tensors: len(m.Tensors), Blocks: m.BlockCount,
		MTP: m.MTP, Dropped: len(m.Dropped), Artifacts: []pipeline.Artifact{art}}
	for i := range m.Tensors {
		res.Params += m.Tensors[i].NumElements()
	}
	return res, nil
}

// Plan returns a GGUF writer planned with the model's KVs and tensors (types as in an F32/F16/BF16 file).
func (m *Model) Plan() (*gguf.Writer, error) {
	w := gguf.NewWriter()
	for _, kv := range m.KVs {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if err := w.AddTensor(t.Name, t.Type, t.Shape); err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
	}
	return w, nil
}

// WriteFile writes the model as a GGUF file at path, atomically, and returns the artifact.
func (m *Model) WriteFile(ctx context.Context, path string, rep pipeline.Reporter) (pipeline.Artifact, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	w, err := m.Plan()
	if err != nil {
		return pipeline.Artifact{}, err
	}
	var total int64
	for _, t := range w.Tensors() {
		total += int64(t.Size())
	}
	f, err := fsx.Create(path)
	if err != nil {
		return pipeline.Artifact{}, fmt.Errorf("convert: %w", err)
	}
	defer f.Abort()
	step := "convert " + m.Arch + " → " + string(m.OutType)
	rep.Begin(step, total) // progress counts tensor bytes

	// Hide *os.File's ReadFrom/WriteString (promoted through fsx.File): bufio would use them and bypass the
	// hashing Write, leaving a wrong Size and SHA256.
	err = m.write(ctx, w, struct{ io.Writer }{f}, rep)
	if err == nil {
		err = f.Commit()
	}
	rep.End(step, err)
	if err != nil {
		return pipeline.Artifact{}, fmt.Errorf("convert: %s: %w", path, err)
	}
	return pipeline.Artifact{Path: path, Kind: "gguf", Size: f.Size(), SHA256: f.Sum()}, nil
}

func (m *Model) write(ctx context.Context, w *gguf.Writer, out io.Writer, rep pipeline.Reporter) error {
	if err := w.WriteHeader(out); err != nil {
		return err
	}
	enc := &tensorReader{ctx: ctx, rep: rep, block: m.blockElems}
	if enc.block <= 0 {
		enc.block = DefaultBlockElems
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		enc.reset(t)
		if err := w.WriteTensorFrom(t.Name, enc); err != nil {
			if enc.err != nil {
				return enc.err
			}
			return err
		}
	}
	return w.Finish()
}

// tensorReader streams the encoded bytes of one tensor, converting a row block at a time.
type tensorReader struct {
	ctx   context.Context
	rep   pipeline.Reporter
	t     *Tensor
	row   int64
	f32   []float32
	buf   []byte
	pos   int
	err   error
	rpb   int64 // rows per block
	block int64 // values per block
	size  int   // bytes per element
}

func (r *tensorReader) reset(t *Tensor) {
	r.t, r.row, r.pos, r.err = t, 0, 0, nil
	r.buf = r.buf[:0]
	r.rpb = max(1, r.block/t.RowLen())
	r.size = 4
	if t.Type != gguf.TypeF32 {
		r.size = 2
	}
}

func (r *tensorReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.pos == len(r.buf) {
		if r.row == r.t.Rows() {
			return 0, io.EOF
		}
		if err := r.fill(); err != nil {
			r.err = err
			return 0, err
		}
	}
	n := copy(p, r.buf[r.pos:])
	r.pos += n
	r.rep.Add(int64(n))
	return n, nil
}

func (r *tensorReader) fill() error {
	n := min(r.rpb, r.t.Rows()-r.row)
	vals, err := r.t.ReadRows(r.ctx, r.row, n, r.f32)
	if err != nil {
		return err
	}
	r.f32 = vals
	need := len(vals) * r.size
	if cap(r.buf) < need {
		r.buf = make([]byte, need)
	}
	r.buf = r.buf[:need]
	switch r.t.Type {
	case gguf.TypeF32:
		half.EncodeF32LE(r.buf, vals)
	case gguf.TypeF16:
		half.EncodeF16LE(r.buf, vals)
	case gguf.TypeBF16:
		half.EncodeBF16LE(r.buf, vals)
	default:
		return fmt.Errorf("tensor %q: cannot write type %s", r.t.Name, r.t.Type)
	}
	r.row += n
	r.pos = 0
	return nil
}
