package convert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/fsx"
)

// Size caps for the JSON files of a checkpoint. The largest real tokenizer.json files (250k-token vocabularies
// with merges) are around 20 MB; config.json and tokenizer_config.json are a few hundred KB at most.
const (
	maxConfigBytes    = 16 << 20
	maxTokenizerBytes = 256 << 20
)

// readJSON decodes the JSON file at path into v, numbers as json.Number. A missing file returns an error
// satisfying errors.Is(err, fs.ErrNotExist).
func readJSON(path string, limit int64, v any) error {
	f, err := fsx.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return fmt.Errorf("convert: read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return &ConfigError{File: path, Msg: fmt.Sprintf("file is larger than %d bytes", limit)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return &ConfigError{File: path, Msg: "invalid JSON: " + err.Error()}
	}
	return nil
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// hparams is config.json with text_config merged into the root, text_config winning, as
// conversion/base.py TextModel.__init__ does ({**root, **text_config}).
type hparams struct {
	file   string
	root   map[string]any
	text   map[string]any
	merged map[string]any
}

func loadHParams(dir string) (*hparams, error) {
	path := filepath.Join(dir, "config.json")
	var root map[string]any
	if err := readJSON(path, maxConfigBytes, &root); err != nil {
		if isNotExist(err) {
			return nil, &ConfigError{File: path, Msg: "missing (not a Hugging Face model directory?)"}
		}
		return nil, err
	}
	if root == nil {
		return nil, &ConfigError{File: path, Msg: "not a JSON object"}
	}
	h := &hparams{file: path, root: root, merged: map[string]any{}}
	for k, v := range root {
		h.merged[k] = v
	}
	if tc, ok := root["text_config"]; ok && tc != nil {
		m, ok := tc.(map[string]any)
		if !ok {
			return nil, &ConfigError{File: path, Field: "text_config", Msg: "not a JSON object"}
		}
		h.text = m
		for k, v := range m {
			h.merged[k] = v
		}
	}
	return h, nil
}

// field names the key as found, for error messages ("text_config.head_dim").
func (h *hparams) field(key string) string {
	if h.text != nil {
		if _, ok := h.text[key]; ok {
			return "text_config." + key
		}
	}
	return key
}

func (h *hparams) has(key string) bool {
	v, ok := h.merged[key]
	return ok && v != nil
}

// find returns the first key present (and not null), like base.py find_hparam.
func (h *hparams) find(keys ...string) (string, bool) {
	for _, k := range keys {
		if h.has(k) {
			return k, true
		}
	}
	return "", false
}

func (h *hparams) errf(key, format string, args ...any) error {
	return &ConfigError{File: h.file, Field: h.field(key), Msg: fmt.Sprintf(format, args...)}
}

func (h *hparams) missing(keys ...string) error {
	if len(keys) == 1 {
		return &ConfigError{File: h.file, Field: keys[0], Msg: "missing"}
	}
	return &ConfigError{File: h.file, Field: keys[0], Msg: fmt.Sprintf("missing (looked for %q)", keys)}
}

// int returns an integer field. ok is false when absent or null.
func (h *hparams) int(key string) (v int64, ok bool, err error) {
	x, present := h.merged[key]
	if !present || x == nil {
		return 0, false, nil
	}
	n, err := jsonInt(x)
	if err != nil {
		return 0, true, h.errf(key, "%v", err)
	}
	return n, true, nil
}

// uint32 returns a non-negative integer field that fits a GGUF uint32.
func (h *hparams) uint32(key string) (v uint32, ok bool, err error) {
	n, ok, err := h.int(key)
	if err != nil || !ok {
		return 0, ok, err
	}
	if n < 0 || n > math.MaxUint32 {
		return 0, true, h.errf(key, "value %d out of range (want 0..%d)", n, uint32(math.MaxUint32))
	}
	return uint32(n), true, nil
}

// reqUint32 is uint32 for a field that must be present.
func (h *hparams) reqUint32(key string) (uint32, error) {
	v, ok, err := h.uint32(key)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, h.missing(key)
	}
	return v, nil
}

// positive is reqUint32 for a field that must also be at least 1.
func (h *hparams) positive(key string) (int64, error) {
	v, err := h.reqUint32(key)
	if err != nil {
		return 0, err
	}
	if v == 0 {
		return 0, h.errf(key, "must be at least 1")
	}
	return int64(v), nil
}

// float returns a numeric field as float64.
func (h *hparams) float(key string) (v float64, ok bool, err error) {
	x, present := h.merged[key]
	if !present || x == nil {
		return 0, false, nil
	}
	f, err := jsonFloat(x)
	if err != nil {
		return 0, true, h.errf(key, "%v", err)
	}
	return f, true, nil
}

func (h *hparams) str(key string) (string, bool) {
	s, ok := h.merged[key].(string)
	return s, ok
}

// architecture returns architectures[0] of the root config.
func (h *hparams) architecture() (string, error) {
	a, ok := h.root["architectures"].([]any)
	if !ok || len(a) == 0 {
		return "", &ConfigError{File: h.file, Field: "architectures", Msg: "missing or empty"}
	}
	s, ok := a[0].(string)
	if !ok {
		return "", &ConfigError{File: h.file, Field: "architectures", Msg: "first entry is not a string"}
	}
	return s, nil
}

func jsonInt(x any) (int64, error) {
	switch v := x.(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n, nil
		}
		f, err := v.Float64()
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, fmt.Errorf("%s is not an integer", v)
		}
		return int64(f), nil
	case bool:
		return 0, fmt.Errorf("got a boolean, want an integer")
	case string:
		return 0, fmt.Errorf("got the string %q, want an integer", v)
	}
	return 0, fmt.Errorf("got %T, want an integer", x)
}

func jsonFloat(x any) (float64, error) {
	if v, ok := x.(json.Number); ok {
		f, err := v.Float64()
		if err != nil {
			return 0, fmt.Errorf("%s is not a number", v)
		}
		return f, nil
	}
	return 0, fmt.Errorf("got %T, want a number", x)
}
