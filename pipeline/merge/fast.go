package merge

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline"
)

// The float32 path: a 16-bit (BF16/F16) tensor that only LoRA updates change is computed as
//
//	x[j] = float32(u[k]·v[k,j]) + x[j]    for k = 0, 1, …, R-1 in order (every op's rank, adapters in order)
//
// with u = float32(weight·scale·B) and v = A, starting from the base value (exact in float32), and the float32
// result is rounded once, to nearest even, to the tensor's dtype. The error before that rounding is at most
// (R+3)·2⁻²⁴·(|W| + Σ|u·v|), far below half a 16-bit ulp except for values within that distance of a rounding
// boundary, which may then round to the neighbour of the exactly rounded float64 result.
// lowRank32Go is the specification; the AVX2 kernel does the same rounded multiplies and adds in the same
// order (no fused multiply-add), so both give identical bits.

// fastPlan reports whether pl takes the float32 path.
func fastPlan(pl *plan) bool {
	if pl.info.DType != pipeline.BF16 && pl.info.DType != pipeline.F16 || len(pl.ops) == 0 {
		return false
	}
	for _, o := range pl.ops {
		if o.kind != opLoRA {
			return false
		}
	}
	return true
}

// fastFactors concatenates the ops' float64 factors into float32 u (rows × R) and v (R × cols) and drops
// the float64 ones.
func fastFactors(pl *plan, ld *loaded) {
	rows, cols := pl.info.Rows(), pl.info.RowLen()
	R := 0
	for _, lo := range ld.ops {
		R += lo.r
	}
	ld.r32 = R
	ld.u32 = make([]float32, rows*int64(R))
	ld.v32 = make([]float32, int64(R)*cols)
	off := 0
	for i := range ld.ops {
		lo := &ld.ops[i]
		r := lo.r
		for row := int64(0); row < rows; row++ {
			for k := 0; k < r; k++ {
				ld.u32[row*int64(R)+int64(off+k)] = float32(lo.u[row*int64(r)+int64(k)])
			}
		}
		for k := 0; k < r; k++ {
			for j := int64(0); j < cols; j++ {
				ld.v32[int64(off+k)*cols+j] = float32(lo.v[int64(k)*cols+j])
			}
		}
		off += r
		lo.u, lo.v = nil, nil
	}
	ld.bytes = int64(len(ld.u32)+len(ld.v32)) * 4
}

// lowRank32Go is the portable float32 kernel: x[j] = float32(u[k]·v[k*ld+j]) + x[j] for every k in order.
// v starts at the first column of x; ld is v's row stride.
func lowRank32Go(x, u, v []float32, ld int) {
	for k, uk := range u {
		vk := v[k*ld : k*ld+len(x)]
		for j := range x {
			x[j] = float32(uk*vk[j]) + x[j]
		}
	}
}

// addLowRank32Rows applies lowRank32Go to n consecutive rows of x (each cols long), row i using
// u[i*r:(i+1)*r]. On amd64 four rows share each load of v.
func addLowRank32Rows(x, u, v []float32, n, cols, r int) {
	if r == 0 || cols == 0 || n == 0 {
		return
	}
	x = x[:n*cols]
	u = u[:n*r]
	v = v[:r*cols]
	for i := lowRank32x4Vec(x, u, v, n, cols, r); i < n; i++ {
		lowRank32Go(x[i*cols:(i+1)*cols], u[i*r:(i+1)*r], v, cols)
	}
}

