package kquant

import (
	"encoding/binary"

	"github.com/phonellm/phonellm/internal/half"
)

// Dequantizers of the IQ1/IQ2/IQ3 formats (dequantize_row_* of
// ggml-quants.c). Signs are applied as ggml does, by multiplying with +1 or
// -1 (loaded from signMul so that the compiler keeps the multiplication:
// for a NaN product it keeps the sign bit, as mulss does, where a negation
// would flip it).

var signMul = [2]float32{1, -1}

// signOf is 1 when the bit of mask is set in signs.
func signOf(signs, mask uint8) int {
	if signs&mask != 0 {
		return 1
	}
	return 0
}

// gridByte is byte j (little-endian) of a packed grid entry.
func gridByte(g uint64, j int) float32 { return float32(uint8(g >> (8 * j))) }

func dequantizeIQ2XXS(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*66 : i*66+66 : i*66+66]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b)
		for ib32 := 0; ib32 < 8; ib32++ {
			aux0 := binary.LittleEndian.Uint32(b[2+8*ib32:])
			aux1 := binary.LittleEndian.Uint32(b[2+8*ib32+4:])
			db := float32(d*(0.5+float32(aux1>>28))) * 0.25
			for l := 0; l < 4; l++ {
				grid := iq2xxsGrid[uint8(aux0>>(8*l))]
				signs := ksignsIQ2XS[(aux1>>(7*l))&127]
				out := y[32*ib32+8*l : 32*ib32+8*l+8]
				for j := range out {
					out[j] = float32(db*gridByte(grid, j)) * signMul[signOf(signs, kmaskIQ2XS[j])]
				}
			}
		}
	}
}

func dequantizeIQ2XS(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*74 : i*74+74 : i*74+74]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b)
		sc := b[66:74]
		for ib32 := 0; ib32 < 8; ib32++ {
			db := [2]float32{
				float32(d*(0.5+float32(sc[ib32]&0xf))) * 0.25,
				float32(d*(0.5+float32(sc[ib32]>>4))) * 0.25,
			}
			for l := 0; l < 4; l++ {
				q := binary.LittleEndian.Uint16(b[2+2*(4*ib32+l):])
				grid := iq2xsGrid[q&511]
				signs := ksignsIQ2XS[q>>9]
				out := y[32*ib32+8*l : 32*ib32+8*l+8]
				for j := range out {
					out[j] = float32(db[l/2]*gridByte(grid, j)) * signMul[signOf(signs, kmaskIQ2XS[j])]
				}
			}
		}
	}
}

func dequantizeIQ2S(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*82 : i*82+82 : i*82+82]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b)
		qs := b[2:34]
		signs := b[34:66]
		qh := b[66:74]
		sc := b[74:82]
		for ib32 := 0; ib32 < 8; ib32++ {
			db := [2]float32{
				float32(d*(0.5+float32(sc[ib32]&0xf))) * 0.25,
				float32(d*(0.5+float32(sc[ib32]>>4))) * 0.25,
			}
			for l := 0; l < 4; l++ {
				dl := db[l/2]
				idx := int(qs[4*ib32+l]) | (int(qh[ib32])<<(8-2*l))&0x300
				grid := iq2sGrid[idx]
				s := signs[4*ib32+l]
				out := y[32*ib32+8*l : 32*ib32+8*l+8]
				for j := range out {
					out[j] = float32(dl*gridByte(grid, j)) * signMul[signOf(s, kmaskIQ2XS[j])]
				}
			}
		}
	}
}

func dequantizeIQ3XXS(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*98 : i*98+98 : i*98+98]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b)
		qs := b[2:66]
		sas := b[66:98]
		for ib32 := 0; ib32 < 8; ib32++ {
			aux := binary.LittleEndian.Uint32(sas[4*ib32:])
			db := float32(d*(0.5+float32(aux>>28))) * 0.5
			for l := 0; l < 4; l++ {
				signs := ksignsIQ2XS[(aux>>(7*l))&127]
				g1 := uint64(iq3xxsGrid[qs[8*ib32+2*l]])
				g2 := uint64(iq3xxsGrid[qs[8*ib32+2*l+1]])
				out := y[32*ib32+8*l : 32*ib32+8*l+8]
				for j := 0; j < 4; j++ {
					out[j] = float32(db*gridByte(g1, j)) * signMul[signOf(signs, kmaskIQ2XS[j])]
					out[j+4] = float32(db*gridByte(g2, j)) * signMul[signOf(signs, kmaskIQ2XS[j+4])]
				}
			}
		}
	}
}

