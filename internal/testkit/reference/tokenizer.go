package reference

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Bounds on tokenizer.json contents (Qwen3.5 has 248k tokens and ~247k merges).
const (
	maxVocab    = 1 << 22
	maxMerges   = 1 << 22
	maxTokenLen = 1 << 16
)

// AddedToken is an entry of tokenizer.json "added_tokens".
type AddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Tokenizer implements the Hugging Face tokenizers pipeline of a Qwen byte-level BPE tokenizer.json.
type Tokenizer struct {
	model   bpeModel
	idToTok map[int]string
	added   []AddedToken // in tokenizer.json order
	pattern []string     // the text each added token matches: its content, NFC-normalized when normalized
	addedID map[int]int  // id → index into added
	raw     []int        // indices of added tokens matched on the raw text (normalized: false)
	normd   []int        // indices of added tokens matched on the normalized text (normalized: true)
	nfc     bool
	split   splitScanner
	pre     string // "qwen2" or "qwen35"
}

type tokenizerJSON struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string            `json:"type"`
		Vocab                   map[string]int    `json:"vocab"`
		Merges                  []json.RawMessage `json:"merges"`
		UnkToken                *string           `json:"unk_token"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		FuseUnk                 bool              `json:"fuse_unk"`
		ByteFallback            bool              `json:"byte_fallback"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Dropout                 *float64          `json:"dropout"`
	} `json:"model"`
}

type component struct {
	Type          string          `json:"type"`
	Normalizers   []component     `json:"normalizers"`
	Pretokenizers []component     `json:"pretokenizers"`
	Pattern       json.RawMessage `json:"pattern"`
	Behavior      string          `json:"behavior"`
	Invert        bool            `json:"invert"`
	AddPrefix     bool            `json:"add_prefix_space"`
	UseRegex      *bool           `json:"use_regex"`
}

// LoadTokenizer reads a tokenizer.json.
func LoadTokenizer(path string) (*Tokenizer, error) {
	data, err := readCapped(path, 512<<20)
	if err != nil {
		return nil, err
	}
	return ParseTokenizer(path, data)
}

