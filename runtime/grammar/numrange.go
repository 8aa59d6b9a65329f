package grammar

import (
	"strconv"
	"strings"
)

// GBNF for decimal numbers within bounds (JSON Schema minimum/maximum).
// Integers: llama.cpp's converter does the same job (build_min_max_int);
// this is an independent construction: the range is cut into runs of equal
// digit count, and each run [a, b] is matched digit by digit — a common
// prefix, then a[0] followed by anything at least a's rest, the digits
// strictly between with any rest, and b[0] followed by anything at most
// b's rest. Unbounded sides allow up to 19 digits (int64). Numbers with
// integral bounds use the same integer parts, a fraction where the bound
// allows it, and no exponent.

const maxIntDigits = 19

func digitClass(lo, hi byte) string {
	if lo == hi {
		return "[" + string(lo) + "]"
	}
	return "[" + string(lo) + "-" + string(hi) + "]"
}

func allDigits(s string, d byte) bool {
	for i := range len(s) {
		if s[i] != d {
			return false
		}
	}
	return true
}

func anyDigits(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "[0-9]"
	}
	return "[0-9]{" + strconv.Itoa(n) + "}"
}

// sameLen matches the digit strings of one length between a and b.
func sameLen(a, b string) string {
	if a == "" {
		return ""
	}
	i := 0
	for i < len(a) && a[i] == b[i] {
		i++
	}
	if i == len(a) {
		return `"` + a + `"`
	}
	var parts []string
	if i > 0 {
		parts = append(parts, `"`+a[:i]+`"`)
	}
	a, b = a[i:], b[i:]
	rest := len(a) - 1
	if rest == 0 {
		return strings.Join(append(parts, digitClass(a[0], b[0])), " ")
	}
	var alts []string
	lo, hi := a[0], b[0]
	if !allDigits(a[1:], '0') {
		alts = append(alts, digitClass(a[0], a[0])+" ("+sameLen(a[1:], strings.Repeat("9", rest))+")")
		lo++
	}
	var last string
	if !allDigits(b[1:], '9') {
		last = digitClass(b[0], b[0]) + " (" + sameLen(strings.Repeat("0", rest), b[1:]) + ")"
		hi--
	}
	if lo <= hi {
		alts = append(alts, digitClass(lo, hi)+" "+anyDigits(rest))
	}
	if last != "" {
		alts = append(alts, last)
	}
	return strings.Join(append(parts, "("+strings.Join(alts, " | ")+")"), " ")
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// uintRange matches the decimal forms (no leading zeros) of lo..hi.
func uintRange(lo, hi uint64) string {
	ls, hs := strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10)
	var alts []string
	for n := len(ls); n <= len(hs); n++ {
		a, b := pow10(n-1), pow10(n)-1
		if n == 1 {
			a = 0
		}
		a, b = max(a, lo), min(b, hi)
		alts = append(alts, sameLen(strconv.FormatUint(a, 10), strconv.FormatUint(b, 10)))
	}
	return strings.Join(alts, " | ")
}

// uintAtLeast matches lo and above, up to maxIntDigits digits.
func uintAtLeast(lo uint64) string {
	ls := strconv.FormatUint(lo, 10)
	if len(ls) >= maxIntDigits {
		return uintRange(lo, pow10(maxIntDigits)-1)
	}
	alt := uintRange(lo, pow10(len(ls))-1)
	return alt + " | [1-9] [0-9]{" + strconv.Itoa(len(ls)) + "," + strconv.Itoa(maxIntDigits-1) + "}"
}

// bound is one side of a numeric range.
type bound struct {
	set       bool
	v         int64
	exclusive bool
}

// magnitude returns |v| as uint64 (also for math.MinInt64).
func magnitude(v int64) uint64 {
	if v >= 0 {
		return uint64(v)
	}
	return uint64(-(v + 1)) + 1
}

// intRangeGBNF matches the integers within [lo, hi] (sides may be unset);
// exclusive bounds must already be folded into inclusive ones. It returns
// "" when the range is empty.
func intRangeGBNF(lo, hi bound) string {
	var alts []string
	// Negative numbers: "-" then the magnitude.
	if !lo.set || lo.v < 0 {
		mlo := uint64(1)
		if hi.set && hi.v < 0 {
			mlo = magnitude(hi.v)
		}
		switch {
		case !lo.set:
			alts = append(alts, `"-" (`+uintAtLeast(mlo)+`)`)
		case mlo <= magnitude(lo.v):
			alts = append(alts, `"-" (`+uintRange(mlo, magnitude(lo.v))+`)`)
		}
	}
	if !hi.set || hi.v >= 0 {
		plo := uint64(0)
		if lo.set && lo.v > 0 {
			plo = uint64(lo.v)
		}
		switch {
		case !hi.set:
			alts = append(alts, uintAtLeast(plo))
		case plo <= uint64(hi.v):
			alts = append(alts, uintRange(plo, uint64(hi.v)))
		}
	}
	return strings.Join(alts, " | ")
}

const (
	anyFrac     = `("." [0-9]{1,16})?`
	zeroFrac    = `("." "0"{1,16})?`
	nonzeroFrac = `"." [0-9]{0,15} [1-9] [0-9]{0,15}`
)

// magnitudeAlts matches decimal magnitudes m (integer part, optional
// fraction) with lo < m (or <= when lo.exclusive is false) and m < hi (or
// <=), hi unset meaning unbounded; lo.v, hi.v >= 0.
func magnitudeAlts(lo, hi bound) []string {
	a := uint64(lo.v)
	if hi.set {
		b := uint64(hi.v)
		switch {
		case a > b:
			return nil
		case a == b:
			if lo.exclusive || hi.exclusive {
				return nil
			}
			return []string{`"` + strconv.FormatUint(a, 10) + `" ` + zeroFrac}
		}
	}
	var alts []string
	first := anyFrac
	if lo.exclusive {
		first = nonzeroFrac
	}
	alts = append(alts, `"`+strconv.FormatUint(a, 10)+`" `+first)
	if !hi.set {
		alts = append(alts, "("+uintAtLeast(a+1)+") "+anyFrac)
		return alts
	}
	b := uint64(hi.v)
	if a+1 <= b-1 && b > 0 {
		alts = append(alts, "("+uintRange(a+1, b-1)+") "+anyFrac)
	}
	if !hi.exclusive {
		alts = append(alts, `"`+strconv.FormatUint(b, 10)+`" `+zeroFrac)
	}
	return alts
}

// numberRangeGBNF matches JSON numbers (no exponent) within integral
// bounds; "" when the range is empty.
func numberRangeGBNF(lo, hi bound) string {
	var alts []string
	// x >= 0.
	if !hi.set || hi.v >= 0 {
		plo := bound{set: true}
		if lo.set && lo.v >= 0 {
			plo = lo
		}
		alts = append(alts, magnitudeAlts(plo, hi)...)
	}
	// x < 0: magnitude m > 0 (or >= -hi), m <= -lo.
	if !lo.set || lo.v < 0 {
		mlo := bound{set: true, v: 0, exclusive: true}
		if hi.set && hi.v < 0 {
			mlo = bound{set: true, v: int64(magnitude(hi.v)), exclusive: hi.exclusive}
		}
		mhi := bound{}
		if lo.set {
			mhi = bound{set: true, v: int64(magnitude(lo.v)), exclusive: lo.exclusive}
		}
		if neg := magnitudeAlts(mlo, mhi); len(neg) > 0 {
			alts = append(alts, `"-" (`+strings.Join(neg, " | ")+`)`)
		}
	}
	return strings.Join(alts, " | ")
}
