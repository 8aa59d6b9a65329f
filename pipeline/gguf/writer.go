package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Writer writes a GGUF v3 file in two phases. First plan: [Writer.SetKV] and [Writer.AddTensor] in the order
// they should appear. Then [Writer.WriteHeader] fixes the aligned offsets and writes metadata and tensor infos,
// and [Writer.WriteTensor] / [Writer.WriteTensorFrom] stream the bodies in plan order, each padded with zeros to
// the alignment. [Writer.Finish] checks that every planned tensor was written.
//
// The output depends only on the plan and the bodies, so it is deterministic.
type Writer struct {
	kvs     []KV
	kvIdx   map[string]int
	tensors []TensorInfo
	tIdx    map[string]int

	align      uint64
	out        *bufio.Writer
	headerSize int64
	next       int // index of the next tensor to write
	err        error
	written    int64
	partOf     string // tensor being written in pieces
	partN      uint64 // bytes of it written so far
}

// NewWriter returns an empty plan.
func NewWriter() *Writer {
	return &Writer{kvIdx: map[string]int{}, tIdx: map[string]int{}, align: DefaultAlignment}
}

// SetKV sets key to v. A new key is appended; an existing key keeps its position and gets the new value.
// general.alignment must be a power-of-two uint32.
func (w *Writer) SetKV(key string, v Value) error {
	if w.out != nil {
		return errors.New("gguf: SetKV after WriteHeader")
	}
	if key == "" {
		return errors.New("gguf: empty metadata key")
	}
	if err := checkValue(v.Type, v.V); err != nil {
		return fmt.Errorf("gguf: metadata key %q: %w", key, err)
	}
	if key == "general.alignment" {
		a, ok := v.V.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return fmt.Errorf("gguf: general.alignment must be a uint32 power of two, got %s %v", v.Type, v.V)
		}
		w.align = uint64(a)
	}
	if i, ok := w.kvIdx[key]; ok {
		w.kvs[i].Value = v
		return nil
	}
	w.kvIdx[key] = len(w.kvs)
	w.kvs = append(w.kvs, KV{key, v})
	return nil
}

// DeleteKV removes key from the plan if present.
func (w *Writer) DeleteKV(key string) {
	i, ok := w.kvIdx[key]
	if !ok || w.out != nil {
		return
	}
	w.kvs = append(w.kvs[:i], w.kvs[i+1:]...)
	delete(w.kvIdx, key)
	for j := i; j < len(w.kvs); j++ {
		w.kvIdx[w.kvs[j].Key] = j
	}
}

// KVs returns the planned metadata.
func (w *Writer) KVs() []KV { return w.kvs }

// AddTensor plans a tensor of the given type and ggml-order shape (shape[0] is the row length).
func (w *Writer) AddTensor(name string, typ Type, shape []uint64) error {
	if w.out != nil {
		return errors.New("gguf: AddTensor after WriteHeader")
	}
	if err := CheckTensorName(name); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	switch {
	case len(shape) == 0 || len(shape) > MaxDims:
		return fmt.Errorf("gguf: tensor %q has %d dimensions (want 1..%d)", name, len(shape), MaxDims)
	case !typ.Known():
		return fmt.Errorf("gguf: tensor %q: unknown ggml type id %d", name, uint32(typ))
	}
	if _, dup := w.tIdx[name]; dup {
		return fmt.Errorf("gguf: duplicate tensor %q", name)
	}
	if shape[0]%uint64(typ.BlockSize()) != 0 {
		return fmt.Errorf("gguf: tensor %q row length %d is not a multiple of the %s block size %d", name, shape[0], typ, typ.BlockSize())
	}
	w.tIdx[name] = len(w.tensors)
	w.tensors = append(w.tensors, TensorInfo{Name: name, Type: typ, Shape: append([]uint64(nil), shape...)})
	return nil
}

// Tensors returns the planned tensor infos; offsets are valid after [Writer.Layout] or WriteHeader.
func (w *Writer) Tensors() []TensorInfo { return w.tensors }

