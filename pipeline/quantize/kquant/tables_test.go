package kquant

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"slices"
	"testing"
)

// tableBytes is the little-endian byte image of a table, as the C arrays
// are laid out on x86-64.
func tableBytes[T uint8 | uint16 | uint32 | uint64](t []T) []byte {
	var out []byte
	for _, v := range t {
		switch x := any(v).(type) {
		case uint8:
			out = append(out, x)
		case uint16:
			out = binary.LittleEndian.AppendUint16(out, x)
		case uint32:
			out = binary.LittleEndian.AppendUint32(out, x)
		case uint64:
			out = binary.LittleEndian.AppendUint64(out, x)
		}
	}
	return out
}

// TestTableDigests compares every transcribed table with the sha256 of the
// same table computed, independently of the Go transcription, from the C
// sources (ggml-common.h and ggml-quants.c at llama.cpp 34af94cd) by parsing
// their initialisers and packing the values little-endian.
func TestTableDigests(t *testing.T) {
	want := map[string]string{
		"kgrid_2bit_256":  "915952ebc4af8ddba8113583ca1316fc818843f7b825bbf1a25ae1c39bf0e16d",
		"kgrid_2bit_512":  "f66435966ca8d64e9e4a6e3c91e64afcf9015e700ec85962f527283ebae207b9",
		"kgrid_1bit_2048": "e9ffebfc997ad6023063a667c0bf4eedd8ebf7f56b3da399cbc7d1b1f7ea52c6",
		"kgrid_2bit_1024": "e6e75e121b65e8afa5c1f92b71463cfbe217b83893f438acde22fd5db06a43f7",
		"kgrid_256":       "c9678803c61b2210fbd8cbbb3f965a835409cd7d88a04d086d236261bd221d11",
		"kgrid_512":       "353274c58dd7d8dc5ee960dc8fc54ff9164eaf2b49206b841cd49415cf393f81",
		"kmask_iq2xs":     "5ac9831b2e30eb285ef34f8501620f878432d5c04331ad1ae47f977a83ba41a5",
		"ksigns_iq2xs":    "a76742a603f8beca5212ecce0f1f02f11a4887fd2f7c8b15aca0ea3eb3380c31",
		"iq2xxs_grid":     "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54",
		"iq2xs_grid":      "06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de",
		"iq2s_grid":       "e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88",
		"iq3xxs_grid":     "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d",
		"iq3s_grid":       "bd1af4945a1717c65610b0284e4628b9a1ba3b306fae3a06f6e5f597356e349f",
		"iq1s_grid":       "07540ffc1aeaf6ad4d97e96b0fcc765aae39671d4ae4a27bbd0e796fde167c6a",
	}
	got := map[string][]byte{
		"kgrid_2bit_256":  tableBytes(kgrid2bit256[:]),
		"kgrid_2bit_512":  tableBytes(kgrid2bit512[:]),
		"kgrid_1bit_2048": tableBytes(kgrid1bit2048[:]),
		"kgrid_2bit_1024": tableBytes(kgrid2bit1024[:]),
		"kgrid_256":       tableBytes(kgrid3bit256[:]),
		"kgrid_512":       tableBytes(kgrid3bit512[:]),
		"kmask_iq2xs":     tableBytes(kmaskIQ2XS[:]),
		"ksigns_iq2xs":    tableBytes(ksignsIQ2XS[:]),
		"iq2xxs_grid":     tableBytes(iq2xxsGrid[:]),
		"iq2xs_grid":      tableBytes(iq2xsGrid[:]),
		"iq2s_grid":       tableBytes(iq2sGrid[:]),
		"iq3xxs_grid":     tableBytes(iq3xxsGrid[:]),
		"iq3s_grid":       tableBytes(iq3sGrid[:]),
		"iq1s_grid":       tableBytes(iq1sGrid[:]),
	}
	for name, w := range want {
		sum := sha256.Sum256(got[name])
		if hex.EncodeToString(sum[:]) != w {
			t.Errorf("%s: sha256 %x, C source gives %s", name, sum, w)
		}
	}
}

