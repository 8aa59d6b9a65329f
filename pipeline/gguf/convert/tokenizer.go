package convert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Token types of tokenizer.ggml.token_type (gguf-py constants.py TokenType).
const (
	tokenNormal      int32 = 1
	tokenControl     int32 = 3
	tokenUserDefined int32 = 4
	tokenUnused      int32 = 5
)

// maxVocab bounds vocab_size (the largest real vocabularies are around 262k tokens).
const maxVocab = 1 << 22

// specialTypes are SpecialVocab's default special token types, in its order, with their GGUF keys.
var specialTypes = []struct{ typ, key string }{
	{"bos", "tokenizer.ggml.bos_token_id"},
	{"eos", "tokenizer.ggml.eos_token_id"},
	{"unk", "tokenizer.ggml.unknown_token_id"},
	{"sep", "tokenizer.ggml.seperator_token_id"}, // sic: gguf-py's spelling
	{"pad", "tokenizer.ggml.padding_token_id"},
	{"cls", ""}, // GGUFWriter has no add_cls_token_id: SpecialVocab skips it
	{"mask", "tokenizer.ggml.mask_token_id"},
}

// addFlagKeys are the add_<typ>_token flags GGUFWriter has a setter for; others are skipped as upstream does.
var addFlagKeys = map[string]string{
	"bos": "tokenizer.ggml.add_bos_token",
	"eos": "tokenizer.ggml.add_eos_token",
	"sep": "tokenizer.ggml.add_sep_token",
}

