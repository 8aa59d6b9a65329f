package tinymodel

import (
	"hash/fnv"
	"math"
)

// rng is splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and fully
// specified, unlike math/rand whose streams may change between Go versions.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// normal returns an approximately standard-normal value: the sum of four
// independent uniform 16-bit integers (Irwin-Hall, n=4), centred and scaled
// to unit variance. Tails are bounded at ±2√3, which suits random weights.
func (r *rng) normal() float64 {
	x := r.next()
	sum := float64(x&0xFFFF) + float64(x>>16&0xFFFF) + float64(x>>32&0xFFFF) + float64(x>>48)
	// Each term has variance (65536²-1)/12; the sum (65536²-1)/3.
	const invStd = 1.7320508075688772 / 65535.99999237061 // √3 / √(65536²-1)
	return (sum - 4*32767.5) * invStd
}

// uniform returns a value in [0, 1).
func (r *rng) uniform() float64 { return float64(r.next()>>11) / (1 << 53) }

// streamFor returns the generator of one named tensor.
func streamFor(seed uint64, name string) *rng {
	h := fnv.New64a()
	h.Write([]byte(name))
	r := &rng{s: seed*0x9E3779B97F4A7C15 ^ h.Sum64()}
	r.next()
	return r
}

// studentT3 returns a value of Student's t distribution with 3 degrees of
// freedom (heavy tails: a few values tens of times the typical one), from
// four of the generator's normals: z / sqrt((a² + b² + c²) / 3).
func (r *rng) studentT3() float64 {
	z := r.normal()
	a, b, c := r.normal(), r.normal(), r.normal()
	return z / math.Sqrt((a*a+b*b+c*c)/3+1e-12)
}
