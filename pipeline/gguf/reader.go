package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/fsx"
)

// Magic is the 4-byte signature at the start of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent (gguf.h GGUF_DEFAULT_ALIGNMENT).
const DefaultAlignment = 32

// MaxNameLen is the longest tensor name llama.cpp accepts (GGML_MAX_NAME - 1).
const MaxNameLen = 63

// MaxDims is the most dimensions a ggml tensor has (GGML_MAX_DIMS).
const MaxDims = 4

// maxArrayDepth bounds nesting of arrays of arrays, so hostile files cannot recurse without end.
const maxArrayDepth = 8

// KV is one metadata key/value pair.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor: its name, ggml type, shape in ggml order (Shape[0] is the row length, the
// last PyTorch dimension) and the offset of its data relative to the start of the data section.
type TensorInfo struct {
	Name   string
	Type   Type
	Shape  []uint64
	Offset uint64
}

// NumElements is the product of the shape.
func (t TensorInfo) NumElements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Size is the number of data bytes of the tensor (0 for an unknown type).
func (t TensorInfo) Size() uint64 {
	bs := t.Type.BlockSize()
	if bs == 0 {
		return 0
	}
	return t.NumElements() / uint64(bs) * uint64(t.Type.BlockBytes())
}

// File is a parsed GGUF file: metadata and tensor infos, with tensor data read on demand.
type File struct {
	Name       string // path or label used in error messages
	Version    uint32
	KVs        []KV
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset int64 // absolute offset of the data section
	Size       int64 // total file size

	r      io.ReaderAt
	closer io.Closer
	kvIdx  map[string]int
	tIdx   map[string]int
}

