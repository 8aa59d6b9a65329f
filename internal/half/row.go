package half

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// F32ToF16Row converts min(len(dst), len(src)) values and returns the count.
func F32ToF16Row(dst []uint16, src []float32) int {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	if n == 0 {
		return 0
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 2*n)
	for i := 0; i < n; {
		// The vector path stops before a group of eight holding a NaN;
		// that group is converted here, then the vector path resumes.
		i += encodeF16Vec(b[2*i:], src[i:], n-i)
		for end := min(i+8, n); i < end; i++ {
			dst[i] = f32BitsToF16(math.Float32bits(src[i]))
		}
	}
	return n
}

// F16ToF32Row converts min(len(dst), len(src)) values and returns the count.
func F16ToF32Row(dst []float32, src []uint16) int {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	i := 0
	if n > 0 {
		i = decodeF16Vec(dst, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 2*n), n)
	}
	t := f16ToF32Table
	for ; i < n; i++ {
		dst[i] = math.Float32frombits(t[src[i]])
	}
	return n
}

// F32ToBF16Row converts min(len(dst), len(src)) values and returns the count.
func F32ToBF16Row(dst []uint16, src []float32) int {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	i := 0
	if n > 0 {
		i = encodeBF16Vec(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 2*n), src, n)
	}
	for ; i < n; i++ {
		dst[i] = F32ToBF16(src[i])
	}
	return n
}

// BF16ToF32Row converts min(len(dst), len(src)) values and returns the count.
func BF16ToF32Row(dst []float32, src []uint16) int {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	i := 0
	if n > 0 {
		i = decodeBF16Vec(dst, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 2*n), n)
	}
	for ; i < n; i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
	return n
}

// DecodeF16LE decodes little-endian f16 values from src into dst and returns
// the number of values decoded: min(len(dst), len(src)/2).
func DecodeF16LE(dst []float32, src []byte) int {
	n := min(len(dst), len(src)/2)
	dst, src = dst[:n], src[:2*n]
	t := f16ToF32Table
	for i := decodeF16Vec(dst, src, n); i < n; i++ {
		dst[i] = math.Float32frombits(t[binary.LittleEndian.Uint16(src[2*i:])])
	}
	return n
}

// DecodeBF16LE decodes little-endian bf16 values from src into dst and
// returns the number of values decoded: min(len(dst), len(src)/2).
func DecodeBF16LE(dst []float32, src []byte) int {
	n := min(len(dst), len(src)/2)
	dst, src = dst[:n], src[:2*n]
	for i := decodeBF16Vec(dst, src, n); i < n; i++ {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
	return n
}

// DecodeF32LE decodes little-endian float32 values from src into dst and
// returns the number of values decoded: min(len(dst), len(src)/4).
func DecodeF32LE(dst []float32, src []byte) int {
	n := min(len(dst), len(src)/4)
	dst, src = dst[:n], src[:4*n]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
	return n
}

// EncodeF16LE encodes src as little-endian f16 into dst and returns the
// number of values encoded: min(len(dst)/2, len(src)).
func EncodeF16LE(dst []byte, src []float32) int {
	n := min(len(dst)/2, len(src))
	dst, src = dst[:2*n], src[:n]
	for i := 0; i < n; {
		i += encodeF16Vec(dst[2*i:], src[i:], n-i)
		for end := min(i+8, n); i < end; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], f32BitsToF16(math.Float32bits(src[i])))
		}
	}
	return n
}

// EncodeBF16LE encodes src as little-endian bf16 into dst and returns the
// number of values encoded: min(len(dst)/2, len(src)).
func EncodeBF16LE(dst []byte, src []float32) int {
	n := min(len(dst)/2, len(src))
	dst, src = dst[:2*n], src[:n]
	for i := encodeBF16Vec(dst, src, n); i < n; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(src[i]))
	}
	return n
}

// EncodeF32LE encodes src as little-endian float32 into dst and returns the
// number of values encoded: min(len(dst)/4, len(src)).
func EncodeF32LE(dst []byte, src []float32) int {
	n := min(len(dst)/4, len(src))
	dst, src = dst[:4*n], src[:n]
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return n
}