// Layout computes the tensor offsets and returns the absolute offset of the data section and the total file
// size. Callers that write tensor bodies in parallel (io.NewOffsetWriter) use it: tensor i starts at
// dataOffset + Tensors()[i].Offset, and the gaps are zero.
func (w *Writer) Layout() (dataOffset, total int64) {
	var off uint64
	for i := range w.tensors {
		w.tensors[i].Offset = off
		off += pad(w.tensors[i].Size(), w.align)
	}
	h := w.headerLen()
	dataOffset = int64(pad(uint64(h), w.align))
	return dataOffset, dataOffset + int64(off)
}

func (w *Writer) headerLen() int64 {
	n := int64(4 + 4 + 8 + 8)
	for _, kv := range w.kvs {
		n += 8 + int64(len(kv.Key)) + 4 + valueLen(kv.Value.Type, kv.Value.V)
	}
	for _, t := range w.tensors {
		n += 8 + int64(len(t.Name)) + 4 + 8*int64(len(t.Shape)) + 4 + 8
	}
	return n
}

func valueLen(t ValueType, x any) int64 {
	switch t {
	case ValueString:
		return 8 + int64(len(x.(string)))
	case ValueArray:
		a := x.(Array)
		n := int64(4 + 8)
		switch v := a.Values.(type) {
		case []string:
			for _, s := range v {
				n += 8 + int64(len(s))
			}
		case []Array:
			for _, s := range v {
				n += valueLen(ValueArray, s)
			}
		default:
			n += int64(a.Len()) * int64(a.Elem.size())
		}
		return n
	}
	return int64(t.size())
}

