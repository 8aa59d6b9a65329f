package kquant

import (
	"encoding/binary"
	"math"
)

// The 32-value formats (ggml-quants.c quantize_row_q{4_0,4_1,5_0,5_1,8_0}_ref
// and dequantize_row_*). These are cheap and are used as written.

// refQ4_0: d = max/-8 (max = the signed value of largest magnitude,
// first one wins), q = MIN(15, (int8)(x*id + 8.5)).
func refQ4_0(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		x := src[i*32 : i*32+32 : i*32+32]
		y := dst[i*18 : i*18+18 : i*18+18]
		var amax, max float32
		for _, v := range x {
			if amax < absf(v) {
				amax = absf(v)
				max = v
			}
		}
		d := max / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putFP16(y, d)
		for j := 0; j < 16; j++ {
			xi0 := min(15, int8(cvtF32I32(float32(x[j]*id)+8.5)))
			xi1 := min(15, int8(cvtF32I32(float32(x[j+16]*id)+8.5)))
			y[2+j] = uint8(xi0) | uint8(xi1)<<4
		}
	}
}

func quantizeQ4_1(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		x := src[i*32 : i*32+32 : i*32+32]
		y := dst[i*20 : i*20+20 : i*20+20]
		min_, max_ := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range x {
			if v < min_ {
				min_ = v
			}
			if v > max_ {
				max_ = v
			}
		}
		d := (max_ - min_) / 15
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putFP16(y, d)
		putFP16(y[2:], min_)
		for j := 0; j < 16; j++ {
			xi0 := min(15, int8(cvtF32I32(float32((x[j]-min_)*id)+0.5)))
			xi1 := min(15, int8(cvtF32I32(float32((x[j+16]-min_)*id)+0.5)))
			y[4+j] = uint8(xi0) | uint8(xi1)<<4
		}
	}
}

func quantizeQ5_0(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		x := src[i*32 : i*32+32 : i*32+32]
		y := dst[i*22 : i*22+22 : i*22+22]
		var amax, max float32
		for _, v := range x {
			if amax < absf(v) {
				amax = absf(v)
				max = v
			}
		}
		d := max / -16
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putFP16(y, d)
		var qh uint32
		for j := 0; j < 16; j++ {
			xi0 := uint8(min(31, int8(cvtF32I32(float32(x[j]*id)+16.5))))
			xi1 := uint8(min(31, int8(cvtF32I32(float32(x[j+16]*id)+16.5))))
			y[6+j] = xi0&0x0F | (xi1&0x0F)<<4
			qh |= uint32(xi0&0x10) >> 4 << j
			qh |= uint32(xi1&0x10) >> 4 << (j + 16)
		}
		binary.LittleEndian.PutUint32(y[2:], qh)
	}
}

func quantizeQ5_1(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		x := src[i*32 : i*32+32 : i*32+32]
		y := dst[i*24 : i*24+24 : i*24+24]
		min_, max_ := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range x {
			if v < min_ {
				min_ = v
			}
			if v > max_ {
				max_ = v
			}
		}
		d := (max_ - min_) / 31
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putFP16(y, d)
		putFP16(y[2:], min_)
		var qh uint32
		for j := 0; j < 16; j++ {
			xi0 := uint8(cvtF32I32(float32((x[j]-min_)*id) + 0.5))
			xi1 := uint8(cvtF32I32(float32((x[j+16]-min_)*id) + 0.5))
			y[8+j] = xi0&0x0F | (xi1&0x0F)<<4
			qh |= uint32(xi0&0x10) >> 4 << j
			qh |= uint32(xi1&0x10) >> 4 << (j + 16)
		}
		binary.LittleEndian.PutUint32(y[4:], qh)
	}
}

func refQ8_0(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		x := src[i*32 : i*32+32 : i*32+32]
		y := dst[i*34 : i*34+34 : i*34+34]
		var amax float32
		for _, v := range x {
			// MAX(a, b) = a > b ? a : b, so a NaN input replaces amax.
			if a := absf(v); !(amax > a) {
				amax = a
			}
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putFP16(y, d)
		for j, v := range x {
			y[2+j] = uint8(cvtF32I32(roundf(v * id)))
		}
	}
}

func dequantizeQ4_0(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*18 : i*18+18 : i*18+18]
		y := dst[i*32 : i*32+32 : i*32+32]
		d := getFP16(b)
		for j := 0; j < 16; j++ {
			y[j] = float32(int32(b[2+j]&0x0F)-8) * d
			y[j+16] = float32(int32(b[2+j]>>4)-8) * d
		}
	}
}

func dequantizeQ4_1(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*20 : i*20+20 : i*20+20]
		y := dst[i*32 : i*32+32 : i*32+32]
		d, m := getFP16(b), getFP16(b[2:])
		for j := 0; j < 16; j++ {
			y[j] = float32(float32(b[4+j]&0x0F)*d) + m
			y[j+16] = float32(float32(b[4+j]>>4)*d) + m
		}
	}
}

func dequantizeQ5_0(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*22 : i*22+22 : i*22+22]
		y := dst[i*32 : i*32+32 : i*32+32]
		d := getFP16(b)
		qh := binary.LittleEndian.Uint32(b[2:])
		for j := 0; j < 16; j++ {
			xh0 := uint8(qh>>j<<4) & 0x10
			xh1 := uint8(qh>>(j+12)) & 0x10
			y[j] = float32(int32(b[6+j]&0x0F|xh0)-16) * d
			y[j+16] = float32(int32(b[6+j]>>4|xh1)-16) * d
		}
	}
}

func dequantizeQ5_1(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*24 : i*24+24 : i*24+24]
		y := dst[i*32 : i*32+32 : i*32+32]
		d, m := getFP16(b), getFP16(b[2:])
		qh := binary.LittleEndian.Uint32(b[4:])
		for j := 0; j < 16; j++ {
			xh0 := uint8(qh>>j<<4) & 0x10
			xh1 := uint8(qh>>(j+12)) & 0x10
			y[j] = float32(float32(b[8+j]&0x0F|xh0)*d) + m
			y[j+16] = float32(float32(b[8+j]>>4|xh1)*d) + m
		}
	}
}

func dequantizeQ8_0(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*34 : i*34+34 : i*34+34]
		y := dst[i*32 : i*32+32 : i*32+32]
		d := getFP16(b)
		for j := 0; j < 32; j++ {
			y[j] = float32(int8(b[2+j])) * d
		}
	}
}
