package merge

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// loaded holds one tensor's adapter data in the layout the row kernel wants, in float64.
type loaded struct {
	ops   []loadedOp
	bytes int64
	// the float32 path (fastPlan): every op's factors concatenated, R = r32 columns of u, rows of v
	r32      int
	u32, v32 []float32
}

type loadedOp struct {
	r        int
	u        []float64 // rows × r, already multiplied by the op's scale
	v        []float64 // r × cols
	mag      []float64 // DoRA magnitude
	colScale []float64 // opDoRACol: m[j]/‖V[:,j]‖
	vec      []float64 // opAddVec: scale·lora_B.bias
}

// readAll reads a whole adapter tensor as float32.
func readAll(a Adapter, key string) ([]float32, error) {
	v, err := a.st.ReadFloat32(key, nil)
	if err != nil {
		return nil, fmt.Errorf("merge: adapter %s: %w", a.Dir, err)
	}
	return v, nil
}

// load reads the adapter factors of every op of pl; DoRA column norms need one extra pass over the tensor.
func (s *Source) load(ctx context.Context, pl *plan) (*loaded, error) {
	rows, cols := pl.info.Rows(), pl.info.RowLen()
	ld := &loaded{ops: make([]loadedOp, len(pl.ops))}
	for i, o := range pl.ops {
		a := s.adapters[o.ad]
		lo := &ld.ops[i]
		switch o.kind {
		case opReplace:
			continue
		case opAddVec:
			b, err := readAll(a, o.a)
			if err != nil {
				return nil, err
			}
			lo.vec = make([]float64, len(b))
			for j, x := range b {
				lo.vec[j] = o.scale * float64(x)
			}
			ld.bytes += int64(len(b)) * 8
			continue
		}
		fa, err := readAll(a, o.a)
		if err != nil {
			return nil, err
		}
		fb, err := readAll(a, o.b)
		if err != nil {
			return nil, err
		}
		r := o.rank
		lo.r = r
		lo.u = make([]float64, rows*int64(r))
		lo.v = make([]float64, int64(r)*cols)
		if !o.transposed {
			// U = s·B [out,r], V = A [r,in].
			for i, x := range fb {
				lo.u[i] = o.scale * float64(x)
			}
			for i, x := range fa {
				lo.v[i] = float64(x)
			}
		} else {
			// A is [r,rows], B is [cols,r]: U[i,k] = s·A[k,i], V[k,j] = B[j,k].
			for k := 0; k < r; k++ {
				for i := int64(0); i < rows; i++ {
					lo.u[i*int64(r)+int64(k)] = o.scale * float64(fa[int64(k)*rows+i])
				}
			}
			for j := int64(0); j < cols; j++ {
				for k := 0; k < r; k++ {
					lo.v[int64(k)*cols+j] = float64(fb[j*int64(r)+int64(k)])
				}
			}
		}
		ld.bytes += int64(len(lo.u)+len(lo.v)) * 8
		if o.mag != "" {
			m, err := readAll(a, o.mag)
			if err != nil {
				return nil, err
			}
			lo.mag = make([]float64, len(m))
			for j, x := range m {
				lo.mag[j] = float64(x)
			}
			ld.bytes += int64(len(m)) * 8
		}
	}
	if fastPlan(pl) {
		fastFactors(pl, ld)
		return ld, nil
	}
	for i, o := range pl.ops {
		if o.kind != opDoRACol {
			continue
		}
		if err := s.columnNorms(ctx, pl, ld, i); err != nil {
			return nil, err
		}
	}
	return ld, nil
}

// columnNorms computes colScale of op i: the L2 norm of each column of V = (value before op i) + ΔW over all
// rows, as PEFT's get_weight_norm does for Embedding (and Conv1D-layout) DoRA.
func (s *Source) columnNorms(ctx context.Context, pl *plan, ld *loaded, i int) error {
	rows, cols := pl.info.Rows(), pl.info.RowLen()
	ss := make([]float64, cols)
	per := max(1, int64(s.blockBytes)/(4*max(cols, 1)))
	x := make([]float64, min(per, rows)*cols)
	lo := &ld.ops[i]
	for r0 := int64(0); r0 < rows; r0 += per {
		n := min(per, rows-r0)
		xb := x[:n*cols]
		if err := s.block(ctx, pl, ld, r0, n, cols, i, xb); err != nil {
			return err
		}
		addLowRankRows(xb, lo.u[r0*int64(lo.r):(r0+n)*int64(lo.r)], lo.v, int(n), int(cols), lo.r)
		for q := int64(0); q < n; q++ {
			for j, v := range xb[q*cols : (q+1)*cols] {
				ss[j] = math.FMA(v, v, ss[j])
			}
		}
	}
	lo.colScale = make([]float64, cols)
	for j := range ss {
		norm := math.Sqrt(ss[j])
		if norm == 0 {
			return formatErr(s.adapters[pl.ops[i].ad].Dir, "DoRA: column %d of %q has zero norm; m/‖W+ΔW‖ is undefined", j, pl.info.Name)
		}
		lo.colScale[j] = lo.mag[j] / norm
	}
	ld.bytes += int64(cols) * 8
	return nil
}

