package bytelevel

import "testing"

// TestTable checks the literal table against bytes_to_unicode's definition: the printable ranges map to
// themselves and the remaining bytes, in increasing order, to 256, 257, ….
func TestTable(t *testing.T) {
	next := rune(256)
	for b := range 256 {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		want := rune(b)
		if !printable {
			want = next
			next++
		}
		if Rune[b] != want {
			t.Errorf("Rune[%#02x] = %#x, want %#x", b, Rune[b], want)
		}
		if got, ok := Byte(want); !ok || got != byte(b) {
			t.Errorf("Byte(%#x) = %#02x, %v; want %#02x", want, got, ok, b)
		}
	}
	if next != 0x144 {
		t.Fatalf("%d remapped bytes, want 68", next-256)
	}
	for _, r := range []rune{-1, 0x20, 0x7F, 0xAD, 0x144, 0x10FFFF} {
		if _, ok := Byte(r); ok {
			t.Errorf("Byte(%#x) is a byte-level character", r)
		}
	}
	if Order[0] != '!' || Order[93] != '~' || Order[188] != 0 || Order[255] != 0xAD {
		t.Errorf("Order = %v", Order)
	}
}
