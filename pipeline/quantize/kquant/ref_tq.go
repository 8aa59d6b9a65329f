package kquant

import "math"

// Ternary formats (BitNet b1.58 / TriLM): quantize_row_tq{1,2}_0_ref and
// dequantize_row_tq{1,2}_0 of ggml-quants.c. quantize_tq1_0/tq2_0 ignore
// the importance matrix.

// lroundf is C's lroundf as glibc computes it on x86-64: round half away
// from zero; a NaN or a value beyond the long range converts as
// cvttss2si does (0x8000000000000000).
func lroundf(f float32) int64 {
	if f > -0x1p63 && f < 0x1p63 { // false for NaN
		return int64(math.Round(float64(f)))
	}
	return math.MinInt64
}

// tqTrit is lroundf(x*id) + 1 as the C int it is stored in: 0, 1 or 2 for
// |x*id| <= 1 (the long result truncated to 32 bits otherwise).
func tqTrit(x, id float32) int32 {
	return int32(lroundf(x*id) + 1)
}

// tqAmax is the block's MAX(amax, fabsf(v)) (a NaN is replaced by the next
// value, as the macro does).
func tqAmax(x []float32) float32 {
	var amax float32
	for _, v := range x {
		amax = cmaxf(amax, absf(v))
	}
	return amax
}

// refTQ1_0 encodes one TQ1_0 block: qs[48] (5 trits per byte), qh[4] (4
// trits per byte), d.
func refTQ1_0(y []byte, x []float32) {
	y = y[:54]
	x = x[:256]
	d := tqAmax(x)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putFP16(y[52:], d)
	qs := y[0:48]
	// 5 elements per byte, along 32 bytes
	for m := 0; m < 32; m++ {
		var q uint8
		for n := 0; n < 5; n++ {
			q = uint8(int32(q) * 3)
			q = uint8(int32(q) + tqTrit(x[m+n*32], id))
		}
		qs[m] = uint8((int32(q)*256 + 242) / 243)
	}
	x = x[160:]
	// along 16 bytes
	for m := 0; m < 16; m++ {
		var q uint8
		for n := 0; n < 5; n++ {
			q = uint8(int32(q) * 3)
			q = uint8(int32(q) + tqTrit(x[m+n*16], id))
		}
		qs[32+m] = uint8((int32(q)*256 + 242) / 243)
	}
	x = x[80:]
	// 4 elements per byte
	for j := 0; j < 4; j++ {
		var q uint8
		for m := 0; m < 4; m++ {
			q = uint8(int32(q) * 3)
			q = uint8(int32(q) + tqTrit(x[j+m*4], id))
		}
		// shift the first value to the most significant trit
		q = uint8(int32(q) * 3)
		y[48+j] = uint8((int32(q)*256 + 242) / 243)
	}
}

// refTQ2_0 encodes one TQ2_0 block: qs[64] (2 bits per value), d.
func refTQ2_0(y []byte, x []float32) {
	y = y[:66]
	x = x[:256]
	d := tqAmax(x)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putFP16(y[64:], d)
	for j := 0; j < 64; j += 32 {
		for m := 0; m < 32; m++ {
			var q uint8
			for n := 0; n < 4; n++ {
				xi := tqTrit(x[m+n*32], id)
				q = uint8(int32(q) + (xi&3)<<(2*n))
			}
			y[j+m] = q
		}
		x = x[128:]
	}
}

func quantizeTQ1_0(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		refTQ1_0(dst[i*54:], src[i*256:])
	}
}

func quantizeTQ2_0(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		refTQ2_0(dst[i*66:], src[i*256:])
	}
}

// tqPow3 is pow3 of dequantize_row_tq1_0.
var tqPow3 = [6]uint8{1, 3, 9, 27, 81, 243}

// tq1Trit is the trit n of a packed byte: ((uint8)(b*3^n) * 3) >> 8.
func tq1Trit(b uint8, n int) float32 {
	q := b * tqPow3[n]
	return float32((int32(q)*3)>>8 - 1)
}

func dequantizeTQ1_0(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*54 : i*54+54 : i*54+54]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b[52:])
		o := 0
		for n := 0; n < 5; n++ {
			for m := 0; m < 32; m++ {
				y[o] = tq1Trit(b[m], n) * d
				o++
			}
		}
		for n := 0; n < 5; n++ {
			for m := 0; m < 16; m++ {
				y[o] = tq1Trit(b[32+m], n) * d
				o++
			}
		}
		for n := 0; n < 4; n++ {
			for j := 0; j < 4; j++ {
				y[o] = tq1Trit(b[48+j], n) * d
				o++
			}
		}
	}
}

func dequantizeTQ2_0(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*66 : i*66+66 : i*66+66]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b[64:])
		o := 0
		for j := 0; j < 64; j += 32 {
			for l := 0; l < 4; l++ {
				for m := 0; m < 32; m++ {
					q := int32((b[j+m] >> (2 * l)) & 3)
					y[o] = float32(q-1) * d
					o++
				}
			}
		}
	}
}
