package kquant

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// weightedBound is the largest |dequant(quant(x)) - x| allowed on the
// weighted paths, as a fraction of the block's largest |x|, for finite
// blocks with 1 <= max|x| <= 1e4 and importance weights within [0.5, 2]:
// loose sanity limits (about 1.5-2x the worst seen on adversarial random
// blocks). A weighted fit may trade a low-weight value's error for the
// others', so they are wider than the unweighted bounds; the lattice formats
// can even flip the sign of the cheapest value of 8.
var weightedBound = map[uint32]float64{
	TypeQ4_0: 0.2, TypeQ4_1: 0.25, TypeQ5_0: 0.12, TypeQ5_1: 0.15, TypeQ8_0: 0.0045,
	TypeQ2_K: 1.0, TypeQ3_K: 0.6, TypeQ4_K: 0.3, TypeQ5_K: 0.15, TypeQ6_K: 0.08,
	TypeIQ4_NL: 0.3, TypeIQ4_XS: 0.35,
	TypeIQ2_XXS: 2.5, TypeIQ2_XS: 2.5, TypeIQ2_S: 2.5, TypeIQ3_XXS: 2.5, TypeIQ3_S: 2.5,
	TypeIQ1_S: 2.5, TypeIQ1_M: 2.5, TypeTQ1_0: 0.51, TypeTQ2_0: 0.51,
}

// checkWeighted quantizes rows of x (row length len(im)) with f and im
// through the public entry point and through the plain reference, requires
// identical bytes and a repeatable result, dequantizes, and, when boundOK,
// checks the error bound per finite block.
func checkWeighted(t *testing.T, f Format, x, im []float32, boundOK bool) {
	t.Helper()
	n := len(im)
	if im == nil {
		n = f.BlockSize
	}
	q := make([]byte, f.RowBytes(len(x)))
	f.QuantizeWeighted(q, x, im)
	again := make([]byte, len(q))
	f.QuantizeWeighted(again, x, im)
	ref := make([]byte, len(q))
	weightedReference(f, ref, x, im, n)
	if !bytes.Equal(q, again) || !bytes.Equal(q, ref) {
		t.Fatalf("%s: public kernel not repeatable or differs from the reference\nx %v\nim %v", f.Name, x, im)
	}
	d := make([]float32, len(x))
	f.Dequantize(d, q)
	if !boundOK {
		return
	}
	for b := 0; b < len(x)/f.BlockSize; b++ {
		xb := x[b*f.BlockSize : (b+1)*f.BlockSize]
		db := d[b*f.BlockSize : (b+1)*f.BlockSize]
		amax := 0.0
		finite := true
		for _, v := range xb {
			a := math.Abs(float64(v))
			if !(a <= 1e4) {
				finite = false
			}
			amax = math.Max(amax, a)
		}
		if !finite || amax < 1 {
			continue
		}
		bound := weightedBound[f.Type] * amax
		for i := range xb {
			if e := math.Abs(float64(db[i]) - float64(xb[i])); !(e <= bound) {
				t.Fatalf("%s: value %d: %g -> %g, error %g > bound %g (block max %g)\nblock %v\nim %v",
					f.Name, i, xb[i], db[i], e, bound, amax, xb, im)
			}
		}
	}
}

// hostileWeights are importance values ggml does not check.
var hostileWeights = []float32{0, float32(math.Copysign(0, -1)), -1, -1e30, 1e-45, 1e38,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}