// tokenizerJSON is the part of a Hugging Face tokenizer.json the conversion reads.
type tokenizerJSON struct {
	Model struct {
		Type         string           `json:"type"`
		Vocab        map[string]int64 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
		ByteFallback bool             `json:"byte_fallback"`
	} `json:"model"`
	AddedTokens []struct {
		ID         int64  `json:"id"`
		Content    string `json:"content"`
		Special    bool   `json:"special"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
}

// parseTokenizerJSON decodes and checks tokenizer.json.
func parseTokenizerJSON(data []byte, file string) (*tokenizerJSON, error) {
	var tj tokenizerJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&tj); err != nil {
		return nil, &ConfigError{File: file, Msg: "invalid JSON: " + err.Error()}
	}
	if tj.Model.Type != "BPE" {
		return nil, &UnsupportedError{File: file, What: fmt.Sprintf("tokenizer model.type %q (want BPE)", tj.Model.Type)}
	}
	if tj.Model.ByteFallback {
		return nil, &UnsupportedError{File: file, What: "BPE tokenizer with byte_fallback (not a byte-level BPE)"}
	}
	if len(tj.Model.Vocab) == 0 {
		return nil, &ConfigError{File: file, Field: "model.vocab", Msg: "missing or empty"}
	}
	if len(tj.Model.Vocab) > maxVocab || len(tj.AddedTokens) > maxVocab {
		return nil, &ConfigError{File: file, Field: "model.vocab", Msg: fmt.Sprintf("more than %d tokens", maxVocab)}
	}
	return &tj, nil
}

// preTokenizerName detects tokenizer.ggml.pre from the Split regexes of the pre_tokenizer.
func preTokenizerName(raw json.RawMessage, file string) (string, error) {
	var regexes []string
	var walk func(x any)
	walk = func(x any) {
		m, ok := x.(map[string]any)
		if !ok {
			return
		}
		switch m["type"] {
		case "Sequence":
			if list, ok := m["pretokenizers"].([]any); ok {
				for _, e := range list {
					walk(e)
				}
			}
		case "Split":
			if pat, ok := m["pattern"].(map[string]any); ok {
				if r, ok := pat["Regex"].(string); ok {
					regexes = append(regexes, r)
				}
			}
		}
	}
	var x any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &x); err != nil {
			return "", &ConfigError{File: file, Field: "pre_tokenizer", Msg: err.Error()}
		}
	}
	walk(x)
	if len(regexes) == 0 {
		return "", &UnsupportedError{File: file, What: "pre_tokenizer without a Split regex (known: qwen2, qwen35)"}
	}
	// The Split regexes of the Qwen tokenizers, as tokenizer.json stores them or in llama.cpp's case-expanded
	// spelling (their sha256 are ollama convert/tokenizer.go's 1ff7f410… and 00431aed…).
	joined := strings.Join(regexes, "")
	if pre := tokenizer.PreForRegex(joined); pre != "" {
		return pre, nil
	}
	return "", &UnsupportedError{File: file, What: fmt.Sprintf("pre-tokenizer regex %q (known: qwen2, qwen35)", joined)}
}

// mergeList returns model.merges as "a b" strings: either list of strings, or (transformers ≥ 4.45) list of
// pairs, joined with one space, spaces inside a part encoded as the byte-level character of a space, U+0120
// (SpecialVocab._try_load_from_tokenizer_json).
func mergeList(raw json.RawMessage, file string) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, &ConfigError{File: file, Field: "model.merges", Msg: "not a list"}
	}
	if len(items) > 4*maxVocab {
		return nil, &ConfigError{File: file, Field: "model.merges", Msg: fmt.Sprintf("%d merges, more than %d", len(items), 4*maxVocab)}
	}
	out := make([]string, 0, len(items))
	pairs := len(items) > 0 && bytes.HasPrefix(bytes.TrimSpace(items[0]), []byte("["))
	for i, it := range items {
		if !pairs {
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return nil, &ConfigError{File: file, Field: "model.merges", Msg: fmt.Sprintf("entry %d is not a string", i)}
			}
			out = append(out, s)
			continue
		}
		var p []string
		if err := json.Unmarshal(it, &p); err != nil || len(p) != 2 {
			return nil, &ConfigError{File: file, Field: "model.merges", Msg: fmt.Sprintf("entry %d is not a pair of strings", i)}
		}
		out = append(out, strings.ReplaceAll(p[0], " ", byteLevelSpace)+" "+strings.ReplaceAll(p[1], " ", byteLevelSpace))
	}
	return out, nil
}

var byteLevelSpace = string(bytelevel.Rune[' '])

// mergesTxt reads merges.txt (SpecialVocab._try_load_merges_txt): an optional "#" header line, then
// "a b" per line; malformed lines are skipped.
func mergesTxt(path string) ([]string, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []string
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first {
			first = false
			if strings.HasPrefix(line, "#") {
				continue
			}
		}
		if line == "" {
			continue
		}
		parts := strings.Fields(line)
		if len(parts) != 2 {
			continue
		}
		out = append(out, parts[0]+" "+parts[1])
		if len(out) > 4*maxVocab {
			return nil, &ConfigError{File: path, Msg: "too many merges"}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("convert: read %s: %w", path, err)
	}
	return out, nil
}

// looksSpecial is TextModel.does_token_look_special.
func looksSpecial(t string) bool {
	switch t {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return (strings.HasPrefix(t, "<|") && strings.HasSuffix(t, "|>")) ||
		(strings.HasPrefix(t, "<｜") && strings.HasSuffix(t, "｜>")) ||
		(strings.HasPrefix(t, "<unused") && strings.HasSuffix(t, ">"))
}

// vocab holds the tokenizer KVs.
type vocab struct {
	pre       string
	tokens    []string
	types     []int32
	merges    []string
	special   []gguf.KV // ids, in SpecialVocab insertion order
	addFlags  []gguf.KV
	templates []gguf.KV
}

func (v *vocab) kvs() []gguf.KV {
	out := []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.String("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.String(v.pre)},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(v.tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(v.types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.Strings(v.merges)},
	}
	out = append(out, v.special...)
	out = append(out, v.addFlags...)
	return append(out, v.templates...)
}

// buildVocab is TextModel.get_vocab_base: ids [0, n) from the BPE vocabulary and added tokens, missing ids as
// "[PAD<id>]" UNUSED, added tokens CONTROL when special (or looking special) and USER_DEFINED otherwise.
func buildVocab(tj *tokenizerJSON, n int64, file string) ([]string, []int32, error) {
	tokens := make([]string, n)
	types := make([]int32, n)
	for s, id := range tj.Model.Vocab {
		if id < 0 || id >= n {
			return nil, nil, &ConfigError{File: file, Field: "model.vocab", Msg: fmt.Sprintf("token %q has id %d outside vocab_size %d", s, id, n)}
		}
		if types[id] != 0 && tokens[id] != s {
			return nil, nil, &ConfigError{File: file, Field: "model.vocab", Msg: fmt.Sprintf("id %d used by %q and %q", id, tokens[id], s)}
		}
		tokens[id], types[id] = s, tokenNormal
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 || a.ID >= n {
			return nil, nil, &ConfigError{File: file, Field: "added_tokens", Msg: fmt.Sprintf("token %q has id %d outside vocab_size %d", a.Content, a.ID, n)}
		}
		if a.Special || looksSpecial(a.Content) {
			tokens[a.ID], types[a.ID] = a.Content, tokenControl
		} else {
			tokens[a.ID], types[a.ID] = strings.ReplaceAll(a.Content, "\u2581", " "), tokenUserDefined
		}
	}
	for i := range tokens {
		if types[i] == 0 {
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), tokenUnused
		}
	}
	return tokens, types, nil
}

// loadTokenizer reads tokenizer.json, tokenizer_config.json, chat templates and config.json's special ids.
// embedRows, when > 0, is the row count of token_embd, which the vocabulary size must equal (llama.cpp
// checks it at load time).
func loadTokenizer(dir string, h *hparams, embedRows int64) (*vocab, error) {
	file := filepath.Join(dir, "tokenizer.json")
	st, err := os.Stat(file)
	if err != nil {
		if isNotExist(err) {
			return nil, &UnsupportedError{File: file, What: "checkpoint without tokenizer.json"}
		}
		return nil, fmt.Errorf("convert: %w", err)
	}
	if st.Size() > maxTokenizerBytes {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("larger than %d bytes", maxTokenizerBytes)}
	}
	data, err := fsx.ReadFile(file, maxTokenizerBytes)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	tj, err := parseTokenizerJSON(data, file)
	if err != nil {
		return nil, err
	}
	v := &vocab{}
	if v.pre, err = preTokenizerName(tj.PreTokenizer, file); err != nil {
		return nil, err
	}
	n, ok, err := h.int("vocab_size")
	if err != nil {
		return nil, err
	}
	if !ok {
		ids := map[int64]bool{}
		for _, id := range tj.Model.Vocab {
			ids[id] = true
		}
		for _, a := range tj.AddedTokens {
			ids[a.ID] = true
		}
		n = int64(len(ids))
	}
	if n <= 0 || n > maxVocab {
		return nil, h.errf("vocab_size", "%d out of range (1..%d)", n, maxVocab)
	}
	if embedRows > 0 && n != embedRows {
		return nil, h.errf("vocab_size", "%d tokens but token_embd has %d rows", n, embedRows)
	}
	if v.tokens, v.types, err = buildVocab(tj, n, file); err != nil {
		return nil, err
	}
	if v.merges, err = mergeList(tj.Model.Merges, file); err != nil {
		return nil, err
	}
	if len(v.merges) == 0 {
		if mt := filepath.Join(dir, "merges.txt"); fileExists(mt) {
			if v.merges, err = mergesTxt(mt); err != nil {
				return nil, err
			}
		}
	}
	if len(v.merges) == 0 {
		// gguf-py would drop the empty key and llama.cpp then refuses the file ("cannot find tokenizer merges").
		return nil, &ConfigError{File: file, Field: "model.merges", Msg: "no merges (a gpt2 vocabulary needs them)"}
	}
	if err := v.loadSpecial(dir, tj, h); err != nil {
		return nil, err
	}
	if err := v.check(file); err != nil {
		return nil, err
	}
	return v, nil
}

// check builds the runtime's tokenizer from the vocabulary about to be written, so that convert refuses a
// tokenizer.json whose GGUF the runtime (and llama.cpp, which also refuses duplicate tokens) would refuse:
// duplicate or empty tokens, merges naming tokens that do not exist, a byte symbol missing.
func (v *vocab) check(file string) error {
	types := make([]tokenizer.Type, len(v.types))
	for i, t := range v.types {
		types[i] = tokenizer.Type(t)
	}
	_, err := tokenizer.New(tokenizer.Vocab{File: file, Model: "gpt2", Pre: v.pre, Tokens: v.tokens, Types: types,
		Merges: v.merges, BOS: -1, EOS: -1})
	var te *tokenizer.Error
	if errors.As(err, &te) {
		return &ConfigError{File: file, Msg: fmt.Sprintf("its vocabulary cannot be used (GGUF %s: %s)", te.Key, te.Msg)}
	}
	return err
}

// loadSpecial is SpecialVocab._try_load_from_tokenizer_json + _try_load_from_config_json: special ids,
// add_*_token flags and chat templates.
func (v *vocab) loadSpecial(dir string, tj *tokenizerJSON, h *hparams) error {
	ids := map[string]bool{}
	set := func(typ string, id int64, where string) error {
		if id < 0 {
			return &ConfigError{File: where, Field: typ, Msg: fmt.Sprintf("invalid special token id %d", id)}
		}
		if ids[typ] || id > 1<<32-1 {
			return nil
		}
		ids[typ] = true
		for _, s := range specialTypes {
			if s.typ == typ && s.key != "" {
				v.special = append(v.special, gguf.KV{Key: s.key, Value: gguf.Uint32(uint32(id))})
			}
		}
		return nil
	}
	tcFile := filepath.Join(dir, "tokenizer_config.json")
	var tc map[string]any
	if err := readJSON(tcFile, maxConfigBytes, &tc); err != nil && !isNotExist(err) {
		return err
	}
	if len(tc) > 0 {
		if tc["bos_token"] == nil && tc["cls_token"] != nil {
			tc["bos_token"] = tc["cls_token"]
		}
		if tc["eos_token"] == nil && tc["sep_token"] != nil {
			tc["eos_token"] = tc["sep_token"]
		}
		if err := v.loadTemplates(dir, tc); err != nil {
			return err
		}
		for _, s := range specialTypes {
			if b, ok := tc["add_"+s.typ+"_token"].(bool); ok {
				if key, ok := addFlagKeys[s.typ]; ok {
					v.addFlags = append(v.addFlags, gguf.KV{Key: key, Value: gguf.Bool(b)})
				}
			}
			var content string
			switch e := tc[s.typ+"_token"].(type) {
			case string:
				content = e
			case map[string]any:
				c, ok := e["content"].(string)
				if !ok {
					continue
				}
				content = c
			default:
				continue
			}
			for _, a := range tj.AddedTokens {
				if a.Content == content {
					if err := set(s.typ, a.ID, tcFile); err != nil {
						return err
					}
					break
				}
			}
		}
	}
	for _, s := range specialTypes {
		x, ok := h.root[s.typ+"_token_id"]
		if (!ok || x == nil) && h.text != nil {
			x = h.text[s.typ+"_token_id"]
		}
		num, ok := x.(json.Number)
		if !ok {
			continue // absent, null or a list: not an int
		}
		id, err := num.Int64()
		if err != nil {
			continue
		}
		if err := set(s.typ, id, h.file); err != nil {
			return err
		}
	}
	return nil
}

// loadTemplates picks the chat template: tokenizer_config.json chat_template, else chat_template.jinja (with
// additional_chat_templates/*.jinja as named ones), else chat_template.json, and writes it as
// GGUFWriter.add_chat_template does.
func (v *vocab) loadTemplates(dir string, tc map[string]any) error {
	var alt any
	jinja := filepath.Join(dir, "chat_template.jinja")
	if fileExists(jinja) {
		b, err := readCapped(jinja)
		if err != nil {
			return err
		}
		alt = string(b)
		extra, _ := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
		sort.Strings(extra)
		if len(extra) > 0 {
			list := []any{map[string]any{"name": "default", "template": string(b)}}
			for _, p := range extra {
				t, err := readCapped(p)
				if err != nil {
					return err
				}
				list = append(list, map[string]any{"name": strings.TrimSuffix(filepath.Base(p), ".jinja"), "template": string(t)})
			}
			alt = list
		}
	} else if cj := filepath.Join(dir, "chat_template.json"); fileExists(cj) {
		var m map[string]any
		if err := readJSON(cj, maxConfigBytes, &m); err != nil {
			return err
		}
		alt = m["chat_template"]
	}
	tmpl, ok := tc["chat_template"]
	if !ok {
		tmpl = alt
	}
	switch t := tmpl.(type) {
	case nil:
	case string:
		v.templates = append(v.templates, gguf.KV{Key: "tokenizer.chat_template", Value: gguf.String(t)})
	case []any:
		var names []string
		seen := map[string]bool{}
		def, hasDef := "", false
		for _, e := range t {
			m, ok := e.(map[string]any)
			if !ok {
				continue
			}
			name, _ := m["name"].(string)
			body, ok := m["template"].(string)
			name = sanitizeTemplateName(name)
			if name == "" || !ok {
				continue
			}
			if name == "default" {
				def, hasDef = body, true
				continue
			}
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
			v.templates = append(v.templates, gguf.KV{Key: "tokenizer.chat_template." + name, Value: gguf.String(body)})
		}
		if len(names) > 0 {
			v.templates = append(v.templates, gguf.KV{Key: "tokenizer.chat_templates", Value: gguf.Strings(names)})
		}
		if hasDef {
			v.templates = append(v.templates, gguf.KV{Key: "tokenizer.chat_template", Value: gguf.String(def)})
		}
	default:
		// SpecialVocab logs "Bad type for chat_template field" and ignores it.
	}
	return nil
}

// sanitizeTemplateName replaces every character but ASCII letters and digits with "_" (GGUFWriter).
func sanitizeTemplateName(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func readCapped(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	if st.Size() > maxConfigBytes {
		return nil, &ConfigError{File: path, Msg: fmt.Sprintf("larger than %d bytes", maxConfigBytes)}
	}
	b, err := fsx.ReadFile(path, maxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	return b, nil
}
