package reference

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

// testTokenizerJSON builds a Qwen-style tokenizer.json: the 256 ByteLevel characters (ids 0..255 in byte
// order), the given merges (each adds its concatenation to the vocabulary), and added tokens after them.
func testTokenizerJSON(t testing.TB, regex string, merges [][2]string, added []AddedToken) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(bytelevel.Rune[b])] = b
	}
	var ms [][]string
	for _, m := range merges {
		a, b := byteLevel(m[0]), byteLevel(m[1])
		if _, ok := vocab[a+b]; !ok {
			vocab[a+b] = len(vocab)
		}
		ms = append(ms, []string{a, b})
	}
	next := len(vocab)
	for i := range added {
		if added[i].ID == 0 {
			added[i].ID = next
		}
		next = max(next, added[i].ID+1)
	}
	doc := map[string]any{
		"version":      "1.0",
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": regex}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": ms},
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func qwenAdded() []AddedToken {
	return []AddedToken{
		{Content: "<|endoftext|>", Special: true},
		{Content: "<|im_start|>", Special: true},
		{Content: "<|im_end|>", Special: true},
		{Content: "<think>", Special: false},
		{Content: "</think>", Special: false},
	}
}

var testMerges = [][2]string{
	{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {"a", "n"}, {"e", "r"}, {"o", "n"}, {" ", "a"},
	{"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"}, {" w", "or"}, {"l", "d"}, {" wor", "ld"},
	{"\n", "\n"}, {" ", " "}, {"  ", "  "},
	{"\xec", "\x95"}, {"\xec\x95", "\x88"}, {"\xeb", "\x85"}, {"\xeb\x85", "\x95"}, {"안", "녕"}, {"1", "2"}, {"a", "a"}, {"aa", "a"},
}

func mustTokenizer(t testing.TB, js []byte) *Tokenizer {
	t.Helper()
	tk, err := ParseTokenizer("tokenizer.json", js)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func toks(tk *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tk.Decode([]int{id})
	}
	return out
}

func TestBPEMerges(t *testing.T) {
	tk := mustTokenizer(t, testTokenizerJSON(t, RegexQwen2, testMerges, qwenAdded()))
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"hello world", []string{"hello", " world"}},
		{" the", []string{" the"}},
		{"the", []string{"t", "he"}}, // no "t h" merge; " t"+"he" needs the leading space
		{"hellohello", []string{"hello", "hello"}},
		{"aaaa", []string{"aa", "aa"}},                     // "a a" at 0 and 2 first; the queued "aa a" at 0 is stale then
		{"aaaaa", []string{"aa", "aaa"}},                   // ... while "aa a" at 2 still applies
		{"12 123", []string{"1", "2", " ", "1", "2", "3"}}, // \p{N} splits digits before BPE
		{"안녕", []string{"안녕"}},
		{"x\n\n\ny", []string{"x", "\n\n", "\n", "y"}},
	} {
		ids := tk.Encode(c.in, true)
		got := toks(tk, ids)
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %q, want %q", c.in, got, c.want)
		}
		if dec := tk.Decode(ids); dec != c.in {
			t.Errorf("Decode(Encode(%q)) = %q", c.in, dec)
		}
	}
}

// TestBPEHeapOrder pins tokenizers' merge order: lowest rank first, then leftmost; a stale candidate whose pair
// was consumed by an earlier merge is skipped.
func TestBPEHeapOrder(t *testing.T) {
	// Ranks: "b c" (0) beats "a b" (1); so "abc" → a + bc, not ab + c.
	tk := mustTokenizer(t, testTokenizerJSON(t, RegexQwen2, [][2]string{{"b", "c"}, {"a", "b"}, {"ab", "c"}}, nil))
	if got := toks(tk, tk.Encode("abc", true)); !slices.Equal(got, []string{"a", "bc"}) {
		t.Fatalf("abc → %q", got)
	}
	// Equal ranks: leftmost first; "aaa" with only "a a" → "aa", "a".
	tk = mustTokenizer(t, testTokenizerJSON(t, RegexQwen2, [][2]string{{"a", "a"}}, nil))
	if got := toks(tk, tk.Encode("aaa", true)); !slices.Equal(got, []string{"aa", "a"}) {
		t.Fatalf("aaa → %q", got)
	}
	// A merge created later in the word can have a lower rank than pending ones: "aa a" (0) then "a a" (1).
	tk = mustTokenizer(t, testTokenizerJSON(t, RegexQwen2, [][2]string{{"aa", "a"}, {"a", "a"}}, nil))
	if got := toks(tk, tk.Encode("aaaa", true)); !slices.Equal(got, []string{"aaa", "a"}) {
		t.Fatalf("aaaa → %q", got)
	}
}

