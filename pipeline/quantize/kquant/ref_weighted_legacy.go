package kquant

import "encoding/binary"

// Weighted encoders of the 32-value formats: quantize_row_q{4_0,4_1,5_0,5_1}
// _impl of ggml-quants.c with quant_weights != NULL. Unlike every other
// format, their weights use sigma2 = sum(x^2)/n_per_row over the whole row,
// so these kernels take one row at a time; qw has one weight per value of
// the row.

// rowSigma2 is sum_x2/n_per_row over one row.
func rowSigma2(x []float32) float32 {
	return sumSquares(x) / float32(len(x))
}

// refQ4_0Weighted encodes one row (len(x)/32 blocks of 18 bytes).
func refQ4_0Weighted(y []byte, x, qw []float32) {
	sigma2 := rowSigma2(x)
	var weight [32]float32
	var L [32]int8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		weightsSigma(weight[:], xb, qw[32*ib:], sigma2)
		d := makeQXQuantsW(32, 8, xb, L[:], weight[:])
		b := y[18*ib : 18*ib+18]
		putFP16(b, d)
		for j := 0; j < 16; j++ {
			b[2+j] = uint8(L[j]) | uint8(L[j+16])<<4
		}
	}
}

// refQ4_1Weighted encodes one row (len(x)/32 blocks of 20 bytes).
func refQ4_1Weighted(y []byte, x, qw []float32) {
	sigma2 := rowSigma2(x)
	var weight [32]float32
	var L, Laux [32]uint8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		weightsSigma(weight[:], xb, qw[32*ib:], sigma2)
		d, min := makeQKX3Quants(32, 15, xb, weight[:], L[:], Laux[:], -0.9, 0.05, 36, false)
		b := y[20*ib : 20*ib+20]
		putFP16(b, d)
		putFP16(b[2:], -min)
		for j := 0; j < 16; j++ {
			b[4+j] = L[j] | L[j+16]<<4
		}
	}
}

// refQ5_0Weighted encodes one row (len(x)/32 blocks of 22 bytes).
func refQ5_0Weighted(y []byte, x, qw []float32) {
	sigma2 := rowSigma2(x)
	var weight [32]float32
	var L [32]int8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		weightsSigma(weight[:], xb, qw[32*ib:], sigma2)
		d := makeQXQuantsW(32, 16, xb, L[:], weight[:])
		b := y[22*ib : 22*ib+22]
		putFP16(b, d)
		var qh uint32
		for j := 0; j < 16; j++ {
			xi0, xi1 := uint8(L[j]), uint8(L[j+16])
			b[6+j] = xi0&0x0F | (xi1&0x0F)<<4
			qh |= uint32(xi0&0x10) >> 4 << j
			qh |= uint32(xi1&0x10) >> 4 << (j + 16)
		}
		binary.LittleEndian.PutUint32(b[2:], qh)
	}
}

// refQ5_1Weighted encodes one row (len(x)/32 blocks of 24 bytes).
func refQ5_1Weighted(y []byte, x, qw []float32) {
	sigma2 := rowSigma2(x)
	var weight [32]float32
	var L, Laux [32]uint8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		weightsSigma(weight[:], xb, qw[32*ib:], sigma2)
		d, min := makeQKX3Quants(32, 31, xb, weight[:], L[:], Laux[:], -0.9, 0.05, 36, false)
		b := y[24*ib : 24*ib+24]
		putFP16(b, d)
		putFP16(b[2:], -min)
		var qh uint32
		for j := 0; j < 16; j++ {
			xi0, xi1 := L[j], L[j+16]
			b[8+j] = xi0&0x0F | (xi1&0x0F)<<4
			qh |= uint32(xi0&0x10) >> 4 << j
			qh |= uint32(xi1&0x10) >> 4 << (j + 16)
		}
		binary.LittleEndian.PutUint32(b[4:], qh)
	}
}
