package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/internal/httpx"
)

// AffinityMode says how requests are keyed for prefix-affine routing.
type AffinityMode string

// Affinity modes. In every mode but off, a client's prompt_cache_key field (OpenAI's) is the key when present
// (and checked: at most MaxCacheKeyBytes); off reads nothing of a request but its model.
const (
	// AffinityAuto keys a request by its leading system and developer messages (the rendered rubric every
	// request of one task shares), else by the first KeyBytes of its prompt.
	AffinityAuto AffinityMode = "auto"
	// AffinitySystem keys by the leading system and developer messages only; requests without them are routed
	// by load.
	AffinitySystem AffinityMode = "system"
	// AffinityPrefix keys by the first KeyBytes of the prompt (the messages' roles and text in order).
	AffinityPrefix AffinityMode = "prefix"
	// AffinityOff routes by load only (least outstanding requests per slot).
	AffinityOff AffinityMode = "off"
)

// ParseAffinityMode checks a mode name ("" is auto).
func ParseAffinityMode(s string) (AffinityMode, error) {
	switch m := AffinityMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return AffinityAuto, nil
	case AffinityAuto, AffinitySystem, AffinityPrefix, AffinityOff:
		return m, nil
	}
	return "", fmt.Errorf("gateway: affinity %q: want auto, system, prefix or off", s)
}

// AffinityOptions configure prefix-affine routing. The zero value is AffinityAuto with the defaults below.
type AffinityOptions struct {
	Mode AffinityMode
	// KeyBytes is how much of the prompt keys a request that has no system message (AffinityAuto) or always
	// (AffinityPrefix); default 4096.
	KeyBytes int
	// MaxKeys bounds the keys whose statistics the gateway remembers (default 4096); the least recently used
	// is forgotten first.
	MaxKeys int
}

func (o *AffinityOptions) defaults() {
	if o.Mode == "" {
		o.Mode = AffinityAuto
	}
	if o.KeyBytes <= 0 {
		o.KeyBytes = 4096
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 4096
	}
}

// MaxCacheKeyBytes bounds a client's prompt_cache_key; a longer one is refused with 400.
const MaxCacheKeyBytes = 1024

// RoutingHeader, sent by a client as "load", routes that request by load only (the comparison runs of
// `phonellm bench fleet --compare` use it); "affinity" asks for the gateway's affinity mode. The gateway removes
// it before forwarding.
const RoutingHeader = "Phonellm-Routing"

// keyBody holds the fields of a chat or completion request that key it.
type keyBody struct {
	Model          string          `json:"model"`
	PromptCacheKey json.RawMessage `json:"prompt_cache_key"`
	Messages       []keyMessage    `json:"messages"`
	Prompt         json.RawMessage `json:"prompt"`
}

type keyMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// reqKey is what keyOf found: the routing key (ok false: none, route by load), the request's model, how many
// bytes of content the key covers (the shared part, as far as the request shows it: the system messages or the
// prefix; 0 for a prompt_cache_key) and how many bytes of content the request holds in all.
type reqKey struct {
	key           uint64
	model         string
	ok            bool
	shared, total int
}

// MaxKeyedBody bounds the requests keyOf parses: a larger body (no prompt of a phone's context is near it, and
// parsing one costs the gateway time and memory) is routed by load, and the replica answers it.
const MaxKeyedBody = 1 << 20

