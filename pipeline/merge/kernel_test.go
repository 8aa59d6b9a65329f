package merge

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// TestAddLowRank checks the blocked kernel against a plain triple loop on odd sizes.
func TestAddLowRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, cols := range []int{1, 3, 4, 5, 15, 16, 17, 31, 32, 33, 64, 131, 2048} {
		for _, r := range []int{1, 2, 7, 16} {
			x := make([]float64, cols)
			u := make([]float64, r)
			v := make([]float64, r*cols)
			for i := range x {
				x[i] = rng.NormFloat64()
			}
			for i := range u {
				u[i] = rng.NormFloat64()
			}
			for i := range v {
				v[i] = rng.NormFloat64()
			}
			want := make([]float64, cols)
			for j := range cols {
				a := x[j]
				for k := range r {
					a = math.FMA(u[k], v[k*cols+j], a)
				}
				want[j] = a
			}
			x2 := append([]float64(nil), x...)
			lowRankGo(x2, u, v, cols)
			addLowRank(x, u, v)
			for j := range x2 {
				if x2[j] != want[j] {
					t.Fatalf("lowRankGo cols %d r %d: x[%d] = %v, want %v", cols, r, j, x2[j], want[j])
				}
			}
			for j := range x {
				if x[j] != want[j] {
					t.Fatalf("cols %d r %d: x[%d] = %v, want %v", cols, r, j, x[j], want[j])
				}
			}
		}
	}
}

// TestAddLowRankRows checks the four-row kernel (and its row and column tails) against lowRankGo.
func TestAddLowRankRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, n := range []int{1, 3, 4, 5, 9} {
		for _, cols := range []int{3, 8, 13, 16, 40, 130} {
			for _, r := range []int{1, 3, 16} {
				x := make([]float64, n*cols)
				u := make([]float64, n*r)
				v := make([]float64, r*cols)
				for _, s := range [][]float64{x, u, v} {
					for i := range s {
						s[i] = rng.NormFloat64()
					}
				}
				want := append([]float64(nil), x...)
				for i := range n {
					lowRankGo(want[i*cols:(i+1)*cols], u[i*r:(i+1)*r], v, cols)
				}
				addLowRankRows(x, u, v, n, cols, r)
				for i := range x {
					if x[i] != want[i] {
						t.Fatalf("n %d cols %d r %d: x[%d] = %v, want %v", n, cols, r, i, x[i], want[i])
					}
				}
			}
		}
	}
}

// TestEncodeBF16 checks the vector bf16 encoder against the scalar one, with ties, NaN, Inf and overflow mixed in.
func TestEncodeBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 63, 1000} {
		for trial := 0; trial < 50; trial++ {
			x := make([]float64, n)
			for i := range x {
				switch rng.IntN(12) {
				case 0: // float32 exactly on a bf16 midpoint, with or without more bits below
					f := math.Float32frombits(rng.Uint32()&0x3FFF0000 | 0x8000)
					x[i] = float64(f) + float64(rng.IntN(3)-1)*math.Exp2(-30)*float64(f)
				case 1:
					x[i] = 3.38e38 * float64(rng.IntN(3)-1)
				case 2, 3: // float32 just beside a midpoint, and exact bf16 values
					low := []uint32{0x7FFF, 0x8001, 0x0000, 0xFFFF, 0x0001}[rng.IntN(5)]
					x[i] = float64(math.Float32frombits(rng.Uint32()&0xBFFF0000 | low))
				default:
					x[i] = rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20))
				}
			}
			bad := -1
			if n > 0 && trial%5 == 0 {
				bad = rng.IntN(n)
				x[bad] = []float64{math.NaN(), math.Inf(1), 1e39}[trial%3]
			}
			got := make([]byte, 2*n)
			want := make([]byte, 2*n)
			gi := encodeBlock("BF16", got, x)
			wi := -1
			for j, v := range x {
				h := bf16(v)
				if h&0x7F80 == 0x7F80 {
					if wi < 0 {
						wi = j
					}
					break
				}
				binary.LittleEndian.PutUint16(want[2*j:], h)
			}
			if gi != wi {
				t.Fatalf("n %d: first non-finite at %d, want %d", n, gi, wi)
			}
			if wi < 0 && !bytes.Equal(got, want) {
				t.Fatalf("n %d: vector and scalar bf16 differ", n)
			}
		}
	}
}

// TestDecodeBF16 checks the vector bf16 decoder against the scalar conversion on every bit pattern.
func TestDecodeBF16(t *testing.T) {
	b := make([]byte, 2*65536+6)
	for i := 0; i < 65536; i++ {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(i))
	}
	got := make([]float64, 65539)
	decodeF64(safetensors.BF16, got, b)
	for i, v := range got {
		h := binary.LittleEndian.Uint16(b[2*i:])
		want := float64(math.Float32frombits(uint32(h) << 16))
		if math.Float64bits(v) != math.Float64bits(want) {
			t.Fatalf("bf16 %#04x: %v, want %v", h, v, want)
		}
	}
}

func BenchmarkAddLowRankRows(b *testing.B) {
	const n, cols, r = 64, 2048, 16
	x := make([]float64, n*cols)
	u := make([]float64, n*r)
	v := make([]float64, r*cols)
	b.SetBytes(n * cols * 2)
	for b.Loop() {
		addLowRankRows(x, u, v, n, cols, r)
	}
}

func BenchmarkAddLowRank(b *testing.B) {
	const cols, r = 2048, 16
	x := make([]float64, cols)
	u := make([]float64, r)
	v := make([]float64, r*cols)
	for i := range v {
		v[i] = float64(i%7) * 0.1
	}
	b.SetBytes(cols * 2) // one bf16 row
	for b.Loop() {
		addLowRank(x, u, v)
	}
}

func BenchmarkAddLowRankRowByRow(b *testing.B) {
	const n, cols, r = 64, 2048, 16
	x := make([]float64, n*cols)
	u := make([]float64, n*r)
	v := make([]float64, r*cols)
	b.SetBytes(n * cols * 2)
	for b.Loop() {
		for i := 0; i < n; i++ {
			addLowRank(x[i*cols:(i+1)*cols], u[i*r:(i+1)*r], v)
		}
	}
}

// TestMergePortablePath runs merges with the vector kernels switched off: the portable Go paths must give the
// same (naive-checked) results.
func TestMergePortablePath(t *testing.T) {
	if !haveAVX2FMA {
		t.Skip("the vector kernels are not in use on this machine anyway")
	}
	haveAVX2FMA = false
	defer func() { haveAVX2FMA = true }()
	for _, c := range mergeCases(t) {
		if c.name == "qwen2-bf16-rslora-patterns" || c.name == "tied-embedding-dora" {
			t.Run(c.name, func(t *testing.T) { runMergeCase(t, c) })
		}
	}
}
