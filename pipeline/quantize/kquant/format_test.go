package kquant

import (
	"strings"
	"testing"
)

func TestFormatTable(t *testing.T) {
	want := []struct {
		name       string
		id         uint32
		bs, bb     int
		rowBytes4K int
	}{
		{"Q4_0", 2, 32, 18, 2304}, {"Q4_1", 3, 32, 20, 2560}, {"Q5_0", 6, 32, 22, 2816},
		{"Q5_1", 7, 32, 24, 3072}, {"Q8_0", 8, 32, 34, 4352}, {"Q2_K", 10, 256, 84, 1344},
		{"Q3_K", 11, 256, 110, 1760}, {"Q4_K", 12, 256, 144, 2304}, {"Q5_K", 13, 256, 176, 2816},
		{"Q6_K", 14, 256, 210, 3360}, {"IQ4_NL", 20, 32, 18, 2304}, {"IQ4_XS", 23, 256, 136, 2176},
		{"IQ2_XXS", 16, 256, 66, 1056}, {"IQ2_XS", 17, 256, 74, 1184}, {"IQ3_XXS", 18, 256, 98, 1568},
		{"IQ1_S", 19, 256, 50, 800}, {"IQ3_S", 21, 256, 110, 1760}, {"IQ2_S", 22, 256, 82, 1312},
		{"IQ1_M", 29, 256, 56, 896}, {"TQ1_0", 34, 256, 54, 864}, {"TQ2_0", 35, 256, 66, 1056},
	}
	if len(Formats()) != len(want) {
		t.Fatalf("%d formats, want %d", len(Formats()), len(want))
	}
	for _, w := range want {
		f, ok := ForType(w.id)
		if !ok || f.Name != w.name || f.BlockSize != w.bs || f.BlockBytes != w.bb {
			t.Errorf("ForType(%d) = %+v, %v", w.id, f, ok)
		}
		if g, ok := ForName(w.name); !ok || g.Type != w.id {
			t.Errorf("ForName(%q) = %d, %v", w.name, g.Type, ok)
		}
		if got := RowBytes(w.id, 4096); got != w.rowBytes4K {
			t.Errorf("RowBytes(%s, 4096) = %d, want %d", w.name, got, w.rowBytes4K)
		}
		if got := RowBytes(w.id, w.bs+1); got != -1 {
			t.Errorf("RowBytes(%s, %d) = %d, want -1", w.name, w.bs+1, got)
		}
	}
	for i, f := range Formats() {
		if i > 0 && f.Type <= Formats()[i-1].Type {
			t.Errorf("Formats() not in type-id order at %s", f.Name)
		}
	}
	for _, id := range []uint32{0, 1, 9, 15, 24, 30, 36, 39, 1000} {
		if _, ok := ForType(id); ok {
			t.Errorf("ForType(%d) reported support", id)
		}
		if RowBytes(id, 256) != -1 {
			t.Errorf("RowBytes(%d) != -1", id)
		}
	}
	if _, ok := ForName("q4_k"); ok {
		t.Error("ForName is documented as exact (upper case)")
	}
}

func TestLengthMisusePanics(t *testing.T) {
	f, _ := ForType(TypeQ4_K)
	mustPanic := func(what string, fn func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(r.(string), "kquant:") {
				t.Errorf("%s: got panic %v, want a kquant length panic", what, r)
			}
		}()
		fn()
	}
	mustPanic("partial block", func() { f.Quantize(make([]byte, 144), make([]float32, 255)) })
	mustPanic("short dst", func() { f.Quantize(make([]byte, 143), make([]float32, 256)) })
	mustPanic("short src", func() { f.Dequantize(make([]float32, 512), make([]byte, 200)) })
	mustPanic("partial out block", func() { f.Dequantize(make([]float32, 100), make([]byte, 144)) })
	// Zero blocks is fine and writes nothing.
	f.Quantize(nil, nil)
	f.Dequantize(nil, nil)
}
