package acurast

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// TunnelKey is a replica's Acurast tunnel identity. Key is the secret (base64 PKCS#8 DER of a P-256 key,
// delivered to the phone only as an encrypted environment variable); ClientID and URL are public.
type TunnelKey struct {
	Key      string `json:"-"`
	ClientID string `json:"client_id"`
	URL      string `json:"url"`
}

// NewTunnelKey generates a tunnel key; the phone's public URL is https://<ClientID>.<domainSuffix>, known
// before deploying (acurast.md §2.7 "pre-computed URL").
func NewTunnelKey(domainSuffix string) (TunnelKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return TunnelKey{}, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return TunnelKey{}, err
	}
	return TunnelKeyFrom(base64.StdEncoding.EncodeToString(der), domainSuffix)
}

// TunnelKeyFrom derives the client ID and URL of an existing key: the first 8 bytes of sha256 of the
// compressed public key, hex (Acurast/quic-tunnel tunnel-client/src/client.rs, acurast.md §3.4).
func TunnelKeyFrom(key, domainSuffix string) (TunnelKey, error) {
	der, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return TunnelKey{}, fmt.Errorf("acurast: tunnel key: %w", err)
	}
	pk, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return TunnelKey{}, fmt.Errorf("acurast: tunnel key: %w", err)
	}
	ek, ok := pk.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return TunnelKey{}, errors.New("acurast: tunnel key is not a P-256 key")
	}
	pub, err := ek.PublicKey.ECDH()
	if err != nil {
		return TunnelKey{}, err
	}
	raw := pub.Bytes() // 0x04 || X || Y
	comp := make([]byte, 33)
	comp[0] = 2 | raw[64]&1
	copy(comp[1:], raw[1:33])
	s := sha256.Sum256(comp)
	id := hex.EncodeToString(s[:8])
	return TunnelKey{Key: key, ClientID: id, URL: "https://" + id + "." + domainSuffix}, nil
}