func TestAddedTokens(t *testing.T) {
	added := append(qwenAdded(),
		AddedToken{Content: "<|im", Special: false},                 // shorter overlapping token: longest wins
		AddedToken{Content: "[L]", LStrip: true, Special: false},    // absorbs spaces to its left
		AddedToken{Content: "[R]", RStrip: true, Special: false},    // absorbs spaces to its right
		AddedToken{Content: "wd", SingleWord: true, Special: false}, // only as a whole word
		AddedToken{Content: "é!", Normalized: true, Special: false}, // matched after NFC
	)
	tk := mustTokenizer(t, testTokenizerJSON(t, RegexQwen2, testMerges, added))
	id := func(s string) int {
		i, ok := tk.ID(s)
		if !ok {
			t.Fatalf("no id for %q", s)
		}
		return i
	}
	enc := func(s string, special bool) []int { return tk.Encode(s, special) }
	imStart, imEnd, think := id("<|im_start|>"), id("<|im_end|>"), id("<think>")

	got := enc("<|im_start|>user\nhello<|im_end|>", true)
	if got[0] != imStart || got[len(got)-1] != imEnd {
		t.Fatalf("special tokens not matched: %v", got)
	}
	// Without parseSpecial the special tokens are plain text while <think> (not special) still matches. The
	// overlapping shorter token "<|im" is not tried instead: the leftmost-longest match "<|im_start|>" is found
	// and then skipped as a whole, as tokenizers does.
	got = enc("<|im_start|><think>", false)
	if slices.Contains(got, imStart) || !slices.Contains(got, think) || slices.Contains(got, id("<|im")) {
		t.Fatalf("parseSpecial=false: %v (%q)", got, toks(tk, got))
	}
	if tk.Decode(got) != "<|im_start|><think>" {
		t.Fatalf("round trip: %q", tk.Decode(got))
	}
	if got := enc("<|imx", true); got[0] != id("<|im") {
		t.Fatalf("<|imx → %v", got)
	}
	// lstrip / rstrip
	got = enc("a   [L]b", true)
	if want := []int{id("a"), id("[L]"), id("b")}; !slices.Equal(got, want) {
		t.Fatalf("lstrip: %q", toks(tk, got))
	}
	got = enc("a[R]   b", true)
	if want := []int{id("a"), id("[R]"), id("b")}; !slices.Equal(got, want) {
		t.Fatalf("rstrip: %q", toks(tk, got))
	}
	// single_word
	if got := enc("a wd b", true); !slices.Contains(got, id("wd")) {
		t.Fatalf("single word: %q", toks(tk, got))
	}
	if got := enc("awd", true); slices.Contains(got, id("wd")) {
		t.Fatalf("single word inside a word: %q", toks(tk, got))
	}
	// normalized: "e\u0301!" becomes "é!" under NFC.
	if got := enc("xe\u0301!", true); !slices.Contains(got, id("é!")) {
		t.Fatalf("normalized token: %q", toks(tk, got))
	}
}

func TestDecodeLossy(t *testing.T) {
	tk := mustTokenizer(t, testTokenizerJSON(t, RegexQwen2, nil, qwenAdded()))
	for _, c := range []struct {
		bytes []byte
		want  string
	}{
		{[]byte("ok"), "ok"},
		{[]byte{0xE2, 0x82}, "\uFFFD"},                   // truncated 3-byte sequence: one replacement
		{[]byte{0xE2, 0x82, 'a'}, "\uFFFDa"},             // maximal subpart
		{[]byte{0xFF, 0xFE}, "\uFFFD\uFFFD"},             // never-valid bytes: one each
		{[]byte{0xED, 0xA0, 0x80}, "\uFFFD\uFFFD\uFFFD"}, // surrogate: ED then two stray continuations
		{[]byte{0xF0, 0x9F, 0x98}, "\uFFFD"},
		{[]byte{0xF0, 0x9F, 0x98, 0x80}, "😀"},
	} {
		ids := make([]int, len(c.bytes))
		for i, b := range c.bytes {
			ids[i] = int(b) // ids 0..255 are the byte tokens
		}
		if got := tk.Decode(ids); got != c.want {
			t.Errorf("Decode(% x) = %q, want %q", c.bytes, got, c.want)
		}
	}
	// Added tokens decode to their content; unknown ids are dropped.
	eot, _ := tk.ID("<|endoftext|>")
	if got := tk.Decode([]int{'h', eot, 1 << 20, 'i'}); got != "h<|endoftext|>i" {
		t.Fatalf("Decode with added token = %q", got)
	}
}

