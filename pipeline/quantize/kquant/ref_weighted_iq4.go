package kquant

import "encoding/binary"

// refIQ4BlockWeighted is quantize_row_iq4_nl_impl with quant_weights and
// ntry = 7 (what quantize_iq4_nl / quantize_iq4_xs run with an importance
// matrix) on one super-block of n = 32 (IQ4_NL) or 256 (IQ4_XS) values; qw
// holds the super-block's n weights. Output layout as refIQ4Block.
func refIQ4BlockWeighted(y []byte, x, qw []float32, n int) {
	const ntry = 7
	values := &kvaluesIQ4NL
	x = x[:n]
	qw = qw[:n]
	var L [256]uint8
	var scales [8]float32
	var weight [32]float32
	sigma2 := sumSquares(x)
	sigma2 *= 2 / float32(n)
	nblk := n / 32
	var maxScale, amaxScale float32
	for ib := 0; ib < nblk; ib++ {
		xb := x[ib*32 : ib*32+32]
		Lb := L[ib*32 : ib*32+32]
		weightsSigma(weight[:], xb, qw[ib*32:], sigma2)
		var amax, max float32
		for _, v := range xb {
			if ax := absf(v); ax > amax {
				amax = ax
				max = v
			}
		}
		if amax < groupMaxEps {
			scales[ib] = 0
			continue
		}
		d := -max / float32(values[0])
		id := 1 / d
		var sumqx, sumq2 float32
		for j, v := range xb {
			l := bestIndexInt8(values, float32(id*v))
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
				l := bestIndexInt8(values, float32(id*v))
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
				Lb[j] = uint8(bestIndexInt8(values, float32(idl*v)))
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
			L[j] = uint8(bestIndexInt8(values, float32(id*v)))
		}
		q4 = y[2 : 2+n/2]
	}
	for i := 0; i < n/32; i++ {
		for j := 0; j < 16; j++ {
			q4[16*i+j] = L[32*i+j] | L[32*i+16+j]<<4
		}
	}
}
