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
	"regexp"
	"sort"
	"unsafe"

	"github.com/ollama/ollama/ml"

	"github.com/phonellm/phonellm/runtime/goengine/internal/ggmlabi"
)

// Set once, when the package is initialised: before any engine exists, so
// no graph can be running while ggml-cpu's tables change.
var (
	lay        ggmlabi.Layout
	enabled    bool  // CPU_REPACK is one of ggml-cpu's extra buffer types
	q6kEnabled bool  // and the Q6_K kernel (q6k.cpp) is plugged in
	initErr    error // why not
)

func init() {
	if lay, initErr = ggmlabi.TensorLayout(); initErr != nil {
		return
	}
	offs := []C.size_t{C.size_t(lay.Type), C.size_t(lay.Buffer), C.size_t(lay.Ne), C.size_t(lay.Nb),
		C.size_t(lay.Op), C.size_t(lay.Src), C.size_t(lay.Data), C.size_t(lay.Extra)}
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

// Model rearranges the eligible weights of b, which must be Ollama's ggml
// backend after Load and before any concurrent use. It returns a nil *Packed
// and zero Stats when nothing was eligible.
func Model(b ml.Backend) (*Packed, Stats, error) {
	st := Stats{ByType: map[string]int{}}
	if !enabled {
		return nil, st, initErr
	}
	weights, err := ggmlabi.Weights(b)
	if err != nil {
		return nil, st, fmt.Errorf("repack: %w", err)
	}
	ptrs := map[string]unsafe.Pointer{}
	for name, t := range weights {
		if matrix.MatchString(name) {
			ptrs[name] = unsafe.Pointer(t)
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
		bufField, extraField := (*unsafe.Pointer)(unsafe.Add(t, lay.Buffer)), (*unsafe.Pointer)(unsafe.Add(t, lay.Extra))
		var done C.int
		if typ == typeQ6K {
			done = C.phonellm_q6k_tag(p.buf, bufField, extraField)
		} else {
			data := *(*unsafe.Pointer)(unsafe.Add(t, lay.Data))
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
func eligible(t unsafe.Pointer, lay ggmlabi.Layout) (int64, int32, bool) {
	typ := *(*int32)(unsafe.Add(t, lay.Type))
	bl, ok := blocks[typ]
	if !ok {
		return 0, 0, false
	}
	ne := (*[4]int64)(unsafe.Add(t, lay.Ne))
	nb := (*[4]uint64)(unsafe.Add(t, lay.Nb))
	switch {
	case *(*unsafe.Pointer)(unsafe.Add(t, lay.ViewSrc)) != nil,
		*(*unsafe.Pointer)(unsafe.Add(t, lay.Data)) == nil,
		*(*unsafe.Pointer)(unsafe.Add(t, lay.Buffer)) == nil,
		*(*unsafe.Pointer)(unsafe.Add(t, lay.Extra)) != nil,
		ne[2] != 1, ne[3] != 1, ne[1] <= 0, ne[1]%8 != 0 && typ != typeQ6K, ne[0]%bl.elems != 0,
		nb[0] != uint64(bl.bytes), nb[1] != uint64(ne[0]/bl.elems*bl.bytes):
		return 0, 0, false
	}
	return ne[1] * int64(nb[1]), typ, true
}
