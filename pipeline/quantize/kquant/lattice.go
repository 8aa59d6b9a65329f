package kquant

import "sync"

// The IQ1/IQ2/IQ3 quantizers search lattices ("grids") of 8-value (IQ1,
// IQ2) or 4-value (IQ3) vectors. ggml_quantize_init expands each packed grid
// table into its points, a map from every possible level vector to its grid
// index, and for every level vector that is not a grid point the list of its
// nearest grid points (iq2xs_init_impl and iq3xs_init_impl in ggml-quants.c).
// This file computes the same structures, once per grid, on first use.
//
// Layout, as in ggml: kmap[u] is the grid index of the level vector u when u
// is on the grid; otherwise kmap[u] = -(off+1), where neighbours[off] holds
// the number n of neighbours and neighbours[off+1 : off+1+n] their grid
// indices, ordered by (squared distance, index), containing every grid point
// whose distance is among the nwant smallest distinct distances to u.

// lattice8 is an expanded 8-dimensional grid (2 bits per level).
type lattice8 struct {
	points     [][8]int8  // each coordinate is 2*level+1
	levels     [][8]uint8 // the levels (0..2 in every grid of ggml)
	kmap       []int32
	neighbours []uint16
}

// lattice4 is an expanded 4-dimensional grid (3 bits per level).
type lattice4 struct {
	points     [][4]int8
	pointsF    [][4]float32 // the points as float32
	kmap       []int32
	neighbours []uint16
}

// neighboursOf returns the neighbour list of an off-grid level vector u
// (kmap[u] < 0).
func (g *lattice8) neighboursOf(u int) []uint16 {
	off := -int(g.kmap[u]) - 1
	n := int(g.neighbours[off])
	return g.neighbours[off+1 : off+1+n]
}

func (g *lattice4) neighboursOf(u int) []uint16 {
	off := -int(g.kmap[u]) - 1
	n := int(g.neighbours[off])
	return g.neighbours[off+1 : off+1+n]
}

// iq2KmapSize and iq3KmapSize are kmap_size of iq2xs_init_impl (one more
// than the largest packed level vector with levels 0..2, 0xAAAA) and of
// iq3xs_init_impl (all 4 x 3-bit vectors).
const (
	iq2KmapSize = 43692
	iq3KmapSize = 4096
)

var (
	latIQ2XXSOnce, latIQ2XSOnce, latIQ2SOnce, latIQ1Once sync.Once
	latIQ3XXSOnce, latIQ3SOnce                           sync.Once

	latIQ2XXS, latIQ2XS, latIQ2S, latIQ1 *lattice8
	latIQ3XXS, latIQ3S                   *lattice4
)

// The nwant values are those of the init functions: IQ1_S/IQ1_M 3, IQ2_S 1,
// IQ2_XXS/IQ2_XS 2; IQ3_XXS (256 points) 2, IQ3_S (512 points) 3.

func iq2xxsLattice() *lattice8 {
	latIQ2XXSOnce.Do(func() { latIQ2XXS = newLattice8(kgrid2bit256[:], 2) })
	return latIQ2XXS
}

func iq2xsLattice() *lattice8 {
	latIQ2XSOnce.Do(func() { latIQ2XS = newLattice8(kgrid2bit512[:], 2) })
	return latIQ2XS
}

func iq2sLattice() *lattice8 {
	latIQ2SOnce.Do(func() { latIQ2S = newLattice8(kgrid2bit1024[:], 1) })
	return latIQ2S
}

// iq1Lattice is shared by IQ1_S and IQ1_M (one iq2_data entry in ggml).
func iq1Lattice() *lattice8 {
	latIQ1Once.Do(func() { latIQ1 = newLattice8(kgrid1bit2048[:], 3) })
	return latIQ1
}

func iq3xxsLattice() *lattice4 {
	latIQ3XXSOnce.Do(func() { latIQ3XXS = newLattice4(kgrid3bit256[:], 2) })
	return latIQ3XXS
}

func iq3sLattice() *lattice4 {
	latIQ3SOnce.Do(func() { latIQ3S = newLattice4(kgrid3bit512[:], 3) })
	return latIQ3S
}

