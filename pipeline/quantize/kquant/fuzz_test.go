package kquant

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// roundTripBound is the largest |dequant(quant(x)) - x| allowed, as a
// fraction of the block's largest |x|, for blocks with 1 <= max|x| <= 1e4
// (so no f16 scale over- or underflows). The legacy bounds follow from the
// step sizes (Q4_0: d = max/8, Q4_1: (max-min)/15/2 <= max/15, Q5_0: max/16,
// Q5_1: max/31, Q8_0: max/254, each plus f16 rounding of the scales); the
// K-quant and IQ4 bounds are loose sanity limits (about 1.5-2x the worst
// seen on adversarial random blocks) since their sub-block scales are
// themselves quantized.
var roundTripBound = map[uint32]float64{
	TypeQ4_0: 0.13, TypeQ4_1: 0.07, TypeQ5_0: 0.065, TypeQ5_1: 0.035, TypeQ8_0: 0.0045,
	TypeQ2_K: 0.75, TypeQ3_K: 0.5, TypeQ4_K: 0.25, TypeQ5_K: 0.15, TypeQ6_K: 0.08,
	TypeIQ4_NL: 0.2, TypeIQ4_XS: 0.25,
}

// checkRoundTrip quantizes x (whole blocks) with f, compares the bytes with
// the reference kernel, dequantizes, and checks the error bound per block.
func checkRoundTrip(t *testing.T, f Format, x []float32) {
	t.Helper()
	nb := len(x) / f.BlockSize
	q := make([]byte, nb*f.BlockBytes)
	f.Quantize(q, x)
	ref := make([]byte, len(q))
	referenceKernels[f.Type](ref, x, nb)
	if !bytes.Equal(q, ref) {
		t.Fatalf("%s: fast kernel differs from reference on %v", f.Name, x)
	}
	d := make([]float32, len(x))
	f.Dequantize(d, q)
	for b := 0; b < nb; b++ {
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
		bound := roundTripBound[f.Type] * amax
		for i := range xb {
			if e := math.Abs(float64(db[i]) - float64(xb[i])); !(e <= bound) {
				t.Fatalf("%s: value %d: %g -> %g, error %g > bound %g (block max %g)\nblock %v",
					f.Name, i, xb[i], db[i], e, bound, amax, xb)
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	m := loadManifest(t)
	for _, c := range m.QuantCases {
		f, _ := ForType(c.TypeID)
		checkRoundTrip(t, f, decodeF32(readGolden(t, c.Input)))
	}
	for _, f := range Formats() {
		if f.RequiresImatrix() {
			continue
		}
		x := make([]float32, f.BlockSize*len(specialValues))
		for i := range x {
			x[i] = specialValues[(i*7+i/f.BlockSize)%len(specialValues)]
		}
		checkRoundTrip(t, f, x)
	}
}

// FuzzQuantize: any float32 bits (NaN, Inf, subnormals) must quantize and
// dequantize without panicking, the fast kernels must equal the reference,
// and finite blocks must round-trip within the format's bound.
func FuzzQuantize(f *testing.F) {
	seed := func(id byte, vals ...float32) {
		b := []byte{id}
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		f.Add(b)
	}
	for id := byte(0); id < byte(len(formats)); id++ {
		seed(id, specialValues...)
		seed(id, 1, -2, 3, -4, 0.5, 0.25)
		seed(id, 0)
		seed(id, 1e-39, -3e-39, 2e-39)
		seed(id, 0.7)
	}
	warmLattices() // see FuzzQuantizeWeighted
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 5 {
			return
		}
		fm := formats[int(data[0])%len(formats)]
		if fm.RequiresImatrix() { // FuzzQuantizeWeighted covers these
			return
		}
		vals := make([]float32, (len(data)-1)/4)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[1+4*i:]))
		}
		nb := 1 + len(vals)/fm.BlockSize
		if nb > 4 {
			nb = 4
		}
		x := make([]float32, nb*fm.BlockSize)
		for i := range x {
			x[i] = vals[i%len(vals)]
		}
		checkRoundTrip(t, fm, x)
	})
}
