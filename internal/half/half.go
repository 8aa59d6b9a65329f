package half

import "math"

// f16ToF32Table holds the float32 bit pattern of every f16 value, so that
// F16ToF32 is a single load.
var f16ToF32Table = func() *[1 << 16]uint32 {
	var t [1 << 16]uint32
	for i := range t {
		t[i] = f16ToF32Bits(uint16(i))
	}
	return &t
}()

// f16ToF32Bits computes the float32 bits of the f16 value h (exact; NaNs get
// the quiet bit, as ggml's conversion does).
func f16ToF32Bits(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1F
	man := uint32(h) & 0x3FF
	switch {
	case exp == 0x1F:
		if man == 0 {
			return sign | 0x7F800000
		}
		return sign | 0x7F800000 | 0x00400000 | man<<13
	case exp != 0:
		return sign | (exp+112)<<23 | man<<13
	case man == 0:
		return sign
	}
	// Subnormal: normalise. Value = man * 2^-24.
	e := uint32(113) // exponent of 2^-14 is 127-14 = 113
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return sign | e<<23 | (man&0x3FF)<<13
}

// F16ToF32 converts an f16 bit pattern to float32 exactly.
func F16ToF32(h uint16) float32 {
	return math.Float32frombits(f16ToF32Table[h])
}

// F32ToF16 converts a float32 to f16 bits, rounding to nearest even.
func F32ToF16(f float32) uint16 {
	return f32BitsToF16(math.Float32bits(f))
}

func f32BitsToF16(b uint32) uint16 {
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7FFFFFFF
	switch {
	case a > 0x7F800000: // NaN
		return sign | 0x7E00
	case a >= 0x477FF000: // >= 65520 (or Inf): overflow to Inf
		return sign | 0x7C00
	case a >= 0x38800000: // normal f16 range (>= 2^-14)
		// Rebias exponent and round the 13 dropped bits to nearest even.
		v := a - 0x38000000
		v += 0xFFF + (v>>13)&1
		return sign | uint16(v>>13)
	case a < 0x33000000: // < 2^-25: rounds to zero (2^-25 itself ties to 0 — even)
		return sign
	}
	// f16 subnormal: value = m * 2^-24, m = a's significand shifted.
	exp := a >> 23
	man := a&0x7FFFFF | 0x800000
	shift := 126 - exp // 113 - exp + 13; exp in [102, 112] -> shift in [14, 24]
	r := man >> shift
	rem := man & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// F32ToBF16 converts a float32 to bfloat16 bits as ggml does.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 {
		return uint16(b>>16) | 0x0040
	}
	return uint16((b + 0x7FFF + (b>>16)&1) >> 16)
}

// BF16ToF32 converts bfloat16 bits to float32 (exact).
func BF16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}
