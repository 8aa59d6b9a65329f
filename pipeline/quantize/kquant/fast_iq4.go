package kquant

import "encoding/binary"

// Fast IQ4_NL / IQ4_XS encoder: the float32 operations of refIQ4Block with
// a branch-free nearest-table-entry search and fixed-size arrays.

// kvaluesIQ4NLf holds kvalues_iq4nl as float32, and kvaluesIQ4NLmid2 the sums
// of neighbouring entries (twice the midpoints), both exact.
var kvaluesIQ4NLf, kvaluesIQ4NLmid2 = func() (v, m [16]float32) {
	for i, k := range kvaluesIQ4NL {
		v[i] = float32(k)
		if i > 0 {
			m[i] = float32(int(kvaluesIQ4NL[i-1]) + int(k))
		}
	}
	return v, m
}()

// bestIndexIQ4 equals bestIndexInt8(&kvaluesIQ4NL, x) for every x. For a
// non-NaN x it picks entry i once 2x reaches val[i-1] + val[i] (exact in
// float32). The reference compares x - val[i-1] with val[i] - x instead;
// the two agree because close to a midpoint (|x| >= 4.5 for this table)
// both differences are exact, and away from it rounding cannot make them
// equal. A NaN goes to the last entry, as in the reference's search.
func bestIndexIQ4(x float32) int {
	if x != x {
		return 15
	}
	x2 := x + x
	idx := 0
	if x2 >= kvaluesIQ4NLmid2[idx+8] {
		idx += 8
	}
	if x2 >= kvaluesIQ4NLmid2[idx+4] {
		idx += 4
	}
	if x2 >= kvaluesIQ4NLmid2[idx+2] {
		idx += 2
	}
	if x2 >= kvaluesIQ4NLmid2[idx+1] {
		idx++
	}
	return idx
}

// iq4Search is the per-32-block scale search of quantize_row_iq4_nl_impl
// (no weights: w = x*x, ntry = 7). It fills Lb and returns the scale.
func iq4Search(xb *[32]float32, Lb *[32]uint8) float32 {
	var weight [32]float32
	var amax, max float32
	for j, v := range xb {
		weight[j] = v * v
		if ax := absf(v); ax > amax {
			amax = ax
			max = v
		}
	}
	if amax < groupMaxEps {
		*Lb = [32]uint8{}
		return 0
	}
	d := -max / -127
	id := 1 / d
	var sumqx, sumq2 float32
	for j, v := range xb {
		l := bestIndexIQ4(id * v)
		Lb[j] = uint8(l)
		q := kvaluesIQ4NLf[l]
		w := weight[j]
		sumqx += float32(w * q * v)
		sumq2 += float32(w * q * q)
	}
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	// A try whose levels equal the previous try's has the same sums; with
	// the same best it is rejected again, and if the previous try set best
	// it re-sets the same d and best. Either way nothing changes.
	var prev, cur [32]uint8
	havePrev := false
	for itry := -7; itry <= 7; itry++ {
		id = float32(itry-127) / max
		for j, v := range xb {
			cur[j] = uint8(bestIndexIQ4(id * v))
		}
		if havePrev && cur == prev {
			continue
		}
		prev, havePrev = cur, true
		sumqx, sumq2 = 0, 0
		for j, v := range xb {
			q := kvaluesIQ4NLf[cur[j]&15]
			w := weight[j]
			sumqx += float32(w * q * v)
			sumq2 += float32(w * q * q)
		}
		if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

func fastIQ4NL(y []byte, xs []float32) {
	y = y[:18]
	x := (*[32]float32)(xs[:32])
	var L [32]uint8
	s := iq4Search(x, &L)
	putFP16(y, s)
	var id float32
	if s != 0 {
		id = 1 / s
	}
	for j, v := range x {
		L[j] = uint8(bestIndexIQ4(id * v))
	}
	for j := 0; j < 16; j++ {
		y[2+j] = L[j] | L[16+j]<<4
	}
}

func fastIQ4XS(y []byte, xs []float32) {
	y = y[:136]
	x := (*[256]float32)(xs[:256])
	var L [256]uint8
	var scales [8]float32
	var maxScale, amaxScale float32
	for ib := 0; ib < 8; ib++ {
		d := iq4Search((*[32]float32)(x[32*ib:32*ib+32]), (*[32]uint8)(L[32*ib:32*ib+32]))
		scales[ib] = d
		if ad := absf(d); ad > amaxScale {
			amaxScale = ad
			maxScale = d
		}
	}
	d := -maxScale / 32
	putFP16(y[0:], d)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var scalesH uint16
	for ib := 0; ib < 8; ib++ {
		l := max(-32, min(31, nearestInt(float32(id*scales[ib]))))
		dl := d * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		for j := 32 * ib; j < 32*ib+32; j++ {
			L[j] = uint8(bestIndexIQ4(idl * x[j]))
		}
		l += 32
		if ib%2 == 0 {
			y[4+ib/2] = uint8(l) & 0xF
		} else {
			y[4+ib/2] |= (uint8(l) & 0xF) << 4
		}
		scalesH |= uint16(l>>4) << (2 * ib)
	}
	binary.LittleEndian.PutUint16(y[2:], scalesH)
	for i := 0; i < 8; i++ {
		for j := 0; j < 16; j++ {
			y[8+16*i+j] = L[32*i+j] | L[32*i+16+j]<<4
		}
	}
}
