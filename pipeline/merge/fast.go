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
// (R+3)·2⁻²⁴·(|W| + Σ|u·v|): far below half a 16-bit ulp except where W and s·B·A nearly cancel (or for values
// within that distance of a rounding boundary, which then round to the neighbour of the exactly rounded
// result). The guard (guard.go) flags, while the kernels compute, every element whose bound could reach an
// ulp, and those are recomputed exactly as the float64 path does, so every value is within one ulp of the
// exactly rounded one.
// lowRank32Go and flag32Go are the specification; the AVX2 kernels do the same rounded multiplies and adds in
// the same order (no fused multiply-add) and the same guard comparisons, so both give identical bits.

// fastPlan reports whether pl takes the float32 path.
func fastPlan(pl *plan) bool {
	if pl.info.DType != pipeline.BF16 && pl.info.DType != pipeline.F16 || len(pl.ops) == 0 {
		return false
	}
	R := 0
	for _, o := range pl.ops {
		if o.kind != opLoRA {
			return false
		}
		R += o.rank
	}
	_, _, ok := guardScale(pl.info.DType, R)
	return ok
}

// fastFactors concatenates the ops' factors into u (rows × R; float64 for the guard's recomputation and
// float32 for the kernels) and float32 v (R × cols; A or B values, exact in float32), drops the per-op float64
// ones and computes the guard.
func fastFactors(pl *plan, ld *loaded) error {
	rows, cols := pl.info.Rows(), pl.info.RowLen()
	R := 0
	for _, lo := range ld.ops {
		R += lo.r
	}
	ld.r32 = R
	ld.u64 = make([]float64, rows*int64(R))
	ld.u32 = make([]float32, rows*int64(R))
	ld.v32 = make([]float32, int64(R)*cols)
	off := 0
	for i := range ld.ops {
		lo := &ld.ops[i]
		r := lo.r
		for row := int64(0); row < rows; row++ {
			for k := 0; k < r; k++ {
				u := lo.u[row*int64(r)+int64(k)]
				ld.u64[row*int64(R)+int64(off+k)] = u
				ld.u32[row*int64(R)+int64(off+k)] = float32(u)
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
	if err := guardFactors(pl.info.DType, ld, rows, cols); err != nil {
		return err
	}
	ld.bytes = int64(len(ld.u32)+len(ld.v32)+len(ld.ku)+len(ld.nv))*4 + int64(len(ld.u64))*8
	return nil
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
// u[i*r:(i+1)*r], and writes the rows' guard masks (flag32Go with g's ku[i], nv and floor) into g.mask. On
// amd64 four rows share each load of v.
func addLowRank32Rows(x, u, v []float32, n, cols, r int, g *guard) {
	if r == 0 || cols == 0 || n == 0 {
		return
	}
	x = x[:n*cols]
	u = u[:n*r]
	v = v[:r*cols]
	tiles := g.tiles(cols)
	for i := lowRank32x4Vec(x, u, v, n, cols, r, g); i < n; i++ {
		row := x[i*cols : (i+1)*cols]
		lowRank32Go(row, u[i*r:(i+1)*r], v, cols)
		flag32Go(row, 0, g.ku[i], g.nv, g.floor, g.mask[i*tiles:(i+1)*tiles])
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
// (n·cols·2 bytes). The base's bytes are read straight into out and rewritten in place. Elements the guard
// flags are recomputed in float64 (guard.go).
func (s *Source) rows16(ctx context.Context, pl *plan, row0, n int64, out []byte) error {
	ld, err := s.cache.get(ctx, s, pl)
	if err != nil {
		return err
	}
	cols, dt := pl.info.RowLen(), pl.info.DType
	sb := subRows(cols)
	xp := s.f32s.get(sb * cols)
	defer s.f32s.put(xp)
	tiles := (cols + 15) / 16
	mp := s.masks.get(sb * tiles)
	defer s.masks.put(mp)
	var wp *[]float32 // a copy of the base values when the base gives float32 values (the guard needs them)
	if s.raw == nil {
		wp = s.f32s.get(sb * cols)
		defer s.f32s.put(wp)
	}
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
	protect := func(fn func() error) error { return fn() } // mapped reads turn a fault into an error
	if bm != nil {
		protect = bm.guard
	}
	for r := row0; r < row0+n; r += sb {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(sb, row0+n-r)
		x := (*xp)[:k*cols]
		o := out[(r-row0)*cols*2 : (r-row0+k)*cols*2]
		g := &guard{ku: ld.ku[r : r+k], nv: ld.nv, floor: ld.floor, mask: (*mp)[:k*tiles]}
		var src []byte  // the k rows' base bytes, or nil when the base gives float32 values
		var w []float32 // the base's float32 values (when src is nil), kept for the guard
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
			w = append((*wp)[:0], x...)
		}
		// baseAt is the base value of element (i, j) of the block while src (or w) still holds it.
		baseAt := func(i, j int64) (float32, error) {
			if src == nil {
				return w[i*cols+j], nil
			}
			b := binary.LittleEndian.Uint16(src[2*(i*cols+j):])
			if dt == pipeline.BF16 {
				return math.Float32frombits(uint32(b) << 16), nil
			}
			return half.F16ToF32(b), nil
		}
		// BF16 rows in groups of four in one pass (fused4BF16AVX2), the rest (and a group that overflows,
		// to handle it) through float32 scratch.
		var done int64
		if src != nil && dt == pipeline.BF16 {
			if err := protect(func() error {
				done = int64(fusedBF16Rows(o, src, ld.u32[r*R:(r+k)*R], ld.v32, int(k), int(cols), int(R), g))
				fusedBase := baseAt
				if raw != nil { // in place: the fused rows' base values are gone from src; read the few needed again
					fusedBase = func(i, j int64) (float32, error) {
						var b [2]byte
						if _, err := raw.ReadAt(b[:], ((r+i)*cols+j)*2); err != nil {
							return 0, fmt.Errorf("merge: tensor %q: read: %w", pl.src, err)
						}
						return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[:])) << 16), nil
					}
				}
				return ld.fixFlagged(pl, g, r, done, cols, fusedBase, func(i, j int64, y float32) {
					binary.LittleEndian.PutUint16(o[2*(i*cols+j):], uint16(math.Float32bits(y)>>16))
				})
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
		rest := g.from(done, tiles)
		restBase := func(i, j int64) (float32, error) { return baseAt(done+i, j) }
		err := protect(func() error {
			if src != nil {
				decode16(dt, x, src[done*cols*2:])
			}
			addLowRank32Rows(x, ld.u32[(r+done)*R:(r+k)*R], ld.v32, int(k-done), int(cols), int(R), rest)
			if err := ld.fixFlagged(pl, rest, r+done, k-done, cols, restBase, func(i, j int64, y float32) { x[i*cols+j] = y }); err != nil {
				return err
			}
			// A value that is not finite in float32 (the adapter overflows float32, or NaN) may still be
			// finite exactly: recompute it; encode16 stops at each such value.
			for off := int64(0); ; {
				j := encode16(dt, o[(done*cols+off)*2:], x[off:])
				if j < 0 {
					return nil
				}
				at := off + int64(j)
				b, err := restBase(at/cols, at%cols)
				if err != nil {
					return err
				}
				y, v, ok := ld.exact(dt, b, r+done+at/cols, at%cols, cols)
				if !ok {
					return notFinite(pl, r+done, cols, int(at), v)
				}
				x[at], off = y, at
			}
		})
		if err != nil {
			return err
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
