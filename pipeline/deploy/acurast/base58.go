package acurast

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/big"

	"golang.org/x/crypto/blake2b"
)

const b58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

func base58Encode(b []byte) string {
	x := new(big.Int).SetBytes(b)
	var out []byte
	mod, base := new(big.Int), big.NewInt(58)
	for x.Sign() > 0 {
		x.DivMod(x, base, mod)
		out = append(out, b58Alphabet[mod.Int64()])
	}
	for _, c := range b {
		if c != 0 {
			break
		}
		out = append(out, '1')
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return string(out)
}

func base58Decode(s string) ([]byte, error) {
	if len(s) > 128 {
		return nil, errors.New("base58: string too long")
	}
	x, base := new(big.Int), big.NewInt(58)
	for _, c := range []byte(s) {
		i := -1
		for j := 0; j < len(b58Alphabet); j++ {
			if b58Alphabet[j] == c {
				i = j
				break
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("base58: invalid character %q", c)
		}
		x.Mul(x, base)
		x.Add(x, big.NewInt(int64(i)))
	}
	out := x.Bytes()
	for _, c := range []byte(s) {
		if c != '1' {
			break
		}
		out = append([]byte{0}, out...)
	}
	return out, nil
}

// CIDv0 is the IPFS CIDv0 ("Qm…") that `ipfs add` / Pinata (cidVersion 0, default 256 KiB chunker, no raw
// leaves) give a file of at most 256 KiB: base58(0x12 0x20 sha256(dag-pb node)), where the node is
// PBNode{Data: UnixFS{Type: File, Data: content, filesize: len}} (specs: ipfs/specs UNIXFS.md, DAG-PB).
// Larger files are split into a tree, which this function does not build; it returns ok=false for them.
func CIDv0(content []byte) (cid string, ok bool) {
	const chunk = 256 << 10
	if len(content) > chunk {
		return "", false
	}
	var u []byte
	u = append(u, 0x08, 0x02) // Type = File
	if len(content) > 0 {
		u = append(u, 0x12)
		u = appendUvarint(u, uint64(len(content)))
		u = append(u, content...)
	}
	u = append(u, 0x18)
	u = appendUvarint(u, uint64(len(content)))
	node := append([]byte{0x0a}, appendUvarint(nil, uint64(len(u)))...)
	node = append(node, u...)
	h := sha256.Sum256(node)
	return base58Encode(append([]byte{0x12, 0x20}, h[:]...)), true
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// DecodeSS58 returns the 32-byte account ID of an SS58 address (any network prefix < 64), checking its
// blake2b-512 "SS58PRE" checksum.
func DecodeSS58(addr string) ([32]byte, error) {
	var id [32]byte
	b, err := base58Decode(addr)
	if err != nil {
		return id, fmt.Errorf("acurast: address %q: %w", addr, err)
	}
	if len(b) != 35 || b[0] >= 64 {
		return id, fmt.Errorf("acurast: address %q: want a 1-byte prefix, 32-byte key and 2-byte checksum, got %d bytes", addr, len(b))
	}
	h, _ := blake2b.New512(nil)
	h.Write([]byte("SS58PRE"))
	h.Write(b[:33])
	sum := h.Sum(nil)
	if sum[0] != b[33] || sum[1] != b[34] {
		return id, fmt.Errorf("acurast: address %q: bad checksum", addr)
	}
	copy(id[:], b[1:33])
	return id, nil
}