// OpenFile opens and parses the GGUF file at path. Close releases it. Anything but a regular file (a FIFO, a
// device, a folder) is refused with an *fsx.NotRegularError before a byte is read.
func OpenFile(path string) (*File, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	g, err := open(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	g.closer = f
	return g, nil
}

// Open parses a GGUF file held by r, of the given size. name is used in error messages.
func Open(r io.ReaderAt, size int64, name string) (*File, error) {
	return open(r, size, name)
}

// Close closes the underlying file when the File was opened with OpenFile.
func (f *File) Close() error {
	if f.closer != nil {
		c := f.closer
		f.closer = nil
		return c.Close()
	}
	return nil
}

// KV returns the value of key.
func (f *File) KV(key string) (Value, bool) {
	i, ok := f.kvIdx[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// String returns a string value, or "" when absent or of another type.
func (f *File) String(key string) string {
	v, _ := f.KV(key)
	s, _ := v.V.(string)
	return s
}

// Uint returns an integer value of any integer type, and whether it was present and non-negative.
func (f *File) Uint(key string) (uint64, bool) {
	v, ok := f.KV(key)
	if !ok {
		return 0, false
	}
	return v.AsUint64()
}

// Float returns a numeric value as float64.
func (f *File) Float(key string) (float64, bool) {
	v, ok := f.KV(key)
	if !ok {
		return 0, false
	}
	return v.AsFloat64()
}

// Architecture returns general.architecture.
func (f *File) Architecture() string { return f.String("general.architecture") }

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tIdx[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorReader returns a reader over the data of the named tensor.
func (f *File) TensorReader(name string) (*io.SectionReader, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: %s: no tensor %q", f.Name, name)
	}
	return io.NewSectionReader(f.r, f.DataOffset+int64(t.Offset), int64(t.Size())), nil
}

// DataSize is the number of bytes of all tensor data (excluding the padding after the last tensor).
func (f *File) DataSize() int64 {
	var n int64
	for _, t := range f.Tensors {
		n += int64(t.Size())
	}
	return n
}

// decoder reads little-endian values and tracks the position and the bytes remaining in the file.
type decoder struct {
	br   *bufio.Reader
	pos  int64
	size int64
	name string
	buf  [8]byte
}

func (d *decoder) fail(msg string, args ...any) error {
	return &FormatError{File: d.name, Offset: d.pos, Msg: fmt.Sprintf(msg, args...)}
}

func (d *decoder) remaining() int64 { return d.size - d.pos }

func (d *decoder) read(n int) ([]byte, error) {
	if int64(n) > d.remaining() {
		return nil, d.fail("unexpected end of file (need %d bytes, %d remain)", n, d.remaining())
	}
	if _, err := io.ReadFull(d.br, d.buf[:n]); err != nil {
		return nil, d.ioErr(err)
	}
	d.pos += int64(n)
	return d.buf[:n], nil
}

func (d *decoder) ioErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return d.fail("unexpected end of file")
	}
	return fmt.Errorf("gguf: %s: read at byte %d: %w", d.name, d.pos, err)
}

func (d *decoder) u8() (uint8, error) {
	b, err := d.read(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (d *decoder) u16() (uint16, error) {
	b, err := d.read(2)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b), nil
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.read(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.read(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (d *decoder) str() (string, error) {
	n, err := d.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(d.remaining()) {
		return "", d.fail("string length %d exceeds the %d bytes that remain", n, d.remaining())
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.br, b); err != nil {
		return "", d.ioErr(err)
	}
	d.pos += int64(n)
	return string(b), nil
}

func open(r io.ReaderAt, size int64, name string) (*File, error) {
	d := &decoder{br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16), size: size, name: name}
	magic, err := d.read(4)
	if err != nil {
		return nil, &FormatError{File: name, Offset: -1, Msg: "not a GGUF file (shorter than the 4-byte magic)"}
	}
	if string(magic) != Magic {
		return nil, &FormatError{File: name, Offset: -1, Msg: fmt.Sprintf("not a GGUF file (magic %q, want %q)", magic, Magic)}
	}
	f := &File{Name: name, Size: size, r: r, kvIdx: map[string]int{}, tIdx: map[string]int{}}
	if f.Version, err = d.u32(); err != nil {
		return nil, err
	}
	switch {
	case f.Version == 3 || f.Version == 2:
	case f.Version&0xFFFF == 0:
		return nil, &UnsupportedError{File: name, What: fmt.Sprintf("big-endian GGUF (version field %#x)", f.Version)}
	default:
		return nil, &UnsupportedError{File: name, What: fmt.Sprintf("GGUF version %d (want 3)", f.Version)}
	}
	nTensors, err := d.u64()
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64()
	if err != nil {
		return nil, err
	}
	// A KV needs at least 8 (key length) + 1 (key) + 4 (type) + 1 bytes; a tensor info at least 8+1+4+8+4+8.
	if nKV > uint64(d.remaining())/14 {
		return nil, d.fail("metadata count %d is more than the file can hold", nKV)
	}
	if nTensors > uint64(d.remaining())/33 {
		return nil, d.fail("tensor count %d is more than the file can hold", nTensors)
	}
	f.KVs = make([]KV, 0, nKV)
	for i := uint64(0); i < nKV; i++ {
		key, err := d.str()
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, d.fail("metadata key %d is empty", i)
		}
		if _, dup := f.kvIdx[key]; dup {
			return nil, d.fail("duplicate metadata key %q", key)
		}
		t, err := d.u32()
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(t), 0)
		if err != nil {
			return nil, fmt.Errorf("metadata key %q: %w", key, err)
		}
		f.kvIdx[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{key, Value{ValueType(t), v}})
	}
	f.Alignment = DefaultAlignment
	if v, ok := f.KV("general.alignment"); ok {
		a, isU32 := v.V.(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 {
			return nil, &FormatError{File: name, Offset: -1, Msg: fmt.Sprintf("general.alignment must be a uint32 power of two, got %s %v", v.Type, v.V)}
		}
		f.Alignment = uint64(a)
	}
	f.Tensors = make([]TensorInfo, 0, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		t, err := d.tensorInfo()
		if err != nil {
			return nil, err
		}
		if _, dup := f.tIdx[t.Name]; dup {
			return nil, d.fail("duplicate tensor name %q", t.Name)
		}
		f.tIdx[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	f.DataOffset = int64(pad(uint64(d.pos), f.Alignment))
	if len(f.Tensors) > 0 && f.DataOffset > size {
		return nil, &FormatError{File: name, Offset: d.pos, Msg: "file ends before the data section"}
	}
	// llama.cpp requires each offset to be the running sum of the padded sizes (gguf.cpp, "expected %zu").
	var want uint64
	for _, t := range f.Tensors {
		if t.Offset != want {
			return nil, &FormatError{File: name, Offset: -1, Msg: fmt.Sprintf("tensor %q has data offset %d, expected %d", t.Name, t.Offset, want)}
		}
		sz := t.Size()
		end := uint64(f.DataOffset) + t.Offset + sz
		if end < sz || end > uint64(size) {
			return nil, &FormatError{File: name, Offset: -1, Msg: fmt.Sprintf("tensor %q data [%d, %d) lies beyond the end of the file (%d bytes); truncated?", t.Name, uint64(f.DataOffset)+t.Offset, end, size)}
		}
		want = t.Offset + pad(sz, f.Alignment)
	}
	return f, nil
}

func (d *decoder) tensorInfo() (TensorInfo, error) {
	var t TensorInfo
	var err error
	start := d.pos
	if t.Name, err = d.str(); err != nil {
		return t, err
	}
	if len(t.Name) > MaxNameLen {
		return t, &FormatError{File: d.name, Offset: start, Msg: fmt.Sprintf("tensor name %q is %d bytes long, the limit is %d", t.Name, len(t.Name), MaxNameLen)}
	}
	if err := CheckTensorName(t.Name); err != nil {
		return t, &FormatError{File: d.name, Offset: start, Msg: err.Error()}
	}
	nd, err := d.u32()
	if err != nil {
		return t, err
	}
	if nd == 0 || nd > MaxDims {
		return t, d.fail("tensor %q has %d dimensions (want 1..%d)", t.Name, nd, MaxDims)
	}
	t.Shape = make([]uint64, nd)
	n := uint64(1)
	for i := range t.Shape {
		if t.Shape[i], err = d.u64(); err != nil {
			return t, err
		}
		hi, lo := bits.Mul64(n, t.Shape[i])
		if hi != 0 || lo > math.MaxInt64 {
			return t, d.fail("tensor %q shape %v overflows", t.Name, t.Shape[:i+1])
		}
		n = lo
	}
	ty, err := d.u32()
	if err != nil {
		return t, err
	}
	t.Type = Type(ty)
	if !t.Type.Known() {
		return t, &UnsupportedError{File: d.name, What: fmt.Sprintf("ggml type id %d of tensor %q", ty, t.Name)}
	}
	if bs := uint64(t.Type.BlockSize()); t.Shape[0]%bs != 0 {
		return t, d.fail("tensor %q row length %d is not a multiple of the %s block size %d", t.Name, t.Shape[0], t.Type, bs)
	}
	if hi, _ := bits.Mul64(n/uint64(t.Type.BlockSize()), uint64(t.Type.BlockBytes())); hi != 0 {
		return t, d.fail("tensor %q byte size overflows", t.Name)
	}
	if t.Offset, err = d.u64(); err != nil {
		return t, err
	}
	return t, nil
}

func (d *decoder) value(t ValueType, depth int) (any, error) {
	switch t {
	case ValueUint8:
		return d.u8()
	case ValueInt8:
		v, err := d.u8()
		return int8(v), err
	case ValueUint16:
		return d.u16()
	case ValueInt16:
		v, err := d.u16()
		return int16(v), err
	case ValueUint32:
		return d.u32()
	case ValueInt32:
		v, err := d.u32()
		return int32(v), err
	case ValueFloat32:
		v, err := d.u32()
		return math.Float32frombits(v), err
	case ValueBool:
		v, err := d.u8()
		if err == nil && v > 1 {
			return nil, d.fail("bool value %d (want 0 or 1)", v)
		}
		return v == 1, err
	case ValueString:
		return d.str()
	case ValueUint64:
		return d.u64()
	case ValueInt64:
		v, err := d.u64()
		return int64(v), err
	case ValueFloat64:
		v, err := d.u64()
		return math.Float64frombits(v), err
	case ValueArray:
		return d.array(depth)
	}
	return nil, d.fail("unknown value type %d", uint32(t))
}

func (d *decoder) array(depth int) (any, error) {
	if depth >= maxArrayDepth {
		return nil, d.fail("arrays nested deeper than %d", maxArrayDepth)
	}
	et, err := d.u32()
	if err != nil {
		return nil, err
	}
	elem := ValueType(et)
	n, err := d.u64()
	if err != nil {
		return nil, err
	}
	minSize := uint64(elem.size())
	switch elem {
	case ValueString:
		minSize = 8
	case ValueArray:
		minSize = 12
	}
	if minSize == 0 {
		return nil, d.fail("unknown array element type %d", et)
	}
	if n > uint64(d.remaining())/minSize {
		return nil, d.fail("array of %d %s elements is more than the %d remaining bytes can hold", n, elem, d.remaining())
	}
	a := Array{Elem: elem}
	switch elem {
	case ValueString:
		v := make([]string, n)
		for i := range v {
			if v[i], err = d.str(); err != nil {
				return nil, err
			}
		}
		a.Values = v
	case ValueArray:
		v := make([]Array, n)
		for i := range v {
			x, err := d.array(depth + 1)
			if err != nil {
				return nil, err
			}
			v[i] = x.(Array)
		}
		a.Values = v
	default:
		raw := make([]byte, n*minSize)
		if _, err := io.ReadFull(d.br, raw); err != nil {
			return nil, d.ioErr(err)
		}
		d.pos += int64(len(raw))
		if a.Values, err = decodeScalars(elem, raw, int(n)); err != nil {
			return nil, d.fail("%v", err)
		}
	}
	return a, nil
}

func decodeScalars(t ValueType, raw []byte, n int) (any, error) {
	le := binary.LittleEndian
	switch t {
	case ValueUint8:
		return raw, nil
	case ValueInt8:
		v := make([]int8, n)
		for i := range v {
			v[i] = int8(raw[i])
		}
		return v, nil
	case ValueBool:
		v := make([]bool, n)
		for i := range v {
			if raw[i] > 1 {
				return nil, fmt.Errorf("bool array element %d is %d (want 0 or 1)", i, raw[i])
			}
			v[i] = raw[i] == 1
		}
		return v, nil
	case ValueUint16:
		v := make([]uint16, n)
		for i := range v {
			v[i] = le.Uint16(raw[2*i:])
		}
		return v, nil
	case ValueInt16:
		v := make([]int16, n)
		for i := range v {
			v[i] = int16(le.Uint16(raw[2*i:]))
		}
		return v, nil
	case ValueUint32:
		v := make([]uint32, n)
		for i := range v {
			v[i] = le.Uint32(raw[4*i:])
		}
		return v, nil
	case ValueInt32:
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(le.Uint32(raw[4*i:]))
		}
		return v, nil
	case ValueFloat32:
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return v, nil
	case ValueUint64:
		v := make([]uint64, n)
		for i := range v {
			v[i] = le.Uint64(raw[8*i:])
		}
		return v, nil
	case ValueInt64:
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(le.Uint64(raw[8*i:]))
		}
		return v, nil
	case ValueFloat64:
		v := make([]float64, n)
		for i := range v {
			v[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return v, nil
	}
	return nil, fmt.Errorf("unknown array element type %d", uint32(t))
}

func pad(x, n uint64) uint64 { return (x + n - 1) &^ (n - 1) }

// CheckTensorName reports a tensor name a GGUF must not carry: empty, longer than [MaxNameLen] bytes, not valid
// UTF-8, or holding a NUL or another control character (ggml keeps names as C strings; tools print them).
func CheckTensorName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty tensor name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("tensor name %q is %d bytes long, the limit is %d", name, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("tensor name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("tensor name %q holds control character %U", name, r)
		}
	}
	return nil
}