// WriteHeader writes the magic, metadata and tensor infos to out, padded to the alignment. After it, only
// tensor bodies may be written.
func (w *Writer) WriteHeader(out io.Writer) error {
	if w.out != nil {
		return errors.New("gguf: WriteHeader called twice")
	}
	dataOffset, _ := w.Layout()
	w.out = bufio.NewWriterSize(out, 1<<20)
	e := encoder{w: w.out}
	e.raw([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		e.value(kv.Value.Type, kv.Value.V)
	}
	for _, t := range w.tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	if e.n != w.headerLen() {
		return fmt.Errorf("gguf: internal error: header is %d bytes, planned %d", e.n, w.headerLen())
	}
	e.zeros(dataOffset - e.n)
	w.headerSize = dataOffset
	w.written = e.n
	return w.setErr(e.err)
}

func (w *Writer) setErr(err error) error {
	if err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// NextTensor returns the info of the tensor the writer expects next, and false when all are written.
func (w *Writer) NextTensor() (TensorInfo, bool) {
	if w.next >= len(w.tensors) {
		return TensorInfo{}, false
	}
	return w.tensors[w.next], true
}

// WriteTensor writes the body of the next planned tensor, which must be name, and pads it.
func (w *Writer) WriteTensor(name string, data []byte) error {
	t, err := w.begin(name)
	if err != nil {
		return err
	}
	if uint64(len(data)) != t.Size() {
		return w.setErr(fmt.Errorf("gguf: tensor %q: got %d bytes, want %d (%s %v)", name, len(data), t.Size(), t.Type, t.Shape))
	}
	if _, err := w.out.Write(data); err != nil {
		return w.setErr(err)
	}
	return w.end(t)
}

// WriteTensorFrom copies the body of the next planned tensor from r (exactly its size) and pads it.
func (w *Writer) WriteTensorFrom(name string, r io.Reader) error {
	t, err := w.begin(name)
	if err != nil {
		return err
	}
	n, err := io.CopyN(w.out, r, int64(t.Size()))
	if err != nil {
		return w.setErr(fmt.Errorf("gguf: tensor %q: copied %d of %d bytes: %w", name, n, t.Size(), err))
	}
	return w.end(t)
}

// WriteTensorPart writes the next piece of the body of tensor name; pieces arrive in order and last marks the
// final one, after which the total must equal the tensor's size and the padding is written. Large tensors are
// streamed this way without ever being whole in memory.
func (w *Writer) WriteTensorPart(name string, data []byte, last bool) error {
	if w.partOf != name {
		if w.partOf != "" {
			return w.setErr(fmt.Errorf("gguf: tensor %q started before %q was finished", name, w.partOf))
		}
		if _, err := w.begin(name); err != nil {
			return err
		}
		w.partOf, w.partN = name, 0
	}
	t := w.tensors[w.next]
	if w.partN+uint64(len(data)) > t.Size() {
		return w.setErr(fmt.Errorf("gguf: tensor %q: pieces exceed its %d bytes", name, t.Size()))
	}
	if _, err := w.out.Write(data); err != nil {
		return w.setErr(err)
	}
	w.partN += uint64(len(data))
	if !last {
		return nil
	}
	if w.partN != t.Size() {
		return w.setErr(fmt.Errorf("gguf: tensor %q: got %d bytes, want %d (%s %v)", name, w.partN, t.Size(), t.Type, t.Shape))
	}
	w.partOf = ""
	return w.end(t)
}

func (w *Writer) begin(name string) (TensorInfo, error) {
	if w.err != nil {
		return TensorInfo{}, w.err
	}
	if w.out == nil {
		return TensorInfo{}, errors.New("gguf: WriteTensor before WriteHeader")
	}
	if w.partOf != "" && w.partOf != name {
		return TensorInfo{}, w.setErr(fmt.Errorf("gguf: tensor %q started before %q was finished", name, w.partOf))
	}
	t, ok := w.NextTensor()
	if !ok {
		return t, w.setErr(fmt.Errorf("gguf: tensor %q written but all planned tensors are done", name))
	}
	if t.Name != name {
		return t, w.setErr(fmt.Errorf("gguf: tensor %q written out of order, expected %q", name, t.Name))
	}
	return t, nil
}

func (w *Writer) end(t TensorInfo) error {
	padding := int64(pad(t.Size(), w.align) - t.Size())
	e := encoder{w: w.out}
	e.zeros(padding)
	w.next++
	return w.setErr(e.err)
}

// Finish checks that every planned tensor was written and flushes buffered output.
func (w *Writer) Finish() error {
	if w.err != nil {
		return w.err
	}
	if w.out == nil {
		return errors.New("gguf: Finish before WriteHeader")
	}
	if t, ok := w.NextTensor(); ok {
		return w.setErr(fmt.Errorf("gguf: tensor %q was planned but not written", t.Name))
	}
	return w.setErr(w.out.Flush())
}

type encoder struct {
	w   io.Writer
	n   int64
	err error
	b   [8]byte
}

func (e *encoder) raw(p []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(p)
	e.n += int64(n)
}

func (e *encoder) u8(v uint8)   { e.b[0] = v; e.raw(e.b[:1]) }
func (e *encoder) u16(v uint16) { binary.LittleEndian.PutUint16(e.b[:], v); e.raw(e.b[:2]) }
func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.b[:], v); e.raw(e.b[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.b[:], v); e.raw(e.b[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }

var zeroBlock [4096]byte

func (e *encoder) zeros(n int64) {
	for n > 0 {
		k := min(n, int64(len(zeroBlock)))
		e.raw(zeroBlock[:k])
		n -= k
	}
}

func (e *encoder) value(t ValueType, x any) {
	switch t {
	case ValueUint8:
		e.u8(x.(uint8))
	case ValueInt8:
		e.u8(uint8(x.(int8)))
	case ValueUint16:
		e.u16(x.(uint16))
	case ValueInt16:
		e.u16(uint16(x.(int16)))
	case ValueUint32:
		e.u32(x.(uint32))
	case ValueInt32:
		e.u32(uint32(x.(int32)))
	case ValueFloat32:
		e.u32(math.Float32bits(x.(float32)))
	case ValueBool:
		if x.(bool) {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case ValueString:
		e.str(x.(string))
	case ValueUint64:
		e.u64(x.(uint64))
	case ValueInt64:
		e.u64(uint64(x.(int64)))
	case ValueFloat64:
		e.u64(math.Float64bits(x.(float64)))
	case ValueArray:
		a := x.(Array)
		e.u32(uint32(a.Elem))
		e.u64(uint64(a.Len()))
		for i := 0; i < a.Len(); i++ {
			e.value(a.Elem, arrayElem(a, i))
		}
	}
}