// keyOf returns the routing key of a POST body for path, with the request's model. A *httpx.Error is a client
// mistake to answer with 400 (a prompt_cache_key that is not a string or is longer than MaxCacheKeyBytes). A
// body that is not JSON, or larger than MaxKeyedBody, has no key: the replica answers it.
func keyOf(body []byte, path string, o *AffinityOptions) (reqKey, *httpx.Error) {
	chat := strings.HasSuffix(path, "/chat/completions")
	if (!chat && !strings.HasSuffix(path, "/completions")) || len(body) > MaxKeyedBody {
		return reqKey{}, nil
	}
	var b keyBody
	if json.Unmarshal(body, &b) != nil {
		return reqKey{}, nil
	}
	k := reqKey{model: b.Model}
	var contents [][]byte
	if chat {
		for _, m := range b.Messages {
			c := contentBytes(m.Content)
			contents = append(contents, c)
			k.total += len(c)
		}
	}
	var prompt []byte
	if !chat {
		prompt, _ = promptBytes(b.Prompt)
		k.total = len(prompt)
	}
	h := newKeyHash(b.Model)
	if raw := bytes.TrimSpace(b.PromptCacheKey); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return k, httpx.BadRequest("prompt_cache_key", "invalid_type", "prompt_cache_key must be a string")
		}
		if len(s) > MaxCacheKeyBytes {
			return k, httpx.BadRequest("prompt_cache_key", "string_above_max_length",
				"Invalid 'prompt_cache_key': string too long: %d bytes, at most %d.", len(s), MaxCacheKeyBytes)
		}
		if s != "" {
			h.part("cache_key", s)
			k.key, k.ok = h.sum(), true
			return k, nil
		}
	}
	if o.Mode == AffinityOff {
		return k, nil
	}
	if chat {
		if o.Mode != AffinityPrefix {
			n := 0
			for i, m := range b.Messages {
				if m.Role != "system" && m.Role != "developer" {
					break
				}
				// A developer message is rendered as a system message by phonellm serve (and by OpenAI).
				h.part("system", "")
				h.raw(contents[i])
				k.shared += len(contents[i])
				n++
			}
			if n > 0 {
				k.key, k.ok = h.sum(), true
				return k, nil
			}
			if o.Mode == AffinitySystem {
				return k, nil
			}
		}
		if len(b.Messages) == 0 {
			return k, nil
		}
		// The first KeyBytes of the conversation: roles and contents in order.
		left := o.KeyBytes
		h.part("prefix", "")
		for i, m := range b.Messages {
			if left <= 0 {
				break
			}
			left -= h.capped([]byte(m.Role+"\x00"), left)
			n := h.capped(contents[i], left)
			left -= n
			k.shared += n
		}
		k.key, k.ok = h.sum(), true
		return k, nil
	}
	if o.Mode == AffinitySystem || len(prompt) == 0 {
		return k, nil
	}
	h.part("prefix", "")
	k.shared = h.capped(prompt, o.KeyBytes)
	k.key, k.ok = h.sum(), true
	return k, nil
}

// contentBytes is a message content as text: a string's value, the text parts of an array concatenated (other
// parts as their JSON), anything else as its raw JSON.
func contentBytes(raw json.RawMessage) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return []byte(s)
		}
	case '[':
		var parts []json.RawMessage
		if json.Unmarshal(raw, &parts) == nil {
			var out []byte
			for _, p := range parts {
				var tp struct {
					Type string `json:"type"`
					Text string `json:"text"`
				}
				if json.Unmarshal(p, &tp) == nil && tp.Type == "text" {
					out = append(out, tp.Text...)
				} else {
					out = append(out, p...)
				}
			}
			return out
		}
	}
	return raw
}

// promptBytes is a completion request's prompt as bytes: a string (or an array of one string) as its text, an
// array of token ids as their decimal form.
func promptBytes(raw json.RawMessage) ([]byte, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []byte(s), true
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		return []byte(ss[0]), true
	}
	var ids []json.Number
	if json.Unmarshal(raw, &ids) == nil {
		var out []byte
		for _, id := range ids {
			out = strconv.AppendQuote(out, id.String())
		}
		return out, true
	}
	return nil, false
}

// keyHash hashes the parts of a key with SHA-256 (keys come from strangers: no crafted collisions), each part
// tagged and length-prefixed so that different splits of the same bytes differ.
type keyHash struct{ d hash.Hash }

func newKeyHash(model string) *keyHash {
	k := &keyHash{d: sha256.New()}
	k.part("model", model)
	return k
}

func (k *keyHash) part(tag, s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	k.d.Write([]byte(tag))
	k.d.Write([]byte{0})
	k.d.Write(n[:])
	k.d.Write([]byte(s))
}

func (k *keyHash) raw(b []byte) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	k.d.Write(n[:])
	k.d.Write(b)
}

// capped hashes at most limit bytes of b and returns how many it took.
func (k *keyHash) capped(b []byte, limit int) int {
	if len(b) > limit {
		b = b[:limit]
	}
	k.d.Write(b)
	return len(b)
}

// sum is the key: the first 8 bytes of the digest, never 0 (0 means "no key" inside the pool).
func (k *keyHash) sum() uint64 {
	v := binary.BigEndian.Uint64(k.d.Sum(nil))
	if v == 0 {
		v = 1
	}
	return v
}

// routingOverride reads the RoutingHeader: "load" forces load-only routing for this request.
func routingOverride(r *http.Request) (loadOnly bool) {
	return strings.EqualFold(strings.TrimSpace(r.Header.Get(RoutingHeader)), "load")
}
