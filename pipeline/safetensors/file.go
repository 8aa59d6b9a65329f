package safetensors

import (
	"fmt"
	"io"
	"math"
	"sync"
	"syscall"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/half"
)

// File is one validated .safetensors file read through io.ReaderAt.
type File struct {
	path    string
	r       io.ReaderAt
	size    int64
	infos   []TensorInfo // sorted by offset
	byName  map[string]int
	meta    map[string]string
	closeFn func() error
}

// Open opens and validates a safetensors file, reading it with pread.
func Open(path string) (*File, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	sf, err := newFile(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	sf.closeFn = f.Close
	return sf, nil
}

// OpenMmap is Open with the file mapped read-only into memory. Reads then
// copy from the mapping instead of issuing a system call each. The file must
// not shrink while it is open (a read past its new end would fault).
func OpenMmap(path string) (*File, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	size := st.Size()
	if size <= 0 || size > math.MaxInt {
		return Open(path)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("safetensors: mmap %s: %w", path, err)
	}
	sf, err := newFile(bytesReaderAt(data), size, path)
	if err != nil {
		syscall.Munmap(data)
		return nil, err
	}
	sf.closeFn = func() error { return syscall.Munmap(data) }
	return sf, nil
}

// NewFile validates a safetensors file of the given size read through r.
// name is used in errors and as TensorInfo.File. Close does not close r.
func NewFile(r io.ReaderAt, size int64, name string) (*File, error) {
	return newFile(r, size, name)
}

func newFile(r io.ReaderAt, size int64, path string) (*File, error) {
	infos, meta, err := parseHeader(r, size, path)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]int, len(infos))
	for i, t := range infos {
		byName[t.Name] = i
	}
	return &File{path: path, r: r, size: size, infos: infos, byName: byName, meta: meta}, nil
}

// Path returns the path (or name) the file was opened with.
func (f *File) Path() string { return f.path }

// Tensors returns the tensors sorted by offset.
func (f *File) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(f.infos))
	for i, t := range f.infos {
		out[i] = t.clone()
	}
	return out
}

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.infos[i].clone(), true
}

// Metadata returns a copy of the "__metadata__" map (nil when absent).
func (f *File) Metadata() map[string]string {
	if f.meta == nil {
		return nil
	}
	m := make(map[string]string, len(f.meta))
	for k, v := range f.meta {
		m[k] = v
	}
	return m
}

// Close releases the file (or mapping). It is safe to call more than once.
func (f *File) Close() error {
	if f.closeFn == nil {
		return nil
	}
	fn := f.closeFn
	f.closeFn = nil
	return fn()
}

func (f *File) lookup(name string) (TensorInfo, error) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("safetensors: %s: no tensor %q", f.path, name)
	}
	return f.infos[i], nil
}

// Raw returns the raw little-endian bytes of a tensor.
func (f *File) Raw(name string) (*io.SectionReader, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(f.r, t.Offset, t.Size), nil
}

// ReadFloat32 reads a whole F32, F16 or BF16 tensor as float32, reusing dst
// when it is large enough.
func (f *File) ReadFloat32(name string, dst []float32) ([]float32, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	return readFloat32(f.r, t, 0, t.NumElements(), dst)
}

// ReadElements reads n elements of a tensor starting at element off (in row-major order) as float32, reusing
// dst when it is large enough. (What a row is belongs to the caller: pipeline.TensorInfo defines it.)
func (f *File) ReadElements(name string, off, n int64, dst []float32) ([]float32, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	return readElements(f.r, t, off, n, dst)
}

// readElements checks the element range [off, off+n) against t and reads it.
func readElements(r io.ReaderAt, t TensorInfo, off, n int64, dst []float32) ([]float32, error) {
	if total := t.NumElements(); off < 0 || n < 0 || off > total || n > total-off {
		return nil, fmt.Errorf("safetensors: %s: tensor %q: elements [%d, %d) outside its %d", t.File, t.Name, off, off+n, total)
	}
	return readFloat32(r, t, off, n, dst)
}

// chunkBytes is the size of the scratch buffer float reads decode through.
const chunkBytes = 256 << 10

var scratchPool = sync.Pool{New: func() any { b := make([]byte, chunkBytes); return &b }}

// readFloat32 reads n elements of t starting at element off.
func readFloat32(r io.ReaderAt, t TensorInfo, off, n int64, dst []float32) ([]float32, error) {
	if !t.DType.Float() {
		return nil, &UnsupportedError{Path: t.File, Tensor: t.Name, DType: t.DType,
			Msg: fmt.Sprintf("dtype %s cannot be read as float32 (supported: F32, F16, BF16)", t.DType)}
	}
	if n > int64(math.MaxInt) {
		return nil, fmt.Errorf("safetensors: %s: tensor %q: %d elements do not fit in memory", t.File, t.Name, n)
	}
	if int64(cap(dst)) >= n {
		dst = dst[:n]
	} else {
		dst = make([]float32, n)
	}
	es := elemBytes(t.DType)
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	buf := *bp
	per := int64(len(buf)) / es
	pos := t.Offset + off*es
	for i := int64(0); i < n; {
		k := min(per, n-i)
		b := buf[:k*es]
		if err := readFullAt(r, b, pos); err != nil {
			return nil, fmt.Errorf("safetensors: %s: tensor %q: read: %w", t.File, t.Name, err)
		}
		out := dst[i : i+k]
		switch t.DType {
		case F32:
			half.DecodeF32LE(out, b)
		case F16:
			half.DecodeF16LE(out, b)
		case BF16:
			half.DecodeBF16LE(out, b)
		}
		i += k
		pos += k * es
	}
	return dst, nil
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