func dequantizeIQ3S(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*110 : i*110+110 : i*110+110]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b)
		qs := b[2:66]
		qh := b[66:74]
		signs := b[74:106]
		sc := b[106:110]
		o := 0
		for ib32 := 0; ib32 < 8; ib32 += 2 {
			db := [2]float32{
				d * float32(1+2*int32(sc[ib32/2]&0xf)),
				d * float32(1+2*int32(sc[ib32/2]>>4)),
			}
			for h := 0; h < 2; h++ {
				hb := int(qh[ib32+h])
				for l := 0; l < 4; l++ {
					g1 := uint64(iq3sGrid[int(qs[2*l])|(hb<<(8-2*l))&256])
					g2 := uint64(iq3sGrid[int(qs[2*l+1])|(hb<<(7-2*l))&256])
					for j := 0; j < 4; j++ {
						y[o+j] = float32(db[h]*gridByte(g1, j)) * signMul[signOf(signs[l], kmaskIQ2XS[j])]
						y[o+j+4] = float32(db[h]*gridByte(g2, j)) * signMul[signOf(signs[l], kmaskIQ2XS[j+4])]
					}
					o += 8
				}
				qs = qs[8:]
				signs = signs[4:]
			}
		}
	}
}

func dequantizeIQ1S(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*50 : i*50+50 : i*50+50]
		y := dst[i*256 : i*256+256 : i*256+256]
		d := getFP16(b)
		qs := b[2:34]
		for ib := 0; ib < 8; ib++ {
			qh := binary.LittleEndian.Uint16(b[34+2*ib:])
			dl := d * float32(2*((qh>>12)&7)+1)
			delta := iq1Delta
			if qh&0x8000 != 0 {
				delta = -iq1Delta
			}
			for l := 0; l < 4; l++ {
				grid := iq1sGrid[int(qs[4*ib+l])|int((qh>>(3*l))&7)<<8]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := range out {
					out[j] = dl * (float32(int8(grid>>(8*j))) + delta)
				}
			}
		}
	}
}

func dequantizeIQ1M(dst []float32, src []byte, nb int) {
	for i := 0; i < nb; i++ {
		b := src[i*56 : i*56+56 : i*56+56]
		y := dst[i*256 : i*256+256 : i*256+256]
		var sc [4]uint16
		for k := range sc {
			sc[k] = binary.LittleEndian.Uint16(b[48+2*k:])
		}
		u16 := sc[0]>>12 | (sc[1]>>8)&0x00f0 | (sc[2]>>4)&0x0f00 | sc[3]&0xf000
		d := half.F16ToF32(u16)
		qs := b[0:32]
		qh := b[32:48]
		for ib := 0; ib < 8; ib++ {
			dl := [2]float32{
				d * float32(2*((sc[ib/2]>>(6*(ib%2)+0))&7)+1),
				d * float32(2*((sc[ib/2]>>(6*(ib%2)+3))&7)+1),
			}
			h0, h1 := int(qh[2*ib]), int(qh[2*ib+1])
			idx := [4]int{
				int(qs[4*ib+0]) | (h0<<8)&0x700,
				int(qs[4*ib+1]) | (h0<<4)&0x700,
				int(qs[4*ib+2]) | (h1<<8)&0x700,
				int(qs[4*ib+3]) | (h1<<4)&0x700,
			}
			delta := [4]float32{iq1Delta, iq1Delta, iq1Delta, iq1Delta}
			if h0&0x08 != 0 {
				delta[0] = -iq1Delta
			}
			if h0&0x80 != 0 {
				delta[1] = -iq1Delta
			}
			if h1&0x08 != 0 {
				delta[2] = -iq1Delta
			}
			if h1&0x80 != 0 {
				delta[3] = -iq1Delta
			}
			for l := 0; l < 4; l++ {
				grid := iq1sGrid[idx[l]]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := range out {
					out[j] = dl[l/2] * (float32(int8(grid>>(8*j))) + delta[l])
				}
			}
		}
	}
}
