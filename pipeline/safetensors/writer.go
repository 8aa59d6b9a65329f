package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/half"
)

// WriteInfo plans one tensor of a file to write.
type WriteInfo struct {
	Name  string
	DType DType
	Shape []int64
}

// Size returns the tensor's byte size (0 for an invalid shape or dtype).
func (w WriteInfo) Size() int64 {
	n, err := byteSize(w.DType, w.Shape)
	if err != nil {
		return 0
	}
	return n
}

// Writer writes one safetensors file in two phases: Create plans the header
// from every tensor's dtype and shape, then the bodies are streamed in the
// planned order (WriteTensor, WriteFloat32 or StreamTensor). The output goes
// to a temporary file next to the destination (package fsx, which also
// hashes it); Commit fsyncs and renames it, Abort removes it.
type Writer struct {
	path string
	f    *fsx.File
	bw   sink // buffered, or direct I/O (WriterOptions.Direct)
	plan []TensorInfo
	next int   // index of the next tensor to start
	left int64 // bytes still owed to the tensor being streamed
	size int64
	err  error // sticky
	done bool
	sum  string
}

// sink is where the Writer's bytes go: a bufio.Writer over the file, or an fsx.DirectWriter.
type sink interface {
	Write(p []byte) (int, error)
	Flush() error
}

// directOptions size the direct writer: 16 MiB writes, 8 chunks in circulation (128 MiB), 4 in flight.
var directOptions = fsx.DirectOptions{Chunk: 16 << 20, Chunks: 8, Writers: 4}

// WriterOptions tune how a Writer writes.
type WriterOptions struct {
	// Direct writes the file with direct I/O (O_DIRECT on Linux) where the file system supports it: the
	// bytes go from aligned buffers to the disk, in the background, without passing through (and first
	// allocating) the page cache, which for multi-gigabyte outputs costs more CPU than the data work and
	// leaves a long fsync at Commit. The file is not in the page cache afterwards. Elsewhere, or when the file
	// system refuses it, the Writer silently writes through the page cache as usual.
	Direct bool
}

// Create plans a safetensors file at path with the tensors in the given
// order (that is also their order in the data section) and the metadata,
// and writes its header to a temporary file in the same directory.
func Create(path string, tensors []WriteInfo, metadata map[string]string) (*Writer, error) {
	return CreateWith(path, tensors, metadata, WriterOptions{})
}

// CreateWith is Create with options.
func CreateWith(path string, tensors []WriteInfo, metadata map[string]string, o WriterOptions) (*Writer, error) {
	header, plan, err := planHeader(path, tensors, metadata)
	if err != nil {
		return nil, err
	}
	f, err := fsx.Create(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var bw sink
	if o.Direct {
		if d := fsx.NewDirectWriter(f, directOptions); d != nil {
			bw = d
		}
	}
	if bw == nil {
		bw = bufio.NewWriterSize(f, 1<<20)
	}
	w := &Writer{path: path, f: f, bw: bw, plan: plan}
	if err := w.write(header); err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

// planHeader validates the plan, assigns offsets and encodes the header
// (8-byte length + JSON padded with spaces to a multiple of 8, as upstream
// safetensors does so the data section stays aligned).
func planHeader(path string, tensors []WriteInfo, metadata map[string]string) ([]byte, []TensorInfo, error) {
	var js bytes.Buffer
	enc := func(v any) {
		b, _ := marshalNoEscape(v)
		js.Write(b)
	}
	js.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		js.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				js.WriteByte(',')
			}
			enc(k)
			js.WriteByte(':')
			enc(metadata[k])
		}
		js.WriteByte('}')
	}
	seen := map[string]bool{}
	plan := make([]TensorInfo, 0, len(tensors))
	var off int64
	for i, t := range tensors {
		switch {
		case t.Name == "" || t.Name == "__metadata__":
			return nil, nil, fmt.Errorf("safetensors: %s: tensor name %q is not allowed", path, t.Name)
		case seen[t.Name]:
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %q planned twice", path, t.Name)
		case !t.DType.Known():
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %q: unknown dtype %q", path, t.Name, t.DType)
		}
		seen[t.Name] = true
		shape := append([]int64{}, t.Shape...)
		size, err := byteSize(t.DType, shape)
		if err != nil {
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %q: %w", path, t.Name, err)
		}
		if off > (1<<62)-size {
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %q: file would exceed 2^62 bytes", path, t.Name)
		}
		if i > 0 || len(metadata) > 0 {
			js.WriteByte(',')
		}
		enc(t.Name)
		js.WriteString(`:{"dtype":`)
		enc(string(t.DType))
		js.WriteString(`,"shape":`)
		enc(shape)
		fmt.Fprintf(&js, `,"data_offsets":[%d,%d]}`, off, off+size)
		plan = append(plan, TensorInfo{Name: t.Name, DType: t.DType, Shape: shape, File: path, Offset: off, Size: size})
		off += size
	}
	js.WriteByte('}')
	for js.Len()%8 != 0 {
		js.WriteByte(' ')
	}
	if js.Len() > MaxHeaderSize {
		return nil, nil, fmt.Errorf("safetensors: %s: header of %d bytes exceeds the %d-byte limit", path, js.Len(), MaxHeaderSize)
	}
	header := make([]byte, 8, 8+js.Len())
	binary.LittleEndian.PutUint64(header, uint64(js.Len()))
	header = append(header, js.Bytes()...)
	for i := range plan {
		plan[i].Offset += int64(len(header))
	}
	return header, plan, nil
}

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// Plan returns the planned tensors with their final absolute offsets.
func (w *Writer) Plan() []TensorInfo {
	out := make([]TensorInfo, len(w.plan))
	for i, t := range w.plan {
		out[i] = t.clone()
	}
	return out
}

