package convert

import (
	"context"
	"fmt"
	"math"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// op is an elementwise transform applied after the rows are read (and permuted).
type op uint8

const (
	opNone   op = iota
	opAddOne    // zero-centred RMSNorm weight w → 1 + w (Qwen3NextModel.modify_tensors)
	opNegExp    // A_log → -exp(A_log)
)

// segment maps a run of output rows to rows of one source tensor. Without a reorder the mapping is
// srcRow0 + i; with one (block > 0) the segment is kh·r blocks of block rows, stored grouped by K head in
// the source and tiled in the output: output block v·kh + k comes from source block k·r + v
// (_LinearAttentionVReorderBase._reorder_v_heads in conversion/qwen.py).
type segment struct {
	src     string
	rows    int64
	srcRow0 int64
	block   int64
	kh, r   int64
}

func (s segment) srcRow(i int64) int64 {
	if s.block == 0 {
		return s.srcRow0 + i
	}
	return s.srcRow0 + reorderIndex(i, s.kh, s.r, s.block)
}

// run returns how many rows from local row i on (at most limit) map to consecutive source rows.
func (s segment) run(i, limit int64) int64 {
	if s.block == 0 {
		return limit
	}
	return min(limit, s.block-i%s.block)
}

// reorderIndex is the source index of output index i for a V-head reorder of kh K heads, r V heads per K
// head and head dimension hd: the inverse view of reshape(kh, r, hd) → swap the first two axes → flatten.
func reorderIndex(i, kh, r, hd int64) int64 {
	b, w := i/hd, i%hd
	v, k := b/kh, b%kh
	return (k*r+v)*hd + w
}

// reorderPerm returns the permutation of n = kh·r·hd elements as reorderIndex describes it.
func reorderPerm(kh, r, hd int64) []int32 {
	n := kh * r * hd
	p := make([]int32, n)
	for i := range n {
		p[i] = int32(reorderIndex(i, kh, r, hd))
	}
	return p
}

// plan says how to produce the rows of an output tensor from the source.
type plan struct {
	rowLen  int64
	segs    []segment
	colPerm []int32 // out[j] = in[colPerm[j]] within every row; nil for none
	op      op
}

func (p *plan) rows() int64 {
	var n int64
	for _, s := range p.segs {
		n += s.rows
	}
	return n
}

// Tensor is one output tensor of a conversion: its GGUF name, ggml-order shape and the type it has in an
// F32/F16/BF16 file by upstream's rules, readable row by row with every transform applied.
type Tensor struct {
	Name    string
	Shape   []uint64  // ggml ne order: Shape[0] is the row length
	Type    gguf.Type // type in the converted file (F32 for norms, biases, 1-D tensors, ssm_conv1d, routers)
	Sources []string  // the checkpoint tensors it is read from
	// Transform names the transform for listings: "", "+1", "-exp", "v-reorder", "stack", ...
	Transform string

	plan plan
	src  pipeline.TensorSource
}

// RowLen is the number of elements in one row (Shape[0]).
func (t *Tensor) RowLen() int64 { return int64(t.Shape[0]) }

// Rows is the number of rows: the product of Shape[1:].
func (t *Tensor) Rows() int64 {
	n := int64(1)
	for _, d := range t.Shape[1:] {
		n *= int64(d)
	}
	return n
}

// NumElements is the product of the shape.
func (t *Tensor) NumElements() int64 { return t.RowLen() * t.Rows() }

// Info returns the tensor's GGUF info (offset zero).
func (t *Tensor) Info() gguf.TensorInfo {
	return gguf.TensorInfo{Name: t.Name, Type: t.Type, Shape: append([]uint64(nil), t.Shape...)}
}

// ReadRows returns rows [row0, row0+n) as n·RowLen float32 values with every transform applied, reusing dst
// when it is large enough. It holds no state, so different goroutines may read (different or the same)
// tensors at once when the source allows it (a safetensors checkpoint does).
func (t *Tensor) ReadRows(ctx context.Context, row0, n int64, dst []float32) ([]float32, error) {
	rows, rowLen := t.Rows(), t.RowLen()
	if row0 < 0 || n < 0 || row0 > rows || n > rows-row0 {
		return nil, fmt.Errorf("convert: tensor %q: rows [%d, %d) outside its %d rows", t.Name, row0, row0+n, rows)
	}
	need := n * rowLen
	if int64(cap(dst)) >= need {
		dst = dst[:need]
	} else {
		dst = make([]float32, need)
	}
	// Find the segment holding row0.
	si, start := 0, int64(0)
	for si < len(t.plan.segs) && start+t.plan.segs[si].rows <= row0 {
		start += t.plan.segs[si].rows
		si++
	}
	r, off := row0, int64(0)
	for off < n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s := t.plan.segs[si]
		local := r - start
		k := s.run(local, min(n-off, s.rows-local))
		buf := dst[off*rowLen : (off+k)*rowLen : (off+k)*rowLen]
		got, err := t.src.ReadRows(ctx, s.src, s.srcRow(local), k, buf)
		if err != nil {
			return nil, fmt.Errorf("convert: tensor %q: %w", t.Name, err)
		}
		if int64(len(got)) != k*rowLen {
			return nil, fmt.Errorf("convert: tensor %q: source %q returned %d values for %d rows of %d", t.Name, s.src, len(got), k, rowLen)
		}
		if k > 0 && &got[0] != &buf[0] {
			copy(buf, got)
		}
		off += k
		r += k
		if r-start == s.rows {
			start += s.rows
			si++
		}
	}
	if t.plan.colPerm != nil {
		tmp := make([]float32, rowLen)
		for i := int64(0); i < n; i++ {
			row := dst[i*rowLen : (i+1)*rowLen]
			copy(tmp, row)
			for j, p := range t.plan.colPerm {
				row[j] = tmp[p]
			}
		}
	}
	applyOp(t.plan.op, dst)
	return dst, nil
}

func applyOp(o op, x []float32) {
	switch o {
	case opAddOne:
		for i, v := range x {
			x[i] = v + 1
		}
	case opNegExp:
		for i, v := range x {
			x[i] = float32(-math.Exp(float64(v)))
		}
	}
}