// TestWeightedHostile runs every format's weighted path on hostile values
// and hostile importance vectors: no panic, repeatable, equal to the
// reference.
func TestWeightedHostile(t *testing.T) {
	for _, f := range Formats() {
		n := 256
		vals := []func(i int) float32{
			func(i int) float32 { return specialValues[(i*7+i/n)%len(specialValues)] },
			func(i int) float32 { return float32(math.NaN()) },
			func(i int) float32 { return float32(math.Inf(1 - 2*(i%2))) },
			func(i int) float32 { return 1e30 * float32(i%5-2) },
			func(i int) float32 { return 1e-40 * float32(i%7-3) },
			func(i int) float32 { return 0 },
			func(i int) float32 { return float32(math.Sin(float64(i))) },
			func(i int) float32 { return 2e19 * float32(math.Sin(float64(i))) },
		}
		ims := []func(i int) float32{
			func(i int) float32 { return 1 },
			func(i int) float32 { return hostileWeights[i%len(hostileWeights)] },
			func(i int) float32 { return 0 },
			func(i int) float32 { return -float32(1 + i%3) },
			func(i int) float32 { return float32(math.NaN()) },
			func(i int) float32 { return float32(math.Inf(1)) },
		}
		for vi, vf := range vals {
			x := make([]float32, 2*n)
			for i := range x {
				x[i] = vf(i)
			}
			for ii, imf := range ims {
				im := make([]float32, n)
				for i := range im {
					im[i] = imf(i)
				}
				t.Run(f.Name, func(t *testing.T) {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("values %d, imatrix %d: panic %v", vi, ii, r)
						}
					}()
					checkWeighted(t, f, x, im, false)
				})
			}
		}
	}
}

// TestQuantizeWeightedAPI checks the dispatch rules of QuantizeWeighted:
// nil means Quantize, the types ggml quantizes without the matrix ignore
// it, the imatrix defines the row length, and misuse panics.
func TestQuantizeWeightedAPI(t *testing.T) {
	x := benchInput(4 * 512)
	im := benchImatrix(512)
	for _, f := range Formats() {
		if f.RequiresImatrix() != (f.Type == TypeIQ2_XXS || f.Type == TypeIQ2_XS || f.Type == TypeIQ1_S) {
			t.Errorf("%s: RequiresImatrix %v", f.Name, f.RequiresImatrix())
		}
		if RequiresImatrix(f.Type) != f.RequiresImatrix() {
			t.Errorf("%s: RequiresImatrix(id) and method disagree", f.Name)
		}
		got := make([]byte, f.RowBytes(len(x)))
		f.QuantizeWeighted(got, x, im)
		if !f.RequiresImatrix() {
			plain := make([]byte, len(got))
			f.Quantize(plain, x)
			nilIm := make([]byte, len(got))
			f.QuantizeWeighted(nilIm, x, nil)
			if !bytes.Equal(plain, nilIm) {
				t.Errorf("%s: QuantizeWeighted with nil differs from Quantize", f.Name)
			}
			ignores := f.Type == TypeQ8_0 || f.Type == TypeTQ1_0 || f.Type == TypeTQ2_0
			if bytes.Equal(plain, got) != ignores {
				t.Errorf("%s: weighted result equal to the plain one: %v, want %v", f.Name, bytes.Equal(plain, got), ignores)
			}
		}
		// Rows are independent: each row alone gives the same bytes.
		rb := f.RowBytes(512)
		for r := 0; r < 4; r++ {
			one := make([]byte, rb)
			f.QuantizeWeighted(one, x[r*512:(r+1)*512], im)
			if !bytes.Equal(one, got[r*rb:(r+1)*rb]) {
				t.Errorf("%s: row %d alone differs", f.Name, r)
			}
		}
	}
	mustPanic := func(what, want string, fn func()) {
		t.Helper()
		defer func() {
			r := recover()
			s, _ := r.(string)
			if !strings.Contains(s, want) {
				t.Errorf("%s: got panic %v, want one containing %q", what, r, want)
			}
		}()
		fn()
	}
	q4k, _ := ForName("Q4_K")
	q40, _ := ForName("Q4_0")
	iq2, _ := ForName("IQ2_XXS")
	mustPanic("partial block imatrix", "importance matrix of 100", func() { q4k.QuantizeWeighted(make([]byte, 1000), make([]float32, 200), make([]float32, 100)) })
	mustPanic("empty imatrix", "importance matrix of 0", func() { q4k.QuantizeWeighted(make([]byte, 144), make([]float32, 256), []float32{}) })
	mustPanic("rows", "not a whole number of 512-value rows", func() { q40.QuantizeWeighted(make([]byte, 1000), make([]float32, 768), make([]float32, 512)) })
	mustPanic("short dst", "dst has 287 bytes", func() { q40.QuantizeWeighted(make([]byte, 287), make([]float32, 512), make([]float32, 512)) })
	mustPanic("no imatrix", "requires an importance matrix", func() { iq2.Quantize(make([]byte, 66), make([]float32, 256)) })
	mustPanic("nil imatrix", "requires an importance matrix", func() { iq2.QuantizeWeighted(make([]byte, 66), make([]float32, 256), nil) })
}