// defaultBlockBytes is the float32 size of the row blocks the output stage and the DoRA pass work in.
const defaultBlockBytes = 4 << 20

var blockPool = sync.Pool{New: func() any { return new([]float64) }}

// block computes rows [row0, row0+n) of pl after ops[:upto] into x (n·cols float64 values).
func (s *Source) block(ctx context.Context, pl *plan, ld *loaded, row0, n, cols int64, upto int, x []float64) error {
	start := 0
	for i := upto - 1; i >= 0; i-- {
		if pl.ops[i].kind == opReplace {
			start = i
			break
		}
	}
	var err error
	switch {
	case upto > 0 && pl.ops[start].kind == opReplace:
		o := pl.ops[start]
		a := s.adapters[o.ad]
		err = readRawF64(a.st, o.a, row0*cols, x)
		if err != nil {
			err = fmt.Errorf("merge: adapter %s: %w", a.Dir, err)
		}
		start++
	case s.raw != nil:
		err = readRawF64(s.raw, pl.src, row0*cols, x)
	default:
		fp := f32Pool.Get().(*[]float32)
		var f []float32
		f, err = s.base.ReadRows(ctx, pl.src, row0, n, *fp)
		if err == nil {
			*fp = f
			for i, v := range f[:len(x)] {
				x[i] = float64(v)
			}
		}
		f32Pool.Put(fp)
	}
	if err != nil {
		return err
	}
	for k := start; k < upto; k++ {
		if err := applyBlock(&pl.ops[k], &ld.ops[k], row0, n, cols, x); err != nil {
			return fmt.Errorf("merge: tensor %q: %w", pl.info.Name, err)
		}
	}
	return nil
}

// rows computes rows [row0, row0+n) of a merged tensor, rounded to its dtype, and hands them to out as float64.
func (s *Source) rows(ctx context.Context, pl *plan, row0, n int64, out func(x []float64) error) error {
	ld, err := s.cache.get(ctx, s, pl)
	if err != nil {
		return err
	}
	cols := pl.info.RowLen()
	xp := blockPool.Get().(*[]float64)
	defer blockPool.Put(xp)
	if int64(cap(*xp)) < n*cols {
		*xp = make([]float64, n*cols)
	}
	x := (*xp)[:n*cols]
	if err := s.block(ctx, pl, ld, row0, n, cols, len(pl.ops), x); err != nil {
		return err
	}
	return out(x)
}

func notFinite(pl *plan, row0, cols int64, j int, v float64) error {
	return fmt.Errorf("merge: tensor %q [%d, %d]: merged value %g is not finite in %s (the adapter overflows the weight)", pl.info.Name, row0+int64(j)/cols, int64(j)%cols, v, pl.info.DType)
}

// readRawF64 reads len(x) values of a tensor starting at element off straight from its bytes.
func readRawF64(st *safetensors.Checkpoint, name string, off int64, x []float64) error {
	t, ok := st.Tensor(name)
	if !ok {
		return fmt.Errorf("no tensor %q", name)
	}
	if !t.DType.Float() {
		return fmt.Errorf("tensor %q is %s, not a float tensor", name, t.DType)
	}
	raw, err := st.Raw(name)
	if err != nil {
		return err
	}
	es := t.DType.Bits() / 8
	bp := bytePool.Get().(*[]byte)
	defer bytePool.Put(bp)
	buf := *bp
	per := int64(len(buf)) / es
	pos := off * es
	count := int64(len(x))
	for i := int64(0); i < count; {
		k := min(per, count-i)
		b := buf[:k*es]
		if _, err := raw.ReadAt(b, pos); err != nil {
			return fmt.Errorf("tensor %q: read: %w", name, err)
		}
		decodeF64(t.DType, x[i:i+k], b)
		i += k
		pos += k * es
	}
	return nil
}