// newLattice8 is iq2xs_init_impl for one packed grid. The squared distance
// between a level vector and a grid point is the sum of two table lookups
// (one per group of four coordinates); testLattice in lattice_test.go checks
// the result against a literal port of ggml's loop and sort.
func newLattice8(kgrid []uint16, nwant int) *lattice8 {
	g := &lattice8{points: make([][8]int8, len(kgrid)), levels: make([][8]uint8, len(kgrid)),
		kmap: make([]int32, iq2KmapSize)}
	for k, packed := range kgrid {
		for i := 0; i < 8; i++ {
			l := int(packed>>(2*i)) & 3
			g.points[k][i] = int8(2*l + 1)
			g.levels[k][i] = uint8(l)
		}
	}
	for i := range g.kmap {
		g.kmap[i] = -1
	}
	for i, p := range g.points {
		index := 0
		for k := 0; k < 8; k++ {
			q := (int(p[k]) - 1) / 2
			index |= q << (2 * k)
		}
		g.kmap[index] = int32(i)
	}
	// half4[a][b]: squared distance between the 4-coordinate halves whose
	// levels are packed in the bytes a and b (coordinates 2*level+1).
	var half4 [256][256]uint16
	for a := 0; a < 256; a++ {
		for b := 0; b < 256; b++ {
			d := 0
			for k := 0; k < 4; k++ {
				da := 2*((a>>(2*k))&3) - 2*((b>>(2*k))&3)
				d += da * da
			}
			half4[a][b] = uint16(d)
		}
	}
	lo := make([]uint8, len(kgrid))
	hi := make([]uint8, len(kgrid))
	for j, packed := range kgrid {
		lo[j], hi[j] = uint8(packed), uint8(packed>>8)
	}
	dist := make([]uint16, len(kgrid))
	for i := range g.kmap {
		if g.kmap[i] >= 0 {
			continue
		}
		rl, rh := &half4[i&0xFF], &half4[(i>>8)&0xFF]
		for j := range dist {
			dist[j] = rl[lo[j]] + rh[hi[j]]
		}
		g.kmap[i] = -int32(len(g.neighbours) + 1)
		g.neighbours = appendNeighbours(g.neighbours, dist, nwant)
	}
	return g
}

// newLattice4 is iq3xs_init_impl for one packed grid.
func newLattice4(kgrid []uint16, nwant int) *lattice4 {
	g := &lattice4{points: make([][4]int8, len(kgrid)), pointsF: make([][4]float32, len(kgrid)),
		kmap: make([]int32, iq3KmapSize)}
	for k, packed := range kgrid {
		for i := 0; i < 4; i++ {
			l := int(packed>>(3*i)) & 7
			g.points[k][i] = int8(2*l + 1)
			g.pointsF[k][i] = float32(2*l + 1)
		}
	}
	for i := range g.kmap {
		g.kmap[i] = -1
	}
	for i, p := range g.points {
		index := 0
		for k := 0; k < 4; k++ {
			q := (int(p[k]) - 1) / 2
			index |= q << (3 * k)
		}
		g.kmap[index] = int32(i)
	}
	dist := make([]uint16, len(kgrid))
	var pos [4]int
	for i := range g.kmap {
		if g.kmap[i] >= 0 {
			continue
		}
		for k := 0; k < 4; k++ {
			pos[k] = 2*((i>>(3*k))&7) + 1
		}
		for j, p := range g.points {
			d2 := 0
			for k := 0; k < 4; k++ {
				d := int(p[k]) - pos[k]
				d2 += d * d
			}
			dist[j] = uint16(d2)
		}
		g.kmap[i] = -int32(len(g.neighbours) + 1)
		g.neighbours = appendNeighbours(g.neighbours, dist, nwant)
	}
	return g
}

// appendNeighbours appends one neighbour list (count, then indices) for the
// squared distances dist to every grid point: what ggml gets by sorting the
// (distance, index) pairs and keeping the entries whose distance is one of
// the nwant smallest distinct values, in that order.
func appendNeighbours(out []uint16, dist []uint16, nwant int) []uint16 {
	// The nwant smallest distinct distances, ascending.
	var want [3]uint16
	nhave := 0
	for {
		found := false
		var best uint16
		for _, d := range dist {
			if nhave > 0 && d <= want[nhave-1] {
				continue
			}
			if !found || d < best {
				best, found = d, true
			}
		}
		if !found {
			break
		}
		want[nhave] = best
		nhave++
		if nhave == nwant {
			break
		}
	}
	start := len(out)
	out = append(out, 0)
	for _, w := range want[:nhave] {
		for j, d := range dist {
			if d == w {
				out = append(out, uint16(j))
			}
		}
	}
	out[start] = uint16(len(out) - start - 1)
	return out
}