// FuzzQuantizeWeighted: any values and any importance vector must quantize
// and dequantize without panicking, repeatably and as the reference does;
// finite blocks with moderate weights must round-trip within the bound.
// data[0] picks the format, data[1] the importance mode: 0 nil (ggml's
// NULL), 1 all ones, 2 weights 2^(b/128-1) in [0.5, 2) from the input bytes,
// 3 raw float bits from the input (hostile), 4 like 2 with every third
// weight zero. The error bound is checked in modes 0-2: with widely spread
// weights a weighted fit may legitimately sacrifice a low-weight value.
func FuzzQuantizeWeighted(f *testing.F) {
	seed := func(id, mode byte, vals ...float32) {
		b := []byte{id, mode}
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		f.Add(b)
	}
	for id := byte(0); id < byte(len(formats)); id++ {
		seed(id, 2, 1, -2, 3, -4, 0.5, 0.25, 7, -0.1)
		seed(id, 3, specialValues...)
		seed(id, 3, hostileWeights...)
		seed(id, 0, 0.3, -0.7, 0.1)
		seed(id, 4, 1e-39, -3e-39, 2e-39)
		seed(id, 1, 0)
	}
	// Build the lattices once per worker before the first input, so that no
	// single input pays for them (the fuzzer treats a slow input as hung).
	warmLattices()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 6 {
			return
		}
		fm := formats[int(data[0])%len(formats)]
		mode := data[1] % 5
		raw := data[2:]
		vals := make([]float32, len(raw)/4)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		if len(vals) == 0 {
			return
		}
		nb := 1
		if fm.BlockSize == 32 && len(vals) > 32 {
			nb = 2
		}
		n := nb * fm.BlockSize
		x := make([]float32, 2*n)
		for i := range x {
			x[i] = vals[(i*5)%len(vals)]
		}
		var im []float32
		boundOK := true
		switch mode {
		case 0:
			if fm.RequiresImatrix() {
				return
			}
		case 1:
			im = make([]float32, n)
			for i := range im {
				im[i] = 1
			}
		case 2, 4:
			im = make([]float32, n)
			for i := range im {
				im[i] = float32(math.Exp2(float64(raw[i%len(raw)])/128 - 1))
				if mode == 4 && i%3 == 0 {
					im[i] = 0
					boundOK = false
				}
			}
			boundOK = boundOK && mode == 2
		case 3:
			im = make([]float32, n)
			for i := range im {
				im[i] = vals[(i*3+1)%len(vals)]
			}
			boundOK = false
		}
		checkWeighted(t, fm, x, im, boundOK)
	})
}

func warmLattices() {
	iq2xxsLattice()
	iq2xsLattice()
	iq2sLattice()
	iq1Lattice()
	iq3xxsLattice()
	iq3sLattice()
}

// crossImatrix makes importance vectors of many kinds: lognormal, all equal,
// sparse, with exact ties, spread over many magnitudes, all zero, with a
// few negative values, and tiny/huge.
func crossImatrix(r *rand.Rand, n int) []float32 {
	im := make([]float32, n)
	kind := r.IntN(8)
	for i := range im {
		switch kind {
		case 0:
			im[i] = float32(math.Exp(r.NormFloat64() * 2))
		case 1:
			im[i] = 1
		case 2:
			if r.IntN(4) == 0 {
				im[i] = float32(r.ExpFloat64())
			}
		case 3:
			im[i] = float32(1 + r.IntN(3))
		case 4:
			im[i] = float32(math.Pow(10, float64(r.IntN(25)-12)))
		case 5:
			im[i] = 0
		case 6:
			im[i] = float32(r.NormFloat64())
		default:
			im[i] = float32(r.ExpFloat64()) * 1e-30
		}
	}
	return im
}

