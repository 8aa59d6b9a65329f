package kquant

import (
	"encoding/binary"
	"math"

	"github.com/phonellm/phonellm/internal/half"
)

// groupMaxEps is GROUP_MAX_EPS (ggml-quants.c): the "all zero" threshold.
const groupMaxEps float32 = 1e-15

// nearestInt is ggml's nearest_int: add 1.5*2^23 in float32 and take the low
// mantissa bits. Round half to even for |f| <= 4194303; for larger values,
// Inf and NaN it returns what the bit trick gives (release builds of ggml do
// not check), which this reproduces exactly.
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// cvtF32I32 is C's float -> int conversion as x86-64 does it (cvttss2si):
// truncation toward zero, and 0x80000000 for NaN and out-of-range values.
// C leaves those undefined; using the x86 result makes the bytes the same on
// every platform.
func cvtF32I32(f float32) int32 {
	if f > -2147483904 && f < 2147483648 { // false for NaN
		return int32(f)
	}
	return math.MinInt32
}

// roundf is C's roundf: round half away from zero.
func roundf(f float32) float32 {
	return float32(math.Round(float64(f)))
}

// sqrtf is C's sqrtf (correctly rounded via float64).
func sqrtf(f float32) float32 {
	return float32(math.Sqrt(float64(f)))
}

// absf is fabsf.
func absf(f float32) float32 {
	return math.Float32frombits(math.Float32bits(f) &^ (1 << 31))
}

// putFP16 stores GGML_FP32_TO_FP16(f) little-endian.
func putFP16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, half.F32ToF16(f)) }

// getFP16 is GGML_FP16_TO_FP32 of a little-endian f16.
func getFP16(b []byte) float32 { return half.F16ToF32(binary.LittleEndian.Uint16(b)) }

// kvaluesIQ4NL is kvalues_iq4nl (ggml-common.h).
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