// ParseTokenizer parses tokenizer.json content; path names the file in errors.
func ParseTokenizer(path string, data []byte) (*Tokenizer, error) {
	bad := func(format string, a ...any) error { return &FormatError{File: path, What: fmt.Sprintf(format, a...)} }
	unsup := func(format string, a ...any) error {
		return &UnsupportedError{File: path, What: fmt.Sprintf(format, a...)}
	}
	var tj tokenizerJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&tj); err != nil {
		return nil, bad("invalid JSON: %v", err)
	}
	m := &tj.Model
	switch {
	case m.Type != "BPE":
		return nil, unsup("model.type %q (only BPE)", m.Type)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, unsup("model.continuing_subword_prefix %q", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, unsup("model.end_of_word_suffix %q", *m.EndOfWordSuffix)
	case m.FuseUnk || m.ByteFallback:
		return nil, unsup("model.fuse_unk / byte_fallback")
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, unsup("model.dropout %g", *m.Dropout)
	case len(m.Vocab) == 0 || len(m.Vocab) > maxVocab:
		return nil, bad("model.vocab has %d entries, expected 1..%d", len(m.Vocab), maxVocab)
	case len(m.Merges) > maxMerges:
		return nil, bad("model.merges has %d entries, more than %d", len(m.Merges), maxMerges)
	case len(tj.AddedTokens) > maxVocab:
		return nil, bad("added_tokens has %d entries", len(tj.AddedTokens))
	}
	t := &Tokenizer{
		model:   bpeModel{vocab: m.Vocab, merges: make(map[[2]int]mergeRule, len(m.Merges)), unk: -1, ignoreMerges: m.IgnoreMerges, cache: map[string][]int{}},
		idToTok: make(map[int]string, len(m.Vocab)+len(tj.AddedTokens)),
		addedID: map[int]int{},
	}
	for tok, id := range m.Vocab {
		if id < 0 || id >= maxVocab {
			return nil, bad("model.vocab[%q] = %d: expected 0..%d", tok, id, maxVocab-1)
		}
		if len(tok) > maxTokenLen {
			return nil, bad("model.vocab: token of %d bytes", len(tok))
		}
		if prev, dup := t.idToTok[id]; dup {
			// tokenizers keeps one reverse entry per id; which one depends on hash order, so refuse the ambiguity.
			return nil, bad("model.vocab: id %d used by both %q and %q", id, prev, tok)
		}
		t.idToTok[id] = tok
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, bad("model.unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		t.model.unk = id
	}
	for rank, raw := range m.Merges {
		a, b, err := parseMerge(raw)
		if err != nil {
			return nil, bad("model.merges[%d]: %v", rank, err)
		}
		ida, oka := m.Vocab[a]
		idb, okb := m.Vocab[b]
		idn, okn := m.Vocab[a+b]
		if !oka || !okb || !okn {
			return nil, bad("model.merges[%d] %q %q: token not in the vocabulary", rank, a, b)
		}
		// Later duplicates overwrite earlier ones, as tokenizers' HashMap collect does.
		t.model.merges[[2]int{ida, idb}] = mergeRule{rank: rank, id: idn}
	}
	for i, at := range tj.AddedTokens {
		if at.ID < 0 || at.ID >= maxVocab {
			return nil, bad("added_tokens[%d].id = %d", i, at.ID)
		}
		if at.Content == "" || len(at.Content) > maxTokenLen || !utf8.ValidString(at.Content) {
			return nil, bad("added_tokens[%d] (id %d): empty, oversized or invalid UTF-8 content", i, at.ID)
		}
		if _, dup := t.addedID[at.ID]; dup {
			return nil, bad("added_tokens[%d]: id %d listed twice", i, at.ID)
		}
		t.addedID[at.ID] = len(t.added)
		t.idToTok[at.ID] = at.Content
		t.added = append(t.added, at)
	}
	if err := t.parseNormalizer(tj.Normalizer, path); err != nil {
		return nil, err
	}
	for i, at := range t.added {
		if at.Normalized {
			t.pattern = append(t.pattern, t.normalize(at.Content)) // tokenizers normalizes these patterns
			t.normd = append(t.normd, i)
		} else {
			t.pattern = append(t.pattern, at.Content)
			t.raw = append(t.raw, i)
		}
	}
	if err := t.parsePreTokenizer(tj.PreTokenizer, path); err != nil {
		return nil, err
	}
	if c, err := parseComponent(tj.Decoder); err != nil || c == nil || c.Type != "ByteLevel" {
		return nil, unsup("decoder %s (only ByteLevel)", compact(tj.Decoder))
	}
	// The post_processor only matters for add_special_tokens=True; Encode is add_special_tokens=False.
	if _, err := parseComponent(tj.PostProcessor); err != nil {
		return nil, bad("post_processor: %v", err)
	}
	return t, nil
}

func compact(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	if s == "" {
		s = "null"
	}
	return s
}

func parseComponent(raw json.RawMessage) (*component, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// parseMerge accepts both merge encodings: "a b" and ["a", "b"] (transformers >= 4.45).
func parseMerge(raw json.RawMessage) (string, string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("%q is not two space-separated tokens", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("expected \"a b\" or [a, b], got %s", compact(raw))
	}
	return pair[0], pair[1], nil
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage, path string) error {
	c, err := parseComponent(raw)
	if err != nil {
		return &FormatError{File: path, What: "normalizer: " + err.Error()}
	}
	var walk func(c *component) error
	walk = func(c *component) error {
		switch c.Type {
		case "NFC":
			t.nfc = true
		case "Sequence":
			for i := range c.Normalizers {
				if err := walk(&c.Normalizers[i]); err != nil {
					return err
				}
			}
		default:
			return &UnsupportedError{File: path, What: fmt.Sprintf("normalizer %q (only NFC)", c.Type)}
		}
		return nil
	}
	if c == nil {
		return nil
	}
	return walk(c)
}

func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage, path string) error {
	c, err := parseComponent(raw)
	if err != nil {
		return &FormatError{File: path, What: "pre_tokenizer: " + err.Error()}
	}
	unsup := &UnsupportedError{File: path, What: "pre_tokenizer " + compact(raw) +
		` (only Sequence[Split(Qwen regex, Isolated), ByteLevel(use_regex=false, add_prefix_space=false)])`}
	if c == nil || c.Type != "Sequence" || len(c.Pretokenizers) != 2 {
		return unsup
	}
	sp, bl := c.Pretokenizers[0], c.Pretokenizers[1]
	if sp.Type != "Split" || sp.Behavior != "Isolated" || sp.Invert ||
		bl.Type != "ByteLevel" || bl.AddPrefix || bl.UseRegex == nil || *bl.UseRegex {
		return unsup
	}
	var pat struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	}
	if err := json.Unmarshal(sp.Pattern, &pat); err != nil || pat.Regex == nil {
		return unsup
	}
	switch *pat.Regex {
	case RegexQwen2:
		t.pre, t.split = "qwen2", splitScanner{marks: false}
	case RegexQwen35:
		t.pre, t.split = "qwen35", splitScanner{marks: true}
	default:
		return &UnsupportedError{File: path, What: fmt.Sprintf("pre_tokenizer Split regex %q", *pat.Regex)}
	}
	return nil
}

