package observe

/*
#include <stdbool.h>
#include <stdlib.h>
#include "observe.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"iter"
	"runtime/cgo"
	"unsafe"

	"github.com/ollama/ollama/ml"

	"github.com/phonellm/phonellm/runtime/goengine/internal/ggmlabi"
)

// ggml ids of Ollama v0.24.0's vendored ggml (ml/backend/ggml/ggml/include/ggml.h: enum ggml_op counts
// GGML_OP_MUL_MAT as 29 and GGML_OP_MUL_MAT_ID as 30; enum ggml_type has F32 = 0, I32 = 26). The op ids are
// checked against ggml_op_name when the package is initialised.
const (
	opMulMat   = 29
	opMulMatID = 30
	typeF32    = 0
	typeI32    = 26
)

var (
	lay     ggmlabi.Layout
	initErr error
)

func init() {
	if lay, initErr = ggmlabi.TensorLayout(); initErr != nil {
		return
	}
	mm, mmid := C.CString("MUL_MAT"), C.CString("MUL_MAT_ID")
	defer C.free(unsafe.Pointer(mm))
	defer C.free(unsafe.Pointer(mmid))
	if C.phonellm_observe_op_is(opMulMat, mm) == 0 || C.phonellm_observe_op_is(opMulMatID, mmid) == 0 {
		initErr = errors.New("observe: ggml's op ids for MUL_MAT and MUL_MAT_ID are not 29 and 30 (another ggml version?)")
	}
}

// Product is one matrix product of a weight with activations, reported after ggml computed it.
type Product struct {
	Weight   string // the weight's name in the backend (the GGUF tensor name)
	Indirect bool   // MUL_MAT_ID: every input row multiplies the expert matrix chosen for it
	Matrices int    // matrices in the weight: its ne[2]·ne[3]
	Cols     int    // the weight's row length, the length of every input row
	Tokens   int    // the input's ne[1]
	F32      bool   // the input is F32; Rows yields nothing otherwise
	// Rows yields every input row with the index of the weight matrix it multiplies, in llama-imatrix's
	// terms: for a MUL_MAT, matrix (i3 mod ne3)·ne2 + (i2 mod ne2) of the weight for the input's row block
	// (i2, i3); for a MUL_MAT_ID, the expert id of each (token, slot) pair. The slices point into ggml's
	// memory and are valid only during the iteration.
	Rows iter.Seq2[int, []float32]
}

// Hook observes the products of a backend's weights while it is installed. It is owned by the goroutine that
// installed it: the callback runs on the thread that computes a graph, synchronously.
type Hook struct {
	sched   unsafe.Pointer
	c       *C.struct_phonellm_observer
	handle  cgo.Handle
	weights map[ggmlabi.Tensor]string
	fn      func(Product) error
	err     error
}

// Install registers fn for every MUL_MAT and MUL_MAT_ID whose weight want accepts (experts is true for a
// weight with more than one matrix) on the backend's scheduler. While installed, ggml computes each graph in
// pieces that end at those products, and calls fn after each one; an error from fn stops the rest of the graph
// and is returned by Remove. Only one hook can be installed on a backend at a time, and no graph of it may be
// computing while Install or Remove runs.
func Install(b ml.Backend, want func(weight string, experts bool) bool, fn func(Product) error) (*Hook, error) {
	if initErr != nil {
		return nil, initErr
	}
	sched, err := ggmlabi.Scheduler(b)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	all, err := ggmlabi.Weights(b)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	h := &Hook{sched: sched, weights: map[ggmlabi.Tensor]string{}, fn: fn}
	for name, t := range all {
		ne := lay.NeOf(t)
		if want == nil || want(name, ne[2]*ne[3] > 1) {
			h.weights[t] = name
		}
	}
	n := len(h.weights)
	c := (*C.struct_phonellm_observer)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_phonellm_observer{}))))
	if c == nil {
		return nil, errors.New("observe: out of memory")
	}
	if n > 0 {
		c.weights = (*unsafe.Pointer)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
		if c.weights == nil {
			C.free(unsafe.Pointer(c))
			return nil, errors.New("observe: out of memory")
		}
		arr := unsafe.Slice(c.weights, n)
		i := 0
		for t := range h.weights {
			arr[i] = unsafe.Pointer(t)
			i++
		}
		C.phonellm_observe_sort(c.weights, C.size_t(n))
	}
	c.n_weights = C.size_t(n)
	c.off_op, c.off_src = C.size_t(lay.Op), C.size_t(lay.Src)
	c.op_mul_mat, c.op_mul_mat_id = opMulMat, opMulMatID
	h.handle = cgo.NewHandle(h)
	c.handle = C.uintptr_t(h.handle)
	h.c = c
	C.phonellm_observe_set(sched, c)
	return h, nil
}

// Remove uninstalls the hook, frees it and returns the first error of its callback, if any.
func (h *Hook) Remove() error {
	if h == nil || h.c == nil {
		return nil
	}
	C.phonellm_observe_set(h.sched, nil)
	h.handle.Delete()
	if h.c.weights != nil {
		C.free(unsafe.Pointer(h.c.weights))
	}
	C.free(unsafe.Pointer(h.c))
	h.c = nil
	return h.err
}

// Err returns the first error of the callback so far.
func (h *Hook) Err() error { return h.err }

// Weights is the number of weights observed.
func (h *Hook) Weights() int { return len(h.weights) }

//export phonellmObserveNode
func phonellmObserveNode(handle C.uintptr_t, t unsafe.Pointer) (ok C.bool) {
	h, _ := cgo.Handle(handle).Value().(*Hook)
	if h == nil || h.err != nil {
		return false
	}
	defer func() {
		if r := recover(); r != nil { // never unwind through ggml's C frames
			h.err = fmt.Errorf("observe: %v", r)
			ok = false
		}
	}()
	if err := h.node(ggmlabi.Tensor(t)); err != nil {
		h.err = err
		return false
	}
	return true
}

// node reports one computed product.
func (h *Hook) node(t ggmlabi.Tensor) error {
	src0, src1 := lay.SrcOf(t, 0), lay.SrcOf(t, 1)
	name, ok := h.weights[src0]
	if !ok || src1 == nil {
		return nil
	}
	wne, ne, nb := lay.NeOf(src0), lay.NeOf(src1), lay.NbOf(src1)
	p := Product{Weight: name, Indirect: lay.OpOf(t) == opMulMatID, Matrices: int(wne[2] * wne[3]), Cols: int(ne[0]),
		Tokens: int(ne[1]), F32: lay.TypeOf(src1) == typeF32}
	data := lay.DataOf(src1)
	switch {
	case ne[0] != wne[0]:
		return fmt.Errorf("observe: product with %s: input rows of %d values, weight rows of %d", name, ne[0], wne[0])
	case data == nil:
		return fmt.Errorf("observe: product with %s: the input has no data", name)
	case p.F32 && nb[0] != 4:
		return fmt.Errorf("observe: product with %s: input elements %d bytes apart", name, nb[0])
	}
	cols := int(ne[0])
	row := func(off int64) []float32 { return unsafe.Slice((*float32)(unsafe.Add(data, off)), cols) }
	switch {
	case !p.F32:
		p.Rows = func(func(int, []float32) bool) {}
	case !p.Indirect:
		p.Rows = func(yield func(int, []float32) bool) {
			for i3 := int64(0); i3 < ne[3]; i3++ {
				for i2 := int64(0); i2 < ne[2]; i2++ {
					mat := int((i3%wne[3])*wne[2] + i2%wne[2])
					for r := int64(0); r < ne[1]; r++ {
						if !yield(mat, row(r*int64(nb[1])+i2*int64(nb[2])+i3*int64(nb[3]))) {
							return
						}
					}
				}
			}
		}
	default:
		ids := lay.SrcOf(t, 2)
		if ids == nil || lay.TypeOf(ids) != typeI32 || lay.DataOf(ids) == nil {
			return fmt.Errorf("observe: expert product with %s has no I32 expert ids", name)
		}
		ine, inb, idata := lay.NeOf(ids), lay.NbOf(ids), lay.DataOf(ids)
		if ine[1] != ne[2] || ne[3] != 1 {
			return fmt.Errorf("observe: expert product with %s: ids %v for input %v", name, ine, ne)
		}
		p.Tokens = int(ne[1])
		p.Rows = func(yield func(int, []float32) bool) {
			for tok := int64(0); tok < ne[2]; tok++ {
				for slot := int64(0); slot < ine[0]; slot++ {
					ex := *(*int32)(unsafe.Add(idata, tok*int64(inb[1])+slot*int64(inb[0])))
					if !yield(int(ex), row((slot%ne[1])*int64(nb[1])+tok*int64(nb[2]))) {
						return
					}
				}
			}
		}
	}
	return h.fn(p)
}