// multilingual is the acceptance string set: ASCII, Korean, emoji, digits, whitespace runs, special tokens.
var multilingual = []string{
	"Hello, world! How's it going?",
	"안녕하세요, 세계! 한국어 텍스트입니다.",
	"Emoji: 😀👍🏽🎉 and ZWJ 👨‍👩‍👧",
	"Digits 1234567890 and 3.14159, ٣٤٥",
	"tabs\tand   spaces\n\n\nnewlines  \r\n end   ",
	"<|im_start|>user\nWhat's 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>",
	"Ünïcödé ñ café e\u0301 — “quotes” …",
	"日本語と中文混合 text",
	"",
	" ",
	"\n",
}

func TestRoundTrip(t *testing.T) {
	for _, re := range []string{RegexQwen2, RegexQwen35} {
		tk := mustTokenizer(t, testTokenizerJSON(t, re, testMerges, qwenAdded()))
		for _, s := range multilingual {
			for _, special := range []bool{true, false} {
				ids := tk.Encode(s, special)
				if got := tk.Decode(ids); got != norm.NFC.String(s) {
					t.Errorf("Decode(Encode(%q, %v)) = %q", s, special, got)
				}
			}
		}
	}
}

func TestTokenizerErrors(t *testing.T) {
	good := string(testTokenizerJSON(t, RegexQwen2, testMerges, qwenAdded()))
	for _, c := range []struct {
		name, from, to, want string
		unsup                bool
	}{
		{"bad json", `{"added_tokens"`, `{"added_tokens`, "invalid JSON", false},
		{"wordpiece", `"type":"BPE"`, `"type":"WordPiece"`, `model.type "WordPiece"`, true},
		{"unknown regex", `\\p{N}|`, `\\p{N}{1,3}|`, "pre_tokenizer Split regex", true},
		{"nfkc", `"normalizer":{"type":"NFC"}`, `"normalizer":{"type":"NFKC"}`, `normalizer "NFKC"`, true},
		{"merge not in vocab", `["h","e"]`, `["h","zz"]`, `model.merges[1] "h" "zz"`, false},
		{"bytelevel with regex", `"type":"ByteLevel","use_regex":false}],`,
			`"type":"ByteLevel","use_regex":true}],`, "pre_tokenizer", true},
		{"bad merge", `["h","e"]`, `["h e x"]`, "model.merges[1]", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(good, c.from) {
				t.Fatalf("fixture lacks %q", c.from)
			}
			_, err := ParseTokenizer("tok.json", []byte(strings.Replace(good, c.from, c.to, 1)))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tok.json") {
				t.Fatalf("error %v, want mention of %q", err, c.want)
			}
			var ue *UnsupportedError
			if c.unsup != errors.As(err, &ue) {
				t.Fatalf("error type %T", err)
			}
		})
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(p, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := LoadTokenizer(p)
	if err != nil || tk.PreType() != "qwen2" {
		t.Fatalf("LoadTokenizer: %v %v", tk, err)
	}
}

func FuzzTokenizerRoundTrip(f *testing.F) {
	for _, s := range multilingual {
		f.Add(s)
	}
	tk2 := mustTokenizer(f, testTokenizerJSON(f, RegexQwen2, testMerges, qwenAdded()))
	tk35 := mustTokenizer(f, testTokenizerJSON(f, RegexQwen35, testMerges, qwenAdded()))
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, tk := range []*Tokenizer{tk2, tk35} {
			for _, special := range []bool{true, false} {
				ids := tk.Encode(s, special)
				// Piecewise NFC (around added tokens) equals whole-string NFC unless a token sits between a
				// starter and a combining mark; compare against the whole string only without added tokens.
				if got := tk.Decode(ids); got != norm.NFC.String(s) && !strings.Contains(s, "<") {
					t.Fatalf("Decode(Encode(%q, %v)) = %q", s, special, got)
				}
			}
		}
	})
}

func FuzzParseTokenizer(f *testing.F) {
	f.Add(testTokenizerJSON(f, RegexQwen2, testMerges, qwenAdded()))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a a"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := ParseTokenizer("fuzz.json", data)
		if err != nil {
			return
		}
		ids := tk.Encode("Hello  world 123 <|im_end|>", true)
		_ = tk.Decode(ids)
	})
}

func nfc(s string) string { return norm.NFC.String(s) }
