package httpx

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Keys is a set of API keys accepted as "Authorization: Bearer <key>". Only their sha256 hashes are kept, and
// a request's token is compared with every key in constant time: neither which key matched nor the keys'
// lengths leak through timing. The zero Keys (or nil) holds no key.
type Keys struct {
	hashes [][32]byte
	deny   bool
}

// DenyAll returns Keys that require authentication and accept no token: what a server uses when the key it
// was given can never be sent, so that it fails closed.
func DenyAll() *Keys { return &Keys{deny: true} }

// NewKeys returns the set of keys. An empty key, or one with surrounding whitespace (a stray newline from a
// key file), is refused: a key nobody can send must not silently stand for "no authentication".
func NewKeys(keys ...string) (*Keys, error) {
	k := &Keys{}
	for i, key := range keys {
		if strings.TrimSpace(key) == "" || strings.TrimSpace(key) != key {
			return nil, fmt.Errorf("API key %d is empty or has surrounding whitespace", i)
		}
		k.hashes = append(k.hashes, sha256.Sum256([]byte(key)))
	}
	return k, nil
}

// Enabled reports whether any key is set (authentication is required).
func (k *Keys) Enabled() bool { return k != nil && (len(k.hashes) > 0 || k.deny) }

// Match returns the index of the key r's bearer token equals, or -1.
func (k *Keys) Match(r *http.Request) int {
	if !k.Enabled() {
		return -1
	}
	tok, ok := BearerToken(r)
	if !ok {
		return -1
	}
	got := sha256.Sum256([]byte(tok))
	match := -1
	for i := range k.hashes {
		eq := subtle.ConstantTimeCompare(got[:], k.hashes[i][:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	return match
}

// Authorized reports whether r carries one of the keys.
func (k *Keys) Authorized(r *http.Request) bool { return k.Match(r) >= 0 }

// BearerToken returns the token of an "Authorization: Bearer <token>" header (scheme case-insensitive,
// surrounding spaces dropped).
func BearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(prefix):])
	return tok, tok != ""
}

// KeyEnvError reports an API-key variable that cannot be used: authentication fails closed, so a server told
// to read its key from a variable refuses to start rather than serve everyone.
type KeyEnvError struct {
	Name   string
	Reason string // "is not set in this environment", "is empty", …
}

func (e *KeyEnvError) Error() string {
	if e.Name == "" {
		return "the API key variable name is empty"
	}
	return fmt.Sprintf("the API key variable %s %s (the server would accept any request)", e.Name, e.Reason)
}

// APIKeyFromEnv returns the API key held by the environment variable name. An unset, empty or
// whitespace-padded variable is an error (*KeyEnvError), never "no key".
func APIKeyFromEnv(name string) (string, error) {
	if name == "" {
		return "", &KeyEnvError{}
	}
	v, ok := os.LookupEnv(name)
	switch {
	case !ok:
		return "", &KeyEnvError{Name: name, Reason: "is not set in this environment"}
	case strings.TrimSpace(v) == "":
		return "", &KeyEnvError{Name: name, Reason: "is empty"}
	case strings.TrimSpace(v) != v:
		return "", &KeyEnvError{Name: name, Reason: "has leading or trailing whitespace"}
	}
	return v, nil
}