func (w *Writer) write(p []byte) error {
	if w.err != nil {
		return w.err
	}
	if _, err := w.bw.Write(p); err != nil {
		w.err = fmt.Errorf("safetensors: write %s: %w", w.path, err)
		return w.err
	}
	w.size += int64(len(p))
	return nil
}

// begin checks that name is the next planned tensor and starts it.
func (w *Writer) begin(name string) (TensorInfo, error) {
	if w.err != nil {
		return TensorInfo{}, w.err
	}
	if w.done {
		return TensorInfo{}, fmt.Errorf("safetensors: %s: writer already committed or aborted", w.path)
	}
	if w.left != 0 {
		return TensorInfo{}, fmt.Errorf("safetensors: %s: tensor %q started before %q got its last %d bytes", w.path, name, w.plan[w.next-1].Name, w.left)
	}
	if w.next >= len(w.plan) {
		return TensorInfo{}, fmt.Errorf("safetensors: %s: tensor %q not planned (all %d planned tensors are written)", w.path, name, len(w.plan))
	}
	t := w.plan[w.next]
	if t.Name != name {
		return TensorInfo{}, fmt.Errorf("safetensors: %s: tensor %q written out of order, want %q next", w.path, name, t.Name)
	}
	w.next++
	w.left = t.Size
	return t, nil
}

// WriteTensor writes the whole body of the next planned tensor.
func (w *Writer) WriteTensor(name string, data []byte) error {
	if w.err == nil && w.next < len(w.plan) && w.plan[w.next].Name == name && int64(len(data)) != w.plan[w.next].Size {
		return fmt.Errorf("safetensors: %s: tensor %q: got %d bytes, want %d", w.path, name, len(data), w.plan[w.next].Size)
	}
	if _, err := w.begin(name); err != nil {
		return err
	}
	w.left = 0
	return w.write(data)
}

// StreamTensor starts the next planned tensor and returns a writer that
// accepts exactly its byte size, for tensors too big to hold at once.
func (w *Writer) StreamTensor(name string) (io.Writer, error) {
	t, err := w.begin(name)
	if err != nil {
		return nil, err
	}
	return &tensorStream{w: w, name: t.Name}, nil
}

type tensorStream struct {
	w    *Writer
	name string
}

