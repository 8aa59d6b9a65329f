package acurast

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func TestCIDv0(t *testing.T) {
	// Well-known `ipfs add` results (CIDv0, default chunker).
	for _, c := range []struct{ in, want string }{
		{"", "QmbFMke1KXqnYyBBWxB74N4c5SBnJMVAiMNRcGu6x1AwQH"},
		{"hello world\n", "QmT78zSuBmuS4z925WZfrqQ1qHaJ56DQaTfyMUF7F8ff5o"},
	} {
		got, ok := CIDv0([]byte(c.in))
		if !ok || got != c.want {
			t.Errorf("CIDv0(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	if _, ok := CIDv0(make([]byte, 256<<10+1)); ok {
		t.Error("CIDv0 claimed a multi-chunk file")
	}
	if cid, _ := CIDv0(make([]byte, 256<<10)); len("ipfs://"+cid) != 53 {
		t.Errorf("script %q is not 53 bytes", cid)
	}
}

func TestDecodeSS58(t *testing.T) {
	// Alice of the Substrate dev keyring, generic prefix 42.
	id, err := DecodeSS58("5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := hex.DecodeString("d43593c715fdd31c61141abd04a99fd6822c8558854ccde39a5684e7a56da27d")
	if !bytes.Equal(id[:], want) {
		t.Fatalf("account id %x", id)
	}
	if _, err := DecodeSS58("5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQZ"); err == nil {
		t.Error("bad checksum accepted")
	}
	if _, err := DecodeSS58("0OIl"); err == nil {
		t.Error("invalid base58 accepted")
	}
	b, _ := base58Decode(base58Encode([]byte{0, 0, 1, 2, 3}))
	if !bytes.Equal(b, []byte{0, 0, 1, 2, 3}) {
		t.Errorf("base58 round trip %x", b)
	}
}

func FuzzDecodeSS58(f *testing.F) {
	f.Add("5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		DecodeSS58(s)
	})
}
