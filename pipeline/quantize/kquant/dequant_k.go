package kquant

import "encoding/binary"

// Dequantizers of the K-quants and IQ4 formats (dequantize_row_* of
// ggml-quants.c). Products feeding a subtraction are rounded first.

func dequantizeQ2K(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*84 : i*84+84 : i*84+84]
		y := dst[i*256 : i*256+256 : i*256+256]
		d, dmin := getFP16(b[80:]), getFP16(b[82:])
		sc := b[0:16]
		is := 0
		for n := 0; n < 256; n += 128 {
			q := b[16+n/4 : 16+n/4+32]
			for j := 0; j < 4; j++ {
				shift := uint(2 * j)
				for h := 0; h < 2; h++ {
					s := sc[is]
					is++
					dl := d * float32(s&0xF)
					ml := dmin * float32(s>>4)
					out := y[n+32*j+16*h : n+32*j+16*h+16]
					for l := range out {
						out[l] = float32(dl*float32((q[l+16*h]>>shift)&3)) - ml
					}
				}
			}
		}
	}
}

// q3kScales decodes the 16 6-bit Q3_K scales (already minus 32).
func q3kScales(s []byte) (out [16]int8) {
	for j := 0; j < 16; j++ {
		var v uint8
		if j < 8 {
			v = s[j] & 0xF
		} else {
			v = s[j-8] >> 4
		}
		out[j] = int8(v|((s[8+j%4]>>(2*(j/4)))&3)<<4) - 32
	}
	return out
}

func dequantizeQ3K(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*110 : i*110+110 : i*110+110]
		y := dst[i*256 : i*256+256 : i*256+256]
		dAll := getFP16(b[108:])
		hm := b[0:32]
		scales := q3kScales(b[96:108])
		is := 0
		bit := uint(0)
		for n := 0; n < 256; n += 128 {
			q := b[32+n/4 : 32+n/4+32]
			for j := 0; j < 4; j++ {
				shift := uint(2 * j)
				for h := 0; h < 2; h++ {
					dl := dAll * float32(scales[is])
					is++
					out := y[n+32*j+16*h : n+32*j+16*h+16]
					for l := range out {
						// minus 4 unless the high bit is set
						v := int32((q[l+16*h]>>shift)&3) - 4 + 4*int32((hm[l+16*h]>>bit)&1)
						out[l] = dl * float32(v)
					}
				}
				bit++
			}
		}
	}
}

func dequantizeQ4K(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*144 : i*144+144 : i*144+144]
		y := dst[i*256 : i*256+256 : i*256+256]
		d, dmin := getFP16(b[0:]), getFP16(b[2:])
		sc := b[4:16]
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(2*j, sc)
			s2, m2 := scaleMinK4(2*j+1, sc)
			d1, mm1 := d*float32(s1), dmin*float32(m1)
			d2, mm2 := d*float32(s2), dmin*float32(m2)
			q := b[16+32*j : 16+32*j+32]
			out := y[64*j : 64*j+64]
			for l := 0; l < 32; l++ {
				out[l] = float32(d1*float32(q[l]&0xF)) - mm1
				out[l+32] = float32(d2*float32(q[l]>>4)) - mm2
			}
		}
	}
}

func dequantizeQ5K(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*176 : i*176+176 : i*176+176]
		y := dst[i*256 : i*256+256 : i*256+256]
		d, dmin := getFP16(b[0:]), getFP16(b[2:])
		sc := b[4:16]
		qh := b[16:48]
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(2*j, sc)
			s2, m2 := scaleMinK4(2*j+1, sc)
			d1, mm1 := d*float32(s1), dmin*float32(m1)
			d2, mm2 := d*float32(s2), dmin*float32(m2)
			ql := b[48+32*j : 48+32*j+32]
			out := y[64*j : 64*j+64]
			for l := 0; l < 32; l++ {
				v1 := ql[l]&0xF | (qh[l]>>(2*j)&1)<<4
				v2 := ql[l]>>4 | (qh[l]>>(2*j+1)&1)<<4
				out[l] = float32(d1*float32(v1)) - mm1
				out[l+32] = float32(d2*float32(v2)) - mm2
			}
		}
	}
}

func dequantizeQ6K(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*210 : i*210+210 : i*210+210]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b[208:])
		for n := 0; n < 2; n++ {
			ql := b[64*n : 64*n+64]
			qh := b[128+32*n : 128+32*n+32]
			sc := b[192+8*n : 192+8*n+8]
			out := y[128*n : 128*n+128]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int8(ql[l]&0xF|((qh[l]>>0)&3)<<4) - 32
				q2 := int8(ql[l+32]&0xF|((qh[l]>>2)&3)<<4) - 32
				q3 := int8(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
				q4 := int8(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
				out[l] = d * float32(int8(sc[is])) * float32(q1)
				out[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				out[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				out[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	}
}

func dequantizeIQ4NL(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*18 : i*18+18 : i*18+18]
		y := dst[i*32 : i*32+32 : i*32+32]
		d := getFP16(b)
		for j := 0; j < 16; j++ {
			y[j] = d * float32(kvaluesIQ4NL[b[2+j]&0xF])
			y[j+16] = d * float32(kvaluesIQ4NL[b[2+j]>>4])
		}
	}
}

func dequantizeIQ4XS(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*136 : i*136+136 : i*136+136]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b)
		sh := binary.LittleEndian.Uint16(b[2:])
		sl := b[4:8]
		for ib := 0; ib < 8; ib++ {
			ls := int32((sl[ib/2]>>(4*(ib%2)))&0xF) | int32((sh>>(2*ib))&3)<<4
			dl := d * float32(ls-32)
			qs := b[8+16*ib : 8+16*ib+16]
			out := y[32*ib : 32*ib+32]
			for j := 0; j < 16; j++ {
				out[j] = dl * float32(kvaluesIQ4NL[qs[j]&0xF])
				out[j+16] = dl * float32(kvaluesIQ4NL[qs[j]>>4])
			}
		}
	}
}