// TestWeightedFastMatchesReference runs the fast weighted kernels and their
// references on rows of one to three super-blocks (odd lengths of the
// 32-value formats too) made by crossInputs, with crossImatrix importance
// vectors, and requires identical bytes.
func TestWeightedFastMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 23))
	iters := 150
	if testing.Short() {
		iters = 30
	}
	for _, name := range []string{"Q4_1", "Q5_1", "Q2_K", "Q4_K", "Q5_K", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"} {
		f, _ := ForName(name)
		for it := 0; it < iters; it++ {
			n := (1 + r.IntN(3)) * 256
			if f.BlockSize == 32 && r.IntN(2) == 0 {
				n = (1 + 2*r.IntN(4)) * 32
			}
			rows := 1 + r.IntN(2)
			x := crossInputs(r, n*rows)
			im := crossImatrix(r, n)
			got := make([]byte, f.RowBytes(len(x)))
			want := make([]byte, len(got))
			f.QuantizeWeighted(got, x, im)
			weightedReference(f, want, x, im, n)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s iteration %d: fast kernel differs from reference\nx %v\nim %v", name, it, x, im)
			}
		}
	}
}

// TestConcurrentQuantize runs every format's weighted and plain paths from
// several goroutines at once (the quantize stage works row-parallel), then
// requires the bytes of a sequential run. Run alone (-run
// TestConcurrentQuantize -race) the goroutines also race to build the
// lattices on first use.
func TestConcurrentQuantize(t *testing.T) {
	const nPerRow, workers = 512, 4
	x := benchInput(2 * nPerRow)
	im := benchImatrix(nPerRow)
	fs := Formats()
	got := make([][][]byte, workers)
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		got[g] = make([][]byte, len(fs))
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := range fs {
				i := (k + g*5) % len(fs)
				f := fs[i]
				got[g][i] = make([]byte, f.RowBytes(len(x)))
				f.QuantizeWeighted(got[g][i], x, im)
				if !f.RequiresImatrix() {
					plain := make([]byte, len(got[g][i]))
					f.Quantize(plain, x)
				}
			}
		}(g)
	}
	wg.Wait()
	for i, f := range fs {
		want := make([]byte, f.RowBytes(len(x)))
		f.QuantizeWeighted(want, x, im)
		for g := 0; g < workers; g++ {
			if !bytes.Equal(got[g][i], want) {
				t.Errorf("%s: goroutine %d differs from the sequential run", f.Name, g)
			}
		}
	}
}

// TestQuantizeNoAlloc checks the promise of Format's documentation: once
// the lattices exist, no kernel allocates (arrays passed to an indirect
// call would escape to the heap, one allocation per block).
func TestQuantizeNoAlloc(t *testing.T) {
	warmLattices()
	x := benchInput(512)
	im := benchImatrix(512)
	for _, f := range Formats() {
		q := make([]byte, f.RowBytes(len(x)))
		d := make([]float32, len(x))
		if n := testing.AllocsPerRun(2, func() { f.QuantizeWeighted(q, x, im) }); n != 0 {
			t.Errorf("%s: QuantizeWeighted allocates %v times per call", f.Name, n)
		}
		if !f.RequiresImatrix() {
			if n := testing.AllocsPerRun(2, func() { f.Quantize(q, x) }); n != 0 {
				t.Errorf("%s: Quantize allocates %v times per call", f.Name, n)
			}
		}
		if n := testing.AllocsPerRun(2, func() { f.Dequantize(d, q) }); n != 0 {
			t.Errorf("%s: Dequantize allocates %v times per call", f.Name, n)
		}
	}
}
