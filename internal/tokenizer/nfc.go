package tokenizer

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// cgj is U+034F COMBINING GRAPHEME JOINER.
const cgj = "\u034f"

// nfc returns s in Unicode Normalization Form C as Hugging Face's NFC normalizer computes it.
//
// golang.org/x/text/unicode/norm implements UAX #15's Stream-Safe Text Format: after 30 non-starters in a
// row it inserts a U+034F COMBINING GRAPHEME JOINER and normalizes the two halves separately. Hugging Face
// (the unicode-normalization crate) has no such limit, so for the rare text with longer runs of combining
// marks the segments concerned are normalized here without it: full canonical decomposition, canonical
// ordering of the whole run, canonical composition (UAX #15 D117).
func nfc(s string) string {
	r := norm.NFC.String(s)
	if len(r) == len(s) && r == s || strings.Count(r, cgj) == strings.Count(s, cgj) {
		return r
	}
	var b strings.Builder
	b.Grow(len(s))
	// Cut s where a character starts a new normalization segment; only segments norm would split get the
	// slow path.
	start := 0
	for i := 0; i < len(s); {
		p := norm.NFC.PropertiesString(s[i:])
		n := max(p.Size(), 1)
		if i > start && p.BoundaryBefore() {
			b.WriteString(nfcSegment(s[start:i]))
			start = i
		}
		i += n
	}
	b.WriteString(nfcSegment(s[start:]))
	return b.String()
}

// nfcSegment normalizes a segment that no boundary divides.
func nfcSegment(seg string) string {
	r := norm.NFC.String(seg)
	if strings.Count(r, cgj) == strings.Count(seg, cgj) {
		return r
	}
	// Full canonical decomposition, one character at a time (no single character decomposes into more than
	// a few non-starters, so norm does not insert anything here).
	type char struct {
		r   rune
		ccc uint8
	}
	var cs []char
	for _, c := range seg {
		for _, d := range norm.NFD.String(string(c)) {
			cs = append(cs, char{d, norm.NFD.PropertiesString(string(d)).CCC()})
		}
	}
	// Canonical ordering: each run of non-starters sorted by combining class, stably.
	for i := 0; i < len(cs); {
		if cs[i].ccc == 0 {
			i++
			continue
		}
		j := i
		for j < len(cs) && cs[j].ccc != 0 {
			j++
		}
		slices.SortStableFunc(cs[i:j], func(a, b char) int { return int(a.ccc) - int(b.ccc) })
		i = j
	}
	// Canonical composition: a character composes with the last starter when nothing left between them
	// blocks it (a starter, or a character of the same or a higher class; the run is sorted, so only the
	// last one left needs checking).
	out := make([]rune, 0, len(cs))
	starter, last := -1, uint8(0)
	memo := map[[2]rune]rune{}
	for _, c := range cs {
		if starter >= 0 && (len(out)-1 == starter || last != 0 && last < c.ccc) {
			if p, ok := compose(memo, out[starter], c.r); ok {
				out[starter] = p
				continue
			}
		}
		out = append(out, c.r)
		if c.ccc == 0 {
			starter = len(out) - 1
		}
		last = c.ccc
	}
	return string(out)
}

// compose returns the primary composite of a starter and a following character, if there is one. The
// starter is a composite built so far from a base and characters of classes no higher than c's, so the
// NFC of the pair is the composite exactly when one exists.
func compose(memo map[[2]rune]rune, starter, c rune) (rune, bool) {
	k := [2]rune{starter, c}
	if p, ok := memo[k]; ok {
		return p, p >= 0
	}
	p := rune(-1)
	if r := norm.NFC.String(string(starter) + string(c)); utf8.RuneCountInString(r) == 1 {
		p, _ = utf8.DecodeRuneInString(r)
	}
	memo[k] = p
	return p, p >= 0
}
