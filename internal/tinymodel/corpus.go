package tinymodel

import "strings"

// corpus is the built-in multilingual training text for the tiny BPE
// tokenizers: English prose, Korean, emoji, digits, whitespace runs and
// code, so the learned merges cover every path of byte-level BPE.
const corpus = `The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs into the forest.
It's a small model, but it's trained on a tiny corpus so that we'll see real merges. They're testing the tokenizer, aren't they? I'd say we've done it.
Fraud review: the transaction was flagged because the amount, the merchant and the location did not match the customer's usual pattern.
RISK_LEVEL: 5
RISK_LEVEL: 1
RISK_LEVEL: 3
Please review the following transaction and answer with one line.
The customer bought a phone, a charger and two cables for 1299.99 dollars on 2024-03-15 at 23:59.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 256 1024 2048 4096 65536 3.14159 2.71828 -42 +7 1e-6 0x1F
Phone fleet: ten phones, sixteen gigabytes each, running the server on port 8080 behind an HTTPS tunnel.
   Indented line with three spaces.
		Two tabs before this line.
Multiple   spaces   between   words   and trailing spaces   
Line one
Line two

Paragraph after a blank line.
안녕하세요. 저는 작은 언어 모델입니다. 오늘 날씨가 정말 좋네요.
한국어 문장을 토큰으로 나누는 것을 시험합니다. 사기 거래를 검토하고 위험 수준을 알려 주세요.
서울에서 부산까지 기차로 두 시간 반이 걸립니다. 감사합니다! 고맙습니다.
위험 수준: 5. 거래 금액이 평소보다 훨씬 큽니다. 고객에게 확인 전화를 하세요.
Emoji: 😀 😃 😄 😁 😆 🙂 🙃 😉 😊 🚀 🔥 ✨ ✅ ❌ 👍 👎 🎉 ❤️ 🇰🇷 👩‍💻 📱 💳 🏦
Mixed: Hello 세계 🌍! Café naïve résumé façade coöperate Ωmega ∑ ∞ → ← ≤ ≥ €100 £50 ¥1000
Unicode marks: é (e + combining acute) ñ ü ö ä ß ç
日本語のテキストも少し入れます。中文也有一点。
func main() {
	x := []int{1, 2, 3}
	for i, v := range x {
		fmt.Printf("%d: %d\n", i, v)
	}
	if err != nil {
		return fmt.Errorf("convert %s: %w", name, err)
	}
}
def forward(self, hidden_states):
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    return residual + self.mlp(hidden_states)

class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab = vocab  # dict[str, int]
        self.merges = merges

SELECT id, name, amount FROM transactions WHERE amount > 1000 ORDER BY amount DESC;
{"role": "user", "content": "Is this transaction fraudulent?"}
<html><body><p class="note">Hello &amp; welcome</p></body></html>
https://example.com/path?query=value&other=1#anchor
user@example.com  /usr/local/bin  C:\Users\test  ~/.cache/huggingface
The model merges LoRA adapters into Qwen checkpoints, converts them to GGUF, quantizes them and ships them to phones.
Quantization reduces the size of the weights: q4_k_m, q5_k_m, q6_k, q8_0 and f16 are common choices.
A random model predicts random tokens, but the same seed must always give the same tokens.
The attention layers and the linear attention layers alternate; every fourth layer uses full attention.
Experts: the router picks the top two experts for each token, and their outputs are mixed by the routing weights.
She sells sea shells by the sea shore. Peter Piper picked a peck of pickled peppers.
How much wood would a woodchuck chuck if a woodchuck could chuck wood?
All work and no play makes Jack a dull boy. All work and no play makes Jack a dull boy.
ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 !@#$%^&*()_+-=[]{};':",./<>?
`

// CorpusLines returns the non-blank lines of the built-in corpus, the text the tiny tokenizers are learned
// from, for generating prompts that tokenize well (benchmarks make calibration and evaluation prompts of them).
func CorpusLines() []string {
	var out []string
	for _, l := range strings.Split(corpus, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