// TestTableRelations checks the two independently stored forms of each
// lattice against each other: the packed level vectors that
// ggml_quantize_init expands (ggml-quants.c) and the grids the dequantizers
// index (ggml-common.h) must agree entry by entry, each level standing for
// one fixed grid value. It also checks what the init relies on: the packed
// grids are strictly increasing (so every point is unique and kmap is
// well defined) and use only the levels the dequantized grids have.
func TestTableRelations(t *testing.T) {
	type rel struct {
		name   string
		packed []uint16
		grid   []uint64
		dims   int
		bits   int
		values []uint8 // grid byte for each level
	}
	u32 := func(g []uint32) []uint64 {
		out := make([]uint64, len(g))
		for i, v := range g {
			out[i] = uint64(v)
		}
		return out
	}
	iq3xxsLevels := []uint8{4, 12, 20, 28, 36, 44, 52, 62}
	iq3sLevels := []uint8{1, 3, 5, 7, 9, 11, 13, 15}
	rels := []rel{
		{"iq2xxs", kgrid2bit256[:], iq2xxsGrid[:], 8, 2, []uint8{0x08, 0x19, 0x2b}},
		{"iq2xs", kgrid2bit512[:], iq2xsGrid[:], 8, 2, []uint8{0x08, 0x19, 0x2b}},
		{"iq2s", kgrid2bit1024[:], iq2sGrid[:], 8, 2, []uint8{0x08, 0x19, 0x2b}},
		{"iq1s", kgrid1bit2048[:], iq1sGrid[:], 8, 2, []uint8{0xff, 0x00, 0x01}}, // int8 -1, 0, 1
		{"iq3xxs", kgrid3bit256[:], u32(iq3xxsGrid[:]), 4, 3, iq3xxsLevels},
		{"iq3s", kgrid3bit512[:], u32(iq3sGrid[:]), 4, 3, iq3sLevels},
	}
	for _, r := range rels {
		if len(r.packed) != len(r.grid) {
			t.Fatalf("%s: %d packed entries, %d grid entries", r.name, len(r.packed), len(r.grid))
		}
		for i, p := range r.packed {
			if i > 0 && p <= r.packed[i-1] {
				t.Fatalf("%s: packed grid not strictly increasing at %d", r.name, i)
			}
			for k := 0; k < r.dims; k++ {
				l := int(p>>(r.bits*k)) & (1<<r.bits - 1)
				if l >= len(r.values) {
					t.Fatalf("%s entry %d: level %d out of range", r.name, i, l)
				}
				if b := uint8(r.grid[i] >> (8 * k)); b != r.values[l] {
					t.Fatalf("%s entry %d coordinate %d: grid byte %#x, level %d stands for %#x", r.name, i, k, b, l, r.values[l])
				}
			}
			if r.dims == 4 && r.grid[i]>>32 != 0 {
				t.Fatalf("%s entry %d: high bytes set", r.name, i)
			}
		}
	}
	for j, m := range kmaskIQ2XS {
		if m != 1<<j {
			t.Errorf("kmask_iq2xs[%d] = %d", j, m)
		}
	}
	for i, s := range ksignsIQ2XS {
		// 7 sign bits and their parity as the 8th.
		if want := uint8(i) | uint8(bits.OnesCount8(uint8(i))&1)<<7; s != want {
			t.Errorf("ksigns_iq2xs[%d] = %d, want %d", i, s, want)
		}
	}
}

// literalNeighbours is ggml's neighbour search for one level vector, as
// written in iq2xs_init_impl / iq3xs_init_impl: all (distance, index) pairs
// sorted, then every entry up to the nwant-th distinct distance.
func literalNeighbours(dist []int, nwant int) []uint16 {
	type pair struct{ d2, j int }
	ps := make([]pair, len(dist))
	for j, d := range dist {
		ps[j] = pair{d, j}
	}
	slices.SortFunc(ps, func(a, b pair) int {
		if a.d2 != b.d2 {
			return a.d2 - b.d2
		}
		return a.j - b.j
	})
	var out []uint16
	d2 := ps[0].d2
	nhave := 1
	for _, p := range ps {
		if p.d2 > d2 {
			if nhave == nwant {
				break
			}
			d2 = p.d2
			nhave++
		}
		out = append(out, uint16(p.j))
	}
	return out
}

// TestLatticeInit compares the lattices built by newLattice8/newLattice4
// with a literal port of ggml's init loop (distance by distance, full
// sort) on every level vector of the IQ3 lattices and on a stride of the
// IQ2/IQ1 ones, and checks the map of the grid points.
func TestLatticeInit(t *testing.T) {
	stride := 17
	if testing.Short() {
		stride = 127
	}
	check8 := func(name string, g *lattice8, nwant int) {
		for j, p := range g.points {
			u := 0
			for k := 0; k < 8; k++ {
				u |= int(p[k]-1) / 2 << (2 * k)
			}
			if g.kmap[u] != int32(j) {
				t.Fatalf("%s: kmap of grid point %d is %d", name, j, g.kmap[u])
			}
		}
		dist := make([]int, len(g.points))
		for i := 0; i < iq2KmapSize; i += stride {
			if g.kmap[i] >= 0 {
				continue
			}
			for j, p := range g.points {
				d2 := 0
				for k := 0; k < 8; k++ {
					d := int(p[k]) - (2*((i>>(2*k))&3) + 1)
					d2 += d * d
				}
				dist[j] = d2
			}
			if want, got := literalNeighbours(dist, nwant), g.neighboursOf(i); !slices.Equal(want, got) {
				t.Fatalf("%s: neighbours of %#x: %v, ggml's loop gives %v", name, i, got, want)
			}
		}
	}
	check4 := func(name string, g *lattice4, nwant int) {
		for j, p := range g.points {
			u := 0
			for k := 0; k < 4; k++ {
				u |= int(p[k]-1) / 2 << (3 * k)
			}
			if g.kmap[u] != int32(j) {
				t.Fatalf("%s: kmap of grid point %d is %d", name, j, g.kmap[u])
			}
		}
		dist := make([]int, len(g.points))
		for i := 0; i < iq3KmapSize; i++ {
			if g.kmap[i] >= 0 {
				continue
			}
			for j, p := range g.points {
				d2 := 0
				for k := 0; k < 4; k++ {
					d := int(p[k]) - (2*((i>>(3*k))&7) + 1)
					d2 += d * d
				}
				dist[j] = d2
			}
			if want, got := literalNeighbours(dist, nwant), g.neighboursOf(i); !slices.Equal(want, got) {
				t.Fatalf("%s: neighbours of %#x: %v, ggml's loop gives %v", name, i, got, want)
			}
		}
	}
	check8("iq2xxs", iq2xxsLattice(), 2)
	check8("iq2xs", iq2xsLattice(), 2)
	check8("iq2s", iq2sLattice(), 1)
	check8("iq1", iq1Lattice(), 3)
	check4("iq3xxs", iq3xxsLattice(), 2)
	check4("iq3s", iq3sLattice(), 3)
}
