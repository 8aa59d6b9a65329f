package kquant

import "encoding/binary"

// bestIndexInt8 is best_index_int8 over the sorted 16-entry table: the index
// of the nearest value, ties to the upper one, values beyond the ends clamp.
// A NaN x compares false everywhere; the result for it follows the binary
// search in ggml (see bestIndexNaN).
func bestIndexInt8(val *[16]int8, x float32) int {
	if x <= float32(val[0]) {
		return 0
	}
	if x >= float32(val[15]) {
		return 15
	}
	ml, mu := 0, 15
	for mu-ml > 1 {
		mav := (ml + mu) / 2
		if x < float32(val[mav]) {
			mu = mav
		} else {
			ml = mav
		}
	}
	if x-float32(val[mu-1]) < float32(val[mu])-x {
		return mu - 1
	}
	return mu
}

// refIQ4Block runs quantize_row_iq4_nl_impl with no weights and ntry = 7 on
// one super-block of n = 32 (IQ4_NL) or 256 (IQ4_XS) values. For IQ4_NL it
// writes d and qs[16] (18 bytes); for IQ4_XS d, scales_h, scales_l[4] and
// qs[128] (136 bytes).
func refIQ4Block(y []byte, x []float32, n int) {
	const ntry = 7
	values := &kvaluesIQ4NL
	x = x[:n]
	var L [256]uint8
	var scales [8]float32
	var weight [32]float32
	nblk := n / 32
	var maxScale, amaxScale float32
	for ib := 0; ib < nblk; ib++ {
		xb := x[ib*32 : ib*32+32]
		Lb := L[ib*32 : ib*32+32]
		for j, v := range xb {
			weight[j] = v * v
		}
		var amax, max float32
		for _, v := range xb {
			if ax := absf(v); ax > amax {
				amax = ax
				max = v
			}
		}
		if amax < groupMaxEps {
			scales[ib] = 0
			for j := range Lb {
				Lb[j] = 0
			}
			continue
		}
		d := -max / float32(values[0])
		id := 1 / d
		var sumqx, sumq2 float32
		for j, v := range xb {
			al := id * v
			l := bestIndexInt8(values, al)
			Lb[j] = uint8(l)
			q := float32(values[l])
			w := weight[j]
			sumqx += float32(w * q * v)
			sumq2 += float32(w * q * q)
		}
		d = 0
		if sumq2 > 0 {
			d = sumqx / sumq2
		}
		best := d * sumqx
		for itry := -ntry; itry <= ntry; itry++ {
			id = float32(itry+int(values[0])) / max
			sumqx, sumq2 = 0, 0
			for j, v := range xb {
				al := id * v
				l := bestIndexInt8(values, al)
				q := float32(values[l])
				w := weight[j]
				sumqx += float32(w * q * v)
				sumq2 += float32(w * q * q)
			}
			if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
				d = sumqx / sumq2
				best = d * sumqx
			}
		}
		scales[ib] = d
		if ad := absf(d); ad > amaxScale {
			amaxScale = ad
			maxScale = d
		}
	}
	var q4 []byte
	if nblk > 1 {
		d := -maxScale / 32
		putFP16(y[0:], d)
		var id float32
		if d != 0 {
			id = 1 / d
		}
		var scalesH uint16
		scalesL := y[4:8]
		for ib := 0; ib < nblk; ib++ {
			l := nearestInt(float32(id * scales[ib]))
			l = max32(-32, min32(31, l))
			dl := d * float32(l)
			var idl float32
			if dl != 0 {
				idl = 1 / dl
			}
			Lb := L[ib*32 : ib*32+32]
			xb := x[ib*32 : ib*32+32]
			for j, v := range xb {
				Lb[j] = uint8(bestIndexInt8(values, idl*v))
			}
			l += 32
			lL := uint8(l) & 0xF
			lH := uint16(l >> 4)
			if ib%2 == 0 {
				scalesL[ib/2] = lL
			} else {
				scalesL[ib/2] |= lL << 4
			}
			scalesH |= lH << (2 * (ib % 8))
		}
		binary.LittleEndian.PutUint16(y[2:], scalesH)
		q4 = y[8 : 8+n/2]
	} else {
		putFP16(y[0:], scales[0])
		var id float32
		if scales[0] != 0 {
			id = 1 / scales[0]
		}
		for j, v := range x {
			L[j] = uint8(bestIndexInt8(values, id*v))
		}
		q4 = y[2 : 2+n/2]
	}
	for i := 0; i < n/32; i++ {
		for j := 0; j < 16; j++ {
			q4[16*i+j] = L[32*i+j] | L[32*i+16+j]<<4
		}
	}
}