func decodeF64(dt safetensors.DType, dst []float64, b []byte) {
	switch dt {
	case safetensors.BF16:
		for i := decodeBF16Vec(dst, b); i < len(dst); i++ {
			dst[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
		}
	case safetensors.F16:
		for i := range dst {
			dst[i] = float64(half.F16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
		}
	case safetensors.F32:
		for i := range dst {
			dst[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
	}
}

// encodeBlock rounds x to dtype and writes it little-endian into dst (len(x)·size bytes); it returns the
// index of the first value that is not finite in dtype, or -1.
func encodeBlock(dtype pipeline.DType, dst []byte, x []float64) int {
	switch dtype {
	case pipeline.BF16:
		dst = dst[:2*len(x)]
		for j := 0; j < len(x); {
			if done := encodeBF16Vec(dst[2*j:], x[j:]); done > 0 {
				j += done
				continue
			}
			// The group the vector path refused (or the tail): value by value.
			for end := min(j+8, len(x)); j < end; j++ {
				h := bf16(x[j])
				if h&0x7F80 == 0x7F80 {
					return j
				}
				binary.LittleEndian.PutUint16(dst[2*j:], h)
			}
		}
	case pipeline.F16:
		dst = dst[:2*len(x)]
		for j, v := range x {
			h := half.F32ToF16(toOdd32(v))
			if h&0x7C00 == 0x7C00 {
				return j
			}
			binary.LittleEndian.PutUint16(dst[2*j:], h)
		}
	case pipeline.F32:
		dst = dst[:4*len(x)]
		for j, v := range x {
			b := math.Float32bits(float32(v))
			if b&0x7F800000 == 0x7F800000 {
				return j
			}
			binary.LittleEndian.PutUint32(dst[4*j:], b)
		}
	default:
		return 0
	}
	return -1
}

// bf16 rounds v once to bfloat16 bits (see round).
func bf16(v float64) uint16 {
	f := float32(v)
	b := math.Float32bits(f)
	if b&0xFFFF == 0x8000 && float64(f) != v {
		b = math.Float32bits(toOdd32(v))
	}
	return half.F32ToBF16(math.Float32frombits(b))
}

// applyBlock applies one op to n rows (starting at tensor row row0) held in x.
func applyBlock(o *op, lo *loadedOp, row0, n, cols int64, x []float64) error {
	if o.kind == opAddVec {
		for i := int64(0); i < n; i++ {
			row := x[i*cols : (i+1)*cols]
			for j := range row {
				row[j] += lo.vec[j]
			}
		}
		return nil
	}
	r := int64(lo.r)
	addLowRankRows(x, lo.u[row0*r:(row0+n)*r], lo.v, int(n), int(cols), lo.r)
	switch o.kind {
	case opDoRARow:
		for i := int64(0); i < n; i++ {
			row := x[i*cols : (i+1)*cols]
			var ss float64
			for _, v := range row {
				ss = math.FMA(v, v, ss)
			}
			norm := math.Sqrt(ss)
			if norm == 0 {
				return fmt.Errorf("DoRA: row %d has zero norm; m/‖W+ΔW‖ is undefined", row0+i)
			}
			f := lo.mag[row0+i] / norm
			for j := range row {
				row[j] *= f
			}
		}
	case opDoRACol:
		for i := int64(0); i < n; i++ {
			row := x[i*cols : (i+1)*cols]
			for j := range row {
				row[j] *= lo.colScale[j]
			}
		}
	}
	return nil
}

// roundBlock rounds x into dst (see round) and returns the index of the first value that is not finite in
// dtype, or -1.
func roundBlock(dtype pipeline.DType, dst []float32, x []float64) int {
	dst = dst[:len(x)]
	switch dtype {
	case pipeline.BF16:
		for j, v := range x {
			h := bf16(v)
			if h&0x7F80 == 0x7F80 {
				return j
			}
			dst[j] = math.Float32frombits(uint32(h) << 16)
		}
	default:
		for j, v := range x {
			f, ok := round(dtype, v)
			if !ok {
				return j
			}
			dst[j] = f
		}
	}
	return -1
}

// round rounds v once, to nearest even, to dtype and returns it as float32; ok is false when the result is
// not finite. For BF16, float32(v) is already correct unless it landed exactly on a bf16 midpoint (low 16
// bits 0x8000) without being equal to v; that case, and F16, go through a float32 rounded to odd, which makes
// the second rounding correct (24 bits ≥ 2 + the target's 8 or 11).
func round(dtype pipeline.DType, v float64) (float32, bool) {
	switch dtype {
	case pipeline.F32:
		f := float32(v)
		b := math.Float32bits(f)
		return f, b&0x7F800000 != 0x7F800000
	case pipeline.BF16:
		h := bf16(v)
		return math.Float32frombits(uint32(h) << 16), h&0x7F80 != 0x7F80
	case pipeline.F16:
		h := half.F32ToF16(toOdd32(v))
		return half.F16ToF32(h), h&0x7C00 != 0x7C00
	}
	return 0, false
}

// toOdd32 converts v to float32 rounding to odd: truncate, and set the last bit when bits were dropped.
func toOdd32(v float64) float32 {
	f := float32(v)
	if float64(f) == v || math.IsNaN(v) {
		return f
	}
	if math.Abs(float64(f)) > math.Abs(v) {
		f = math.Nextafter32(f, 0)
	}
	return math.Float32frombits(math.Float32bits(f) | 1)
}

var bytePool = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
