package reference

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
)

// tokenizersJSScript encodes texts with Hugging Face's own JavaScript port of tokenizers (npm
// @huggingface/tokenizers), a second implementation of the tokenizer.json semantics written by the library's
// authors, so the Go tokenizer is not only checked against its author's reading of the Rust source.
const tokenizersJSScript = `
const [mod, reqPath] = process.argv.slice(2);
const { Tokenizer } = await import(mod);
const fs = await import("fs");
const req = JSON.parse(fs.readFileSync(reqPath, "utf8"));
const tok = new Tokenizer(JSON.parse(fs.readFileSync(req.tokenizer, "utf8")), {});
const out = req.texts.map((t) => {
  const ids = tok.encode(t, { add_special_tokens: false }).ids;
  return { ids, text: ids.length ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "" };
});
process.stdout.write(JSON.stringify(out));
`

// tokenizersJSModule finds dist/tokenizers.mjs of @huggingface/tokenizers: $PHONELLM_TOKENIZERS_JS (a directory
// holding node_modules), else the oracle install directory of scripts/setup-oracle.sh; missing, the test is
// Unavailable (skipped, or failed with PHONELLM_REQUIRE_ORACLE=1).
func tokenizersJSModule(t *testing.T) string {
	dir := oracle.RequireModule(t, "PHONELLM_TOKENIZERS_JS", tokenizersJSRel)
	return filepath.Join(dir, "node_modules", filepath.FromSlash(tokenizersJSRel))
}

const tokenizersJSRel = "@huggingface/tokenizers/dist/tokenizers.mjs"

type jsEncoding struct {
	IDs  []int  `json:"ids"`
	Text string `json:"text"`
}

func encodeWithTokenizersJS(t *testing.T, mod, tokenizerPath string, texts []string) []jsEncoding {
	t.Helper()
	dir := t.TempDir()
	req, _ := json.Marshal(map[string]any{"tokenizer": tokenizerPath, "texts": texts})
	reqPath := filepath.Join(dir, "req.json")
	script := filepath.Join(dir, "enc.mjs")
	if err := os.WriteFile(reqPath, req, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(tokenizersJSScript), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", script, "file://"+mod, reqPath).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("node: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("node: %v", err)
	}
	var res []jsEncoding
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(texts) {
		t.Fatalf("tokenizers.js output: %v (%d results for %d texts)", err, len(res), len(texts))
	}
	return res
}

// tokenizerTexts is the comparison set: the acceptance strings plus random strings over every character class
// the pre-tokenizer regexes distinguish, with added tokens mixed in.
func tokenizerTexts() []string {
	texts := slices.Clone(multilingual)
	texts = append(texts, "don'ſ it'S", "<|im_start|><|im_end|>", "<|im_start", "  <think>  ", "a\u0301\u0302b e\u0301")
	rng := rand.New(rand.NewPCG(31, 32))
	extra := []string{"<|im_start|>", "<|im_end|>", "<think>", "<|endoftext|>", "'s", "'LL", "hello", " world"}
	for range 400 {
		s := randomSplitText(rng)
		if rng.IntN(3) == 0 {
			s += extra[rng.IntN(len(extra))] + randomSplitText(rng)
		}
		texts = append(texts, s)
	}
	return texts
}

func compareWithTokenizersJS(t *testing.T, mod, path string, tk *Tokenizer) {
	t.Helper()
	texts := tokenizerTexts()
	js := encodeWithTokenizersJS(t, mod, path, texts)
	for i, s := range texts {
		got := tk.Encode(s, true)
		if !slices.Equal(got, js[i].IDs) {
			t.Fatalf("%s: Encode(%q) = %v, tokenizers.js gives %v", filepath.Base(path), s, got, js[i].IDs)
		}
		if dec := tk.Decode(got); dec != js[i].Text {
			t.Fatalf("%s: Decode(%v) = %q, tokenizers.js gives %q", filepath.Base(path), got, dec, js[i].Text)
		}
	}
}

func TestTokenizerMatchesTokenizersJS(t *testing.T) {
	mod := tokenizersJSModule(t)
	for _, re := range []string{RegexQwen2, RegexQwen35} {
		js := testTokenizerJSON(t, re, testMerges, qwenAdded())
		path := filepath.Join(t.TempDir(), "tokenizer.json")
		if err := os.WriteFile(path, js, 0o644); err != nil {
			t.Fatal(err)
		}
		compareWithTokenizersJS(t, mod, path, mustTokenizer(t, js))
	}
}
