package repack

/*
#include <stddef.h>
int phonellm_repack_enable(const size_t *layout);
int phonellm_q6k_tag(void *buf, void **buffer_field, void **extra_field);
void *phonellm_repack_buffer(void);
void phonellm_repack_free(void *buf);
int phonellm_repack_tensor(void *buf, void *t, void **buffer_field, void **extra_field, const void *src, size_t n);
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"unsafe"

	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/ml/backend/ggml"
)

// Set once, when the package is initialised: before any engine exists, so
// no graph can be running while ggml-cpu's tables change.
var (
	lay        layout
	enabled    bool  // CPU_REPACK is one of ggml-cpu's extra buffer types
	q6kEnabled bool  // and the Q6_K kernel (q6k.cpp) is plugged in
	initErr    error // why not
)

func init() {
	f, ok := reflect.TypeOf(ggml.Backend{}).FieldByName("tensors")
	if !ok || f.Type.Kind() != reflect.Map || f.Type.Elem().Kind() != reflect.Pointer {
		initErr = errors.New("repack: ggml.Backend has no tensors map of pointers")
		return
	}
	if lay, initErr = tensorLayout(f.Type.Elem().Elem()); initErr != nil {
		return
	}
	offs := []C.size_t{C.size_t(lay.typ), C.size_t(lay.buffer), C.size_t(lay.ne), C.size_t(lay.nb),
		C.size_t(lay.op), C.size_t(lay.src), C.size_t(lay.data), C.size_t(lay.extra)}
	switch C.phonellm_repack_enable(&offs[0]) {
	case 0:
		initErr = errors.New("repack: ggml-cpu has no CPU_REPACK buffer type")
	case 1:
		enabled = true
	default:
		enabled, q6kEnabled = true, true
	}
}

// matrix names the weights that Ollama's qwen2, qwen3 and qwen35 (qwen3next)
// models only ever use as the first operand of a 2-D MUL_MAT (nn.Linear).
// Embeddings (GET_ROWS), norms, convolution kernels, the SSM tensors and
// expert stacks (MUL_MAT_ID) are left alone.
var matrix = regexp.MustCompile(`^(blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|attn_qkv|attn_gate|ffn_gate|ffn_up|ffn_down|ffn_gate_shexp|ffn_up_shexp|ffn_down_shexp|ssm_out)|output)\.weight$`)

// ggml type numbers (ggml.h) and their block geometry for the types ggml-cpu
// can repack; the repack code makes the final decision per CPU and shape.
var blocks = map[int32]struct {
	name         string
	elems, bytes int64
}{
	2:  {"q4_0", 32, 18},
	12: {"q4_K", 256, 144},
	20: {"iq4_nl", 32, 18},
	14: {"q6_K", 256, 210}, // kept in place, computed by q6k.cpp
}

const typeQ6K = 14

// Stats says what Model did.
type Stats struct {
	Tensors int            // matrices rearranged
	Bytes   int64          // their size
	ByType  map[string]int // tensors per ggml type name
	Names   []string       // the tensors, sorted
	Types   []string       // their ggml type names, in the order of Names
}

// Packed holds the repack buffer of one model; Free it after the backend is
// closed.
type Packed struct {
	buf unsafe.Pointer
}

// Free releases the repack buffer. The tensors' memory belongs to the
// backend and is freed by Backend.Close.
func (p *Packed) Free() {
	if p != nil && p.buf != nil {
		C.phonellm_repack_free(p.buf)
		p.buf = nil
	}
}

// layout holds the offsets of the ggml_tensor fields used here.
type layout struct {
	typ, buffer, ne, nb, op, src, viewSrc, data, extra uintptr
}

// Model rearranges the eligible weights of b, which must be Ollama's ggml
// backend after Load and before any concurrent use. It returns a nil *Packed
// and zero Stats when nothing was eligible.
func Model(b ml.Backend) (*Packed, Stats, error) {
	st := Stats{ByType: map[string]int{}}
	if !enabled {
		return nil, st, initErr
	}
	gb, ok := b.(*ggml.Backend)
	if !ok {
		return nil, st, fmt.Errorf("repack: backend %T is not Ollama's ggml backend", b)
	}
	tensors := reflect.ValueOf(gb).Elem().FieldByName("tensors")
	ptrs := map[string]unsafe.Pointer{}
	for it := tensors.MapRange(); it.Next(); {
		if name := it.Key().String(); matrix.MatchString(name) {
			ptrs[name] = it.Value().UnsafePointer()
		}
	}
	names := make([]string, 0, len(ptrs))
	for n := range ptrs {
		names = append(names, n)
	}
	sort.Strings(names)

	var p *Packed
	var tmp []byte
	for _, name := range names {
		t := ptrs[name]
		n, typ, ok := eligible(t, lay)
		if !ok || (typ == typeQ6K && !q6kEnabled) {
			continue
		}
		if p == nil {
			buf := C.phonellm_repack_buffer()
			if buf == nil {
				return nil, st, errors.New("repack: cannot allocate a CPU_REPACK buffer")
			}
			p = &Packed{buf: buf}
		}
		bufField, extraField := (*unsafe.Pointer)(unsafe.Add(t, lay.buffer)), (*unsafe.Pointer)(unsafe.Add(t, lay.extra))
		var done C.int
		if typ == typeQ6K {
			done = C.phonellm_q6k_tag(p.buf, bufField, extraField)
		} else {
			data := *(*unsafe.Pointer)(unsafe.Add(t, lay.data))
			tmp = append(tmp[:0], unsafe.Slice((*byte)(data), n)...)
			done = C.phonellm_repack_tensor(p.buf, t, bufField, extraField, unsafe.Pointer(&tmp[0]), C.size_t(n))
		}
		if done != 0 {
			st.Tensors++
			st.Bytes += n
			st.ByType[blocks[typ].name]++
			st.Names = append(st.Names, name)
			st.Types = append(st.Types, blocks[typ].name)
		}
	}
	if p != nil && st.Tensors == 0 {
		p.Free()
		p = nil
	}
	return p, st, nil
}

// eligible reports the byte size and type of t when it is an allocated,
// contiguous 2-D matrix of a type handled here (the repack code wants rows
// in groups of 8; the Q6_K kernel takes any number).
func eligible(t unsafe.Pointer, lay layout) (int64, int32, bool) {
	typ := *(*int32)(unsafe.Add(t, lay.typ))
	bl, ok := blocks[typ]
	if !ok {
		return 0, 0, false
	}
	ne := (*[4]int64)(unsafe.Add(t, lay.ne))
	nb := (*[4]uint64)(unsafe.Add(t, lay.nb))
	switch {
	case *(*unsafe.Pointer)(unsafe.Add(t, lay.viewSrc)) != nil,
		*(*unsafe.Pointer)(unsafe.Add(t, lay.data)) == nil,
		*(*unsafe.Pointer)(unsafe.Add(t, lay.buffer)) == nil,
		*(*unsafe.Pointer)(unsafe.Add(t, lay.extra)) != nil,
		ne[2] != 1, ne[3] != 1, ne[1] <= 0, ne[1]%8 != 0 && typ != typeQ6K, ne[0]%bl.elems != 0,
		nb[0] != uint64(bl.bytes), nb[1] != uint64(ne[0]/bl.elems*bl.bytes):
		return 0, 0, false
	}
	return ne[1] * int64(nb[1]), typ, true
}

// tensorLayout reads the offsets of struct ggml_tensor's fields from the cgo
// type Ollama's package was compiled with, and checks their kinds.
func tensorLayout(st reflect.Type) (layout, error) {
	if st.Kind() != reflect.Struct {
		return layout{}, fmt.Errorf("repack: tensor type %v is not a struct", st)
	}
	field := func(name string, kind reflect.Kind, size uintptr) (uintptr, error) {
		f, ok := st.FieldByName(name)
		if !ok {
			return 0, fmt.Errorf("repack: struct ggml_tensor has no field %q", name)
		}
		if f.Type.Kind() != kind || f.Type.Size() != size {
			return 0, fmt.Errorf("repack: struct ggml_tensor field %q is %v (%d bytes), want %v (%d bytes)", name, f.Type, f.Type.Size(), kind, size)
		}
		return f.Offset, nil
	}
	var l layout
	var err error
	ptr := unsafe.Sizeof(uintptr(0))
	steps := []struct {
		dst  *uintptr
		name string
		kind reflect.Kind
		size uintptr
	}{
		{&l.typ, "_type", reflect.Uint32, 4},
		{&l.buffer, "buffer", reflect.Pointer, ptr},
		{&l.ne, "ne", reflect.Array, 32},
		{&l.nb, "nb", reflect.Array, 4 * ptr},
		{&l.op, "op", reflect.Uint32, 4},
		{&l.src, "src", reflect.Array, 10 * ptr},
		{&l.viewSrc, "view_src", reflect.Pointer, ptr},
		{&l.data, "data", reflect.UnsafePointer, ptr},
		{&l.extra, "extra", reflect.UnsafePointer, ptr},
	}
	for _, s := range steps {
		if *s.dst, err = field(s.name, s.kind, s.size); err != nil {
			return layout{}, err
		}
	}
	return l, nil
}