// decode16 widens little-endian BF16 or F16 values to float32 (exact).
func decode16(dtype pipeline.DType, dst []float32, b []byte) {
	if dtype == pipeline.BF16 {
		for i := decodeBF16F32Vec(dst, b); i < len(dst); i++ {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return
	}
	for i := range dst {
		dst[i] = half.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
}

// encode16 rounds x to BF16 or F16 (nearest even) into dst and returns the index of the first value that is
// not finite in the dtype, or -1.
func encode16(dtype pipeline.DType, dst []byte, x []float32) int {
	dst = dst[:2*len(x)]
	if dtype == pipeline.BF16 {
		for j := 0; j < len(x); {
			if done := encodeF32BF16Vec(dst[2*j:], x[j:]); done > 0 {
				j += done
				continue
			}
			for end := min(j+8, len(x)); j < end; j++ {
				if math.Float32bits(x[j])&0x7F800000 == 0x7F800000 {
					return j
				}
				h := half.F32ToBF16(x[j])
				if h&0x7F80 == 0x7F80 {
					return j
				}
				binary.LittleEndian.PutUint16(dst[2*j:], h)
			}
		}
		return -1
	}
	for j, v := range x {
		h := half.F32ToF16(v)
		if h&0x7C00 == 0x7C00 {
			return j
		}
		binary.LittleEndian.PutUint16(dst[2*j:], h)
	}
	return -1
}

// subRows is how many rows the float32 path works on at once: about 256 KB of float32 (it stays in L2 with
// v), a multiple of four rows.
func subRows(cols int64) int64 {
	return max(4, (65536/max(cols, 1))&^3)
}

// rows16 computes rows [row0, row0+n) of a float32-path tensor into out, encoded in its dtype
// (n·cols·2 bytes). The base's bytes are read straight into out and rewritten in place.
func (s *Source) rows16(ctx context.Context, pl *plan, row0, n int64, out []byte) error {
	ld, err := s.cache.get(ctx, s, pl)
	if err != nil {
		return err
	}
	cols, dt := pl.info.RowLen(), pl.info.DType
	sb := subRows(cols)
	xp := s.f32s.get(sb * cols)
	defer s.f32s.put(xp)
	var raw interface {
		ReadAt([]byte, int64) (int, error)
	}
	var bm *baseMap
	var base int64 // offset of the tensor in bm
	if s.raw != nil {
		t, ok := s.raw.Tensor(pl.src)
		if !ok || t.DType != dt {
			return fmt.Errorf("merge: tensor %q: base tensor %q is missing or not %s", pl.info.Name, pl.src, dt)
		}
		if bm, base = s.maps.file(t.File), t.Offset; bm == nil {
			r, err := s.raw.Raw(pl.src)
			if err != nil {
				return fmt.Errorf("merge: %w", err)
			}
			raw = r
		}
	}
	R := int64(ld.r32)
	guard := func(fn func() error) error { return fn() }
	if bm != nil {
		guard = bm.guard
	}
	for r := row0; r < row0+n; r += sb {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(sb, row0+n-r)
		x := (*xp)[:k*cols]
		o := out[(r-row0)*cols*2 : (r-row0+k)*cols*2]
		var src []byte // the k rows' base bytes, or nil when the base gives float32 values
		switch {
		case bm != nil:
			if src, err = bm.bytes(base+r*cols*2, k*cols*2); err != nil {
				return err
			}
		case raw != nil:
			if _, err := raw.ReadAt(o, r*cols*2); err != nil {
				return fmt.Errorf("merge: tensor %q: read: %w", pl.src, err)
			}
			src = o // rewritten in place
		default:
			f, err := s.base.ReadRows(ctx, pl.src, r, k, x)
			if err != nil {
				return err
			}
			if len(f) != len(x) {
				return fmt.Errorf("merge: tensor %q: base returned %d values for %d rows, want %d", pl.src, len(f), k, len(x))
			}
			x = f
		}
		// BF16 rows in groups of four in one pass (fused4BF16AVX2), the rest (and a group that overflows,
		// to report it) through float32 scratch.
		var done int64
		if src != nil && dt == pipeline.BF16 {
			if err := guard(func() error {
				done = int64(fusedBF16Rows(o, src, ld.u32[r*R:(r+k)*R], ld.v32, int(k), int(cols), int(R)))
				return nil
			}); err != nil {
				return err
			}
		}
		if done == k {
			continue
		}
		if src != nil && dt == pipeline.BF16 && raw != nil { // in place: the fused pass may have rewritten what is left
			if _, err := raw.ReadAt(o[done*cols*2:], (r+done)*cols*2); err != nil {
				return fmt.Errorf("merge: tensor %q: read: %w", pl.src, err)
			}
		}
		x = x[done*cols:]
		if src != nil {
			if err := guard(func() error { decode16(dt, x, src[done*cols*2:]); return nil }); err != nil {
				return err
			}
		}
		addLowRank32Rows(x, ld.u32[(r+done)*R:(r+k)*R], ld.v32, int(k-done), int(cols), int(R))
		if j := encode16(dt, o[done*cols*2:], x); j >= 0 {
			return fmt.Errorf("merge: tensor %q [%d, %d]: merged value %g is not finite in %s (the adapter overflows the weight)", pl.info.Name, r+done+int64(j)/cols, int64(j)%cols, x[j], dt)
		}
	}
	return nil
}

// freeList keeps a few buffers for reuse for as long as its owner lives. Unlike a sync.Pool it is not
// emptied by the garbage collector, so multi-megabyte blocks are not allocated (and their fresh pages
// faulted in) again and again.
type freeList[T any] struct{ c chan *[]T }

func newFreeList[T any](n int) freeList[T] { return freeList[T]{make(chan *[]T, n)} }

// get returns a buffer of length n.
func (f freeList[T]) get(n int64) *[]T {
	select {
	case p := <-f.c:
		if int64(cap(*p)) >= n {
			*p = (*p)[:n]
			return p
		}
	default:
	}
	b := make([]T, n)
	return &b
}

// put gives a buffer back (or drops it when the list is full).
func (f freeList[T]) put(p *[]T) {
	select {
	case f.c <- p:
	default:
	}
}
