package realvocab

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Regressions are the failing examples of issue 13 (Ollama's tokenizer gave 6, 3 and 4 tokens) with the ids
// Hugging Face tokenizers and llama.cpp give on Qwen3's vocabulary.
var Regressions = []struct {
	Text string
	IDs  []int32
}{
	{strings.Repeat("a", 16), []int32{69440, 69440}},
	{strings.Repeat("a", 10), []int32{69440, 5305}},
	{strings.Repeat("!", 12), []int32{50667, 17085}},
}

// RunChars are the characters of the repeated-run texts: letters, digits, punctuation that forms long
// tokens (separators like "-----" and "====="), whitespace (spaces, tabs, newlines, CRLF), a precomposed
// accented letter, CJK, and an emoji (4 bytes in UTF-8).
var RunChars = []string{"a", "Z", "é", "0", "7", "!", "-", "=", "*", "#", ".", "_", "/", " ", "\t", "\n", "\r\n", "中", "😀"}

// Texts is the comparison set of the real-vocabulary tests (over 1,500 strings): runs of 1–64 repeated
// characters, alone and inside text, whitespace mixes, code, special tokens inline, contractions, numbers,
// many scripts, and text that is not in NFC. Those for which ForLlamaCpp holds are compared with llama.cpp
// too; all with Hugging Face.
func Texts() []string {
	var out []string
	for _, r := range Regressions {
		out = append(out, r.Text)
	}
	for _, c := range RunChars {
		for n := 1; n <= 64; n++ {
			out = append(out, strings.Repeat(c, n))
		}
	}
	for _, n := range []int{2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64} {
		sp, dash, eq, tab, nl := strings.Repeat(" ", n), strings.Repeat("-", n), strings.Repeat("=", n), strings.Repeat("\t", n), strings.Repeat("\n", n)
		out = append(out,
			"a"+sp+"b", "x"+sp, sp+"x", "Title\n"+eq+"\n", "a "+dash+" b", dash+"\n"+dash,
			"if x:\n"+sp+"return y", "\t"+tab+"value", "end"+nl+"start", "x"+nl+sp+"y",
			"The total"+strings.Repeat(".", n)+"42", "wow"+strings.Repeat("!", n)+"?", "ha"+strings.Repeat("ha", n),
			"1"+strings.Repeat("0", n), "中文"+strings.Repeat("中", n)+"字", strings.Repeat("😀", n)+" ok",
		)
	}
	out = append(out, whitespace...)
	out = append(out, code...)
	out = append(out, specials...)
	out = append(out, prose...)
	out = append(out, notNFC...)
	out = append(out, hfOnly...)
	return out
}

// IsNFC reports whether s is in NFC.
func IsNFC(s string) bool { return norm.NFC.IsNormalString(s) }

// ForLlamaCpp reports whether llama.cpp must tokenize s as Hugging Face does: s is in NFC (llama.cpp does not
// normalize) and is not one of the texts where llama.cpp deviates from the model's tokenizer.
func ForLlamaCpp(s string) bool { return IsNFC(s) && !slices.Contains(hfOnly, s) }

// hfOnly are texts llama.cpp tokenizes differently from Hugging Face: it splits "</s>", an ordinary BPE
// token of Qwen3, as a special token (its end-of-generation detection makes control tokens of tokens so
// named).
var hfOnly = []string{"a</s>b", "</s>", " </s> ", "<s>y</s>"}

var whitespace = []string{
	" ", "  ", " \t ", "\t \n", "  \n\n  \t", "\n \n \n", " \r\n ", "\r\n\r\n", "\r\r\n\n", "a\r\nb",
	"a \u00a0 b", "\u00a0\u00a0x", "x\u3000y", "\u2003\u2003word", "line\u2028next", "para\u2029next",
	"a\u0085b", "\v\f", "tab\tseparated\tvalues\n1\t2\t3", "trailing spaces   ", "   leading spaces",
	"mixed \t\n \t\n", "\n\n\nfoo", "foo\n\n\n", "x \t y", " \n", "\n ", "a  \n  b",
}

var code = []string{
	"func main() {\n\tfmt.Println(\"hello, world\")\n}\n",
	"def f(x):\n    if x > 0:\n        return x ** 2\n    return -x\n",
	"for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
	"{\"risk\": 5, \"reasons\": [\"new device\", \"foreign card\"], \"score\": 0.97}",
	"SELECT id, amount FROM payments WHERE amount > 1000 AND country <> 'DE';",
	"#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.gguf; do echo \"$f\"; done\n",
	"x := map[string][]int{\"a\": {1, 2}}  // comment\n",
	"<div class=\"row\"><span>42</span></div>",
	"a == b && c != d || !e >= f <= g",
	"// ------------------------------------------------------------\n",
	"/* ============================================================ */",
	"# ########################\n## Heading ##\n",
	"RISK_LEVEL: 5", "https://example.com/path?q=1&r=two#frag", "user@example.com", "C:\\Program Files\\x",
	"0x1F, 0b1010, 1e-9, 3.14159, -42, +7", "v1.2.3-rc.1+build.5", "2026-11-29T12:34:56Z",
}

var specials = []string{
	"<|im_start|>system\nYou review transactions.<|im_end|>\n<|im_start|>user\nIs this fraud?<|im_end|>\n<|im_start|>assistant\n",
	"<|im_start|>user\nx<|im_end|>\n",
	"<|im_start|><|im_end|>", "<|im_start|><|im_start|>", "a<|endoftext|>b", "<|endoftext|>",
	"<think>\n\n</think>\n\nRISK_LEVEL: 5", "  <think>  ", "<think></think>",
	"<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"id\": 7}}\n</tool_call>",
	"<tool_response>ok</tool_response>",
	"<|fim_prefix|>def f():<|fim_suffix|>\n    return 1<|fim_middle|>", "<|fim_pad|><|repo_name|>r<|file_sep|>",
	"<|im_start", "<|im_end|", "im_end|>", "<|im_start|", "<<|im_end|>>", "<|<|im_start|>|>",
	"<|vision_start|><|image_pad|><|vision_end|>", "<|object_ref_start|>x<|object_ref_end|><|box_start|>1<|box_end|>",
}

var prose = []string{
	"Hello world", "Hello, world!", "I'm don't WE'LL 'Re it'sn't you've she'd THEY'VE", "'s 't 're 've 'm 'll 'd",
	"rock 'n' roll", "o'clock", "don'ſ it'ſx 'ſ", // (?i) folds ſ to s in Oniguruma, not in llama.cpp's [sS]; same ids here "'quoted'", "''", "'", "12345 67", "3.14 1,000,000.00 10^9",
	"The quick brown fox jumps over the lazy dog.", "Größe, Straße, Äpfel, Öl, Übermut",
	"Ça va? Très bien, merci. Où est l'hôtel?", "¿Dónde está la biblioteca? ¡Vamos!",
	"Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
	"สวัสดีชาวโลก", "你好，世界！今天天气很好。", "日本語のテキスト。カタカナとひらがな", "안녕하세요 세계",
	"emoji 😀👍🏽 ok", "family 👨‍👩‍👧‍👦 flag 🇩🇪🇯🇵", "٣٤ ⅷ ½ ²", "¡¢£¤¥¦§¨©ª«¬®¯°±", "₿ € ¥ £ $",
	"tab\there", "naïve café résumé coöperate", "ﬁ ﬂ ligatures", "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ",
	"math: ∀x∈ℝ, x² ≥ 0 → √x ∈ ℝ", "arrows ← ↑ → ↓ ↔", "box ┌─┐│└─┘", "Zero\u200bwidth\u200cjoin\u200d",
	"\x00\x01\x02 control \x1b[0m \x7f", "a\x1cb\x1dc\x1ed\x1fe", "\ufffd replacement",
	fmt.Sprintf("Case %d: amount %.2f EUR, card ending %04d.", 42, 1234.5, 7),
}

var notNFC = []string{
	"e\u0301", "cafe\u0301", "A\u030a", "\u212b", "\u1e9b\u0323", "n\u0303o", "\u0041\u0308\u0304",
	"a\u0301\u0302b e\u0301",
	"Z" + strings.Repeat("\u0301\u0316\u0300\u0317", 10) + "algo", // 40 combining marks in non-canonical order
	"ẛ̣ ḍ̇ ḍ̇",
}

// FraudReview is a fraud-review prompt in Qwen's chat format with the given number of cases: the shape of
// the motivating workload (about 7,000 prompt tokens in, one line "RISK_LEVEL: n" out). Each case is a
// transaction record with free-text notes, in English with some names, addresses and amounts in other
// scripts and formats.
func FraudReview(cases int) string {
	var b strings.Builder
	b.WriteString("<|im_start|>system\nYou are a fraud analyst for an online marketplace. Read the case file and " +
		"answer with one line, RISK_LEVEL: 1 (no concern) to RISK_LEVEL: 5 (block the order). Consider the " +
		"payment, the device, the shipping address and the history. Do not explain.<|im_end|>\n" +
		"<|im_start|>user\n# Case file\n\n")
	names := []string{"Anna Müller", "José Álvarez", "李伟", "Олег Петров", "Fatima Zahra", "O'Connor, Seán", "山田 太郎"}
	cities := []string{"München, DE", "São Paulo, BR", "上海市, CN", "Москва, RU", "Casablanca, MA", "Dublin, IE", "東京都, JP"}
	for i := range cases {
		n, c := names[i%len(names)], cities[(i*3)%len(cities)]
		fmt.Fprintf(&b, "## Transaction %d\n\n", 100231+i*17)
		fmt.Fprintf(&b, "```json\n{\"order_id\": \"ORD-%06d\", \"amount\": %d.%02d, \"currency\": \"EUR\", \"card\": \"**** **** **** %04d\", "+
			"\"bin_country\": \"%s\", \"ip\": \"203.0.%d.%d\", \"device_age_days\": %d, \"items\": %d}\n```\n\n",
			40000+i*7, 19+i*37%2400, i*13%100, 1000+i*97%9000, []string{"DE", "US", "NG", "BR", "CN"}[i%5], i%256, (i*7)%256, i%30, 1+i%6)
		fmt.Fprintf(&b, "- Customer: %s, account opened %d days ago, %d previous orders (%d disputed).\n", n, 12+i*5%900, i%40, i%3)
		fmt.Fprintf(&b, "- Shipping to %s; billing address %s.\n", c, []string{"matches", "differs (different country)", "differs (same city)"}[i%3])
		b.WriteString("- Notes: the customer changed the e-mail address twice this week; support ticket says \"I didn't " +
			"receive the code — please resend!!!\". Velocity: 3 attempts in 10 minutes, last one approved.\n")
		b.WriteString("- Signals: ----------------------------------------\n    proxy=false  vpn=true   emulator=false\n" +
			"    3ds=challenge_passed   avs=partial\n\n")
	}
	b.WriteString("What is the risk level?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
	return b.String()
}