func (s *tensorStream) Write(p []byte) (int, error) {
	w := s.w
	if w.plan[w.next-1].Name != s.name || int64(len(p)) > w.left {
		return 0, fmt.Errorf("safetensors: %s: tensor %q: write of %d bytes past its end (%d left)", w.path, s.name, len(p), w.left)
	}
	if err := w.write(p); err != nil {
		return 0, err
	}
	w.left -= int64(len(p))
	return len(p), nil
}

// WriteFloat32 writes the next planned tensor from float32 values, encoding
// them to its dtype (F32, F16 or BF16; round to nearest even).
func (w *Writer) WriteFloat32(name string, src []float32) error {
	if w.err == nil && w.next < len(w.plan) && w.plan[w.next].Name == name {
		t := w.plan[w.next]
		if !t.DType.Float() {
			return &UnsupportedError{Path: w.path, Tensor: name, DType: t.DType, Msg: fmt.Sprintf("cannot encode float32 as %s", t.DType)}
		}
		if int64(len(src)) != t.NumElements() {
			return fmt.Errorf("safetensors: %s: tensor %q: got %d values, want %d", w.path, name, len(src), t.NumElements())
		}
	}
	s, err := w.StreamTensor(name)
	if err != nil {
		return err
	}
	_, err = EncodeFloat32(s, w.plan[w.next-1].DType, src)
	return err
}

// EncodeFloat32 writes src to out encoded as dtype (F32, F16 or BF16,
// little-endian, round to nearest even) in bounded chunks and returns the
// number of bytes written.
func EncodeFloat32(out io.Writer, dtype DType, src []float32) (int64, error) {
	if !dtype.Float() {
		return 0, fmt.Errorf("safetensors: cannot encode float32 as %s", dtype)
	}
	es := int(elemBytes(dtype))
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	buf := *bp
	per := len(buf) / es
	var total int64
	for len(src) > 0 {
		k := min(per, len(src))
		b := buf[:k*es]
		switch dtype {
		case F32:
			half.EncodeF32LE(b, src[:k])
		case F16:
			half.EncodeF16LE(b, src[:k])
		case BF16:
			half.EncodeBF16LE(b, src[:k])
		}
		n, err := out.Write(b)
		total += int64(n)
		if err != nil {
			return total, err
		}
		src = src[k:]
	}
	return total, nil
}

// Commit checks that every planned tensor was written in full, then
// flushes, fsyncs and renames the file into place and fsyncs the directory.
func (w *Writer) Commit() error {
	if w.done {
		return fmt.Errorf("safetensors: %s: writer already committed or aborted", w.path)
	}
	if w.err == nil {
		switch {
		case w.left != 0:
			w.err = fmt.Errorf("safetensors: %s: tensor %q is missing its last %d bytes", w.path, w.plan[w.next-1].Name, w.left)
		case w.next < len(w.plan):
			w.err = fmt.Errorf("safetensors: %s: tensor %q (and %d after it) never written", w.path, w.plan[w.next].Name, len(w.plan)-w.next-1)
		}
	}
	if w.err != nil {
		err := w.err
		w.Abort()
		return err
	}
	if err := w.bw.Flush(); err != nil {
		w.Abort()
		return fmt.Errorf("safetensors: commit %s: %w", w.path, err)
	}
	sum := w.f.Sum() // bytes that went through the buffered writer
	if d, ok := w.bw.(*fsx.DirectWriter); ok {
		sum = d.Sum() // the direct writer hashes on its own goroutine and writes with WriteAt
	}
	w.done = true
	if err := w.f.Commit(); err != nil {
		return fmt.Errorf("safetensors: commit %s: %w", w.path, err)
	}
	w.sum = sum
	return nil
}

// Abort discards the temporary file. It is a no-op after Commit.
func (w *Writer) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	if w.err == nil {
		w.err = errors.New("safetensors: writer aborted")
	}
	if d, ok := w.bw.(*fsx.DirectWriter); ok {
		d.Stop() // no background write may outlive the file
	}
	w.f.Abort()
	return nil
}

// Size returns the number of bytes written so far (the file size after
// Commit).
func (w *Writer) Size() int64 { return w.size }

// SHA256 returns the hex sha256 of the committed file ("" before Commit).
func (w *Writer) SHA256() string { return w.sum }
