// Package ggmlabi reads the in-memory layout of ggml's struct ggml_tensor and the fields of Ollama's ggml
// backend that phonellm's engine extensions need (the weight tensors, the scheduler), from the cgo types Ollama's
// package was compiled with, so that they cannot drift from the C header. Anything unexpected (a field missing,
// a field of another kind or size) is an error; callers then leave the feature off instead of guessing.
//
// The layout is that of Ollama v0.24.0's vendored ggml (ml/backend/ggml/ggml/include/ggml.h, struct
// ggml_tensor); upgrading Ollama means re-reading the users of this package (repack, observe).
package ggmlabi

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/ml/backend/ggml"
)

// Layout holds the byte offsets of the struct ggml_tensor fields phonellm reads.
type Layout struct {
	Type, Buffer, Ne, Nb, Op, Src, ViewSrc, Data, Name, Extra uintptr
}

// MaxSrc is GGML_MAX_SRC, the length of ggml_tensor.src (checked against the cgo type by TensorLayout).
const MaxSrc = 10

// NameLen is GGML_MAX_NAME, the size of ggml_tensor.name.
const NameLen = 64

var (
	layout    Layout
	layoutErr error
)

func init() {
	f, ok := reflect.TypeOf(ggml.Backend{}).FieldByName("tensors")
	if !ok || f.Type.Kind() != reflect.Map || f.Type.Elem().Kind() != reflect.Pointer {
		layoutErr = errors.New("ggmlabi: ggml.Backend has no tensors map of pointers")
		return
	}
	layout, layoutErr = tensorLayout(f.Type.Elem().Elem())
}

// TensorLayout returns the offsets of struct ggml_tensor's fields, or why they could not be read.
func TensorLayout() (Layout, error) { return layout, layoutErr }

// tensorLayout reads the offsets from the cgo struct type st and checks each field's kind and size.
func tensorLayout(st reflect.Type) (Layout, error) {
	if st.Kind() != reflect.Struct {
		return Layout{}, fmt.Errorf("ggmlabi: tensor type %v is not a struct", st)
	}
	field := func(name string, kind reflect.Kind, size uintptr) (uintptr, error) {
		f, ok := st.FieldByName(name)
		if !ok {
			return 0, fmt.Errorf("ggmlabi: struct ggml_tensor has no field %q", name)
		}
		if f.Type.Kind() != kind || f.Type.Size() != size {
			return 0, fmt.Errorf("ggmlabi: struct ggml_tensor field %q is %v (%d bytes), want %v (%d bytes)", name, f.Type, f.Type.Size(), kind, size)
		}
		return f.Offset, nil
	}
	var l Layout
	var err error
	ptr := unsafe.Sizeof(uintptr(0))
	steps := []struct {
		dst  *uintptr
		name string
		kind reflect.Kind
		size uintptr
	}{
		{&l.Type, "_type", reflect.Uint32, 4},
		{&l.Buffer, "buffer", reflect.Pointer, ptr},
		{&l.Ne, "ne", reflect.Array, 32},
		{&l.Nb, "nb", reflect.Array, 4 * ptr},
		{&l.Op, "op", reflect.Uint32, 4},
		{&l.Src, "src", reflect.Array, MaxSrc * ptr},
		{&l.ViewSrc, "view_src", reflect.Pointer, ptr},
		{&l.Data, "data", reflect.UnsafePointer, ptr},
		{&l.Name, "name", reflect.Array, NameLen},
		{&l.Extra, "extra", reflect.UnsafePointer, ptr},
	}
	for _, s := range steps {
		if *s.dst, err = field(s.name, s.kind, s.size); err != nil {
			return Layout{}, err
		}
	}
	return l, nil
}

// Tensor is a pointer to a C struct ggml_tensor.
type Tensor unsafe.Pointer

// TypeOf returns t's ggml type id.
func (l *Layout) TypeOf(t Tensor) int32 { return *(*int32)(unsafe.Add(unsafe.Pointer(t), l.Type)) }

// OpOf returns t's ggml op id.
func (l *Layout) OpOf(t Tensor) int32 { return *(*int32)(unsafe.Add(unsafe.Pointer(t), l.Op)) }

// NeOf returns t's dimensions.
func (l *Layout) NeOf(t Tensor) [4]int64 { return *(*[4]int64)(unsafe.Add(unsafe.Pointer(t), l.Ne)) }

// NbOf returns t's strides in bytes.
func (l *Layout) NbOf(t Tensor) [4]uint64 { return *(*[4]uint64)(unsafe.Add(unsafe.Pointer(t), l.Nb)) }

// DataOf returns t's data pointer.
func (l *Layout) DataOf(t Tensor) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(t), l.Data))
}

// BufferOf returns t's backend buffer, or nil.
func (l *Layout) BufferOf(t Tensor) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(t), l.Buffer))
}

// SrcOf returns t's i-th source, or nil.
func (l *Layout) SrcOf(t Tensor, i int) Tensor {
	return Tensor((*[MaxSrc]unsafe.Pointer)(unsafe.Add(unsafe.Pointer(t), l.Src))[i])
}

// backend returns Ollama's ggml backend behind b.
func backend(b ml.Backend) (reflect.Value, error) {
	gb, ok := b.(*ggml.Backend)
	if !ok {
		return reflect.Value{}, fmt.Errorf("ggmlabi: backend %T is not Ollama's ggml backend", b)
	}
	return reflect.ValueOf(gb).Elem(), nil
}

// Weights returns the backend's weight tensors by name (Ollama's names: the GGUF tensor names, plus
// output.weight for the copy of token_embd.weight it makes when the model has no output tensor).
func Weights(b ml.Backend) (map[string]Tensor, error) {
	v, err := backend(b)
	if err != nil {
		return nil, err
	}
	tensors := v.FieldByName("tensors")
	if !tensors.IsValid() || tensors.Kind() != reflect.Map {
		return nil, errors.New("ggmlabi: ggml.Backend has no tensors map")
	}
	out := make(map[string]Tensor, tensors.Len())
	for it := tensors.MapRange(); it.Next(); {
		out[it.Key().String()] = Tensor(it.Value().UnsafePointer())
	}
	return out, nil
}

// Scheduler returns the backend's ggml_backend_sched_t.
func Scheduler(b ml.Backend) (unsafe.Pointer, error) {
	v, err := backend(b)
	if err != nil {
		return nil, err
	}
	s := v.FieldByName("sched")
	if !s.IsValid() || s.Kind() != reflect.Pointer {
		return nil, errors.New("ggmlabi: ggml.Backend has no sched pointer")
	}
	p := s.UnsafePointer()
	if p == nil {
		return nil, errors.New("ggmlabi: the backend has no scheduler")
	}
	return p, nil
}