// PreType is the llama.cpp pre-tokenizer name matching the Split regex: "qwen2" or "qwen35".
func (t *Tokenizer) PreType() string { return t.pre }

// Token returns the string of id (added tokens first, as tokenizers' id_to_token does).
func (t *Tokenizer) Token(id int) (string, bool) {
	s, ok := t.idToTok[id]
	return s, ok
}

// ID returns the id of a token string: an added token's content or a model vocabulary entry.
func (t *Tokenizer) ID(tok string) (int, bool) {
	for _, at := range t.added {
		if at.Content == tok {
			return at.ID, true
		}
	}
	id, ok := t.model.vocab[tok]
	return id, ok
}

// Added returns the added tokens in tokenizer.json order.
func (t *Tokenizer) Added() []AddedToken { return append([]AddedToken(nil), t.added...) }

func (t *Tokenizer) normalize(s string) string {
	if t.nfc {
		return norm.NFC.String(s)
	}
	return s
}

// piece is a span of text: an added token (id >= 0) or text still to be tokenized (id = -1).
type piece struct {
	text string
	id   int
}

// Encode tokenizes text like tokenizers' Tokenizer.encode(text, add_special_tokens=False) — which for Qwen's
// ByteLevel post-processor is also the add_special_tokens=True result, and is what llama.cpp does for the qwen2
// and qwen35 pre-types (no BOS). With parseSpecial false, special added tokens are not recognised in the text
// (tokenizers' encode_special_tokens / split_special_tokens = True); non-special added tokens always are.
// text must be valid UTF-8, as a Rust &str is.
func (t *Tokenizer) Encode(text string, parseSpecial bool) []int {
	// 1. Added tokens that are not normalized are matched on the raw text; 2. the rest is normalized and matched
	// against the normalized added tokens; 3. the remaining text is pre-tokenized and run through BPE.
	pieces := t.splitAdded([]piece{{text: text, id: -1}}, t.raw, parseSpecial, false)
	pieces = t.splitAdded(pieces, t.normd, parseSpecial, true)
	var ids []int
	for _, p := range pieces {
		if p.id >= 0 {
			ids = append(ids, p.id)
			continue
		}
		for _, w := range t.split.split(p.text) {
			ids = append(ids, t.model.word(byteLevel(w))...)
		}
	}
	return ids
}

// splitAdded splits the text pieces on added-token matches (AddedVocabulary::find_matches), normalizing text
// pieces first when normalize is set.
func (t *Tokenizer) splitAdded(in []piece, set []int, parseSpecial, normalize bool) []piece {
	var out []piece
	for _, p := range in {
		if p.id >= 0 {
			out = append(out, p)
			continue
		}
		s := p.text
		if normalize {
			s = t.normalize(s)
		}
		start := 0 // tokenizers' start_offset
		for pos := 0; pos < len(s); {
			best, bestLen := -1, 0
			for _, i := range set {
				c := t.pattern[i]
				if len(c) > bestLen && strings.HasPrefix(s[pos:], c) {
					best, bestLen = i, len(c)
				}
			}
			if best < 0 {
				pos++
				continue
			}
			mStart, mStop := pos, pos+bestLen
			pos = mStop // aho-corasick resumes after the match, even when the match is then skipped
			at := t.added[best]
			if at.Special && !parseSpecial {
				continue
			}
			if at.SingleWord {
				startOK := mStart == 0 || !endsWithWord(s[:mStart])
				stopOK := mStop == len(s) || !startsWithWord(s[mStop:])
				if !startOK || !stopOK {
					continue
				}
			}
			if at.LStrip {
				mStart = max(spaceLeftmostAtEnd(s[:mStart]), start)
			}
			if at.RStrip {
				mStop += spaceRightmostAtStart(s[mStop:])
			}
			if start < mStart {
				out = append(out, piece{text: s[start:mStart], id: -1})
			}
			out = append(out, piece{text: s[mStart:mStop], id: at.ID})
			start = mStop
		}
		if start < len(s) {
			out = append(out, piece{text: s[start:], id: -1})
		}
	}
	return out
}

// Rust char::is_alphanumeric / is_whitespace, as used by tokenizers' added-token word and strip checks.
func isAlnum(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && (isAlnum(r) || r == '_')
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && (isAlnum(r) || r == '_')
}

func spaceLeftmostAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= n
	}
	return i
}

func spaceRightmostAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}

// Decode is tokenizers' decode(ids, skip_special_tokens=False): ids map to token strings (unknown ids are
// dropped) and the ByteLevel decoder turns them back into text.
func (t *Tokenizer) Decode(ids []int) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if s, ok := t.idToTok[id]; ok {
			toks = append(toks, s)
		}
	}
	return byteLevelDecode(toks)
}
