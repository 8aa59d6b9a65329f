package tokenizer

import (
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

func TestNFC(t *testing.T) {
	marks := func(s string, n int) string { return strings.Repeat(s, n) }
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"e\u0301", "é"},
		{"\u212b", "Å"},
		{"a\u0316\u0301", "á\u0316"}, // reordered (220 before 230), then a + ◌́ composes over ◌̖
		// Beyond 30 non-starters Go's norm would insert U+034F; the whole run is ordered and composed.
		{"Z" + marks("\u0301\u0316", 20), "Ź" + marks("\u0316", 20) + marks("\u0301", 19)},
		{"Z" + marks("\u0316\u0301", 20) + "x", "Ź" + marks("\u0316", 20) + marks("\u0301", 19) + "x"},
		{"a" + marks("\u0300", 40) + " b" + marks("\u0323", 31) + "\u0307", "à" + marks("\u0300", 39) + " ḅ" + marks("\u0323", 30) + "\u0307"},
		{marks("\u0301", 35) + "e", marks("\u0301", 35) + "e"}, // no starter to compose with
		{"x\u034f" + marks("\u0301", 3), "x\u034f" + marks("\u0301", 3)},
	} {
		if got := nfc(c.in); got != c.want {
			t.Errorf("nfc(%+q) = %+q, want %+q", c.in, got, c.want)
		}
	}
	// Without long runs it is norm's NFC.
	for _, s := range []string{"Größe", "e\u0301\u0323", "한국어", "\u1100\u1161\u11a8", "ﬁ", "Å\u030a"} {
		if got, want := nfc(s), norm.NFC.String(s); got != want {
			t.Errorf("nfc(%+q) = %+q, norm gives %+q", s, got, want)
		}
	}
}
