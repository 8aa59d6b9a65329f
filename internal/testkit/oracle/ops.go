package oracle

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
)

// Version describes the llama.cpp the oracle runs.
type Version struct {
	NodeLlamaCpp    string `json:"nodeLlamaCpp"`
	LlamaCppRelease struct {
		Repo    string `json:"repo"`
		Release string `json:"release"`
	} `json:"llamaCppRelease"`
	BuildType    string `json:"buildType"`
	SystemInfo   string `json:"systemInfo"`
	CPUMathCores int    `json:"cpuMathCores"`
}

// Version reports the node-llama-cpp and llama.cpp release in use.
func (o *Oracle) Version() (Version, error) {
	var v Version
	err := o.call("version", map[string]any{}, &v)
	return v, err
}

// ModelInfo is what llama.cpp (and node-llama-cpp's GGUF reader) see in a loaded model.
type ModelInfo struct {
	Path             string  `json:"path"`
	LoadMs           float64 `json:"loadMs"`
	Architecture     string  `json:"architecture"`
	Description      string  `json:"description"` // llama_model_desc, e.g. "qwen3 ?B all F32"
	TrainContextSize int     `json:"trainContextSize"`
	EmbeddingLength  int     `json:"embeddingLength"`
	VocabSize        int     `json:"vocabSize"`
	VocabularyType   string  `json:"vocabularyType"` // "bpe" for the Qwen family
	SizeBytes        int64   `json:"sizeBytes"`
	BOS              *int    `json:"bos"`
	EOS              *int    `json:"eos"`
	EOT              *int    `json:"eot"`
	NL               *int    `json:"nl"`
	AddBOS           bool    `json:"addBos"`
	ChatTemplate     string  `json:"chatTemplate"`
	TensorCount      int     `json:"tensorCount"`
	// Metadata holds every GGUF key with scalar values as JSON numbers/strings/bools, short arrays
	// (≤16 items) as arrays and longer arrays as {"arrayLength": n}.
	Metadata map[string]any `json:"metadata"`
	Warnings []string       `json:"warnings"`
}

// Load loads a GGUF into llama.cpp (once per path; later calls return the cached model's info). A file
// llama.cpp rejects gives an *Error whose message carries llama.cpp's reason.
func (o *Oracle) Load(path string) (ModelInfo, error) {
	var mi ModelInfo
	err := o.call("load", map[string]any{"model": path}, &mi)
	return mi, err
}

// Unload frees a loaded model (a later request for the path loads it again, e.g. after the file changed).
func (o *Oracle) Unload(path string) error {
	return o.call("unload", map[string]any{"model": path}, nil)
}

// Tokenize tokenizes text with llama.cpp's tokenizer (common_tokenize, add_special=false). special=true
// parses special-token text such as "<|im_start|>" into the control tokens.
func (o *Oracle) Tokenize(model, text string, special bool) ([]int, error) {
	var r struct {
		Tokens []int `json:"tokens"`
	}
	err := o.call("tokenize", map[string]any{"model": model, "text": text, "special": special}, &r)
	return r.Tokens, err
}

// Detokenize joins token pieces with llama.cpp's detokenizer; special=true renders control tokens as
// their text. Bytes that are not valid UTF-8 come back as U+FFFD (the JS string boundary).
func (o *Oracle) Detokenize(model string, tokens []int, special bool) (string, error) {
	var r struct {
		Text string `json:"text"`
	}
	err := o.call("detokenize", map[string]any{"model": model, "tokens": tokens, "special": special}, &r)
	return r.Text, err
}

type logitsResult struct {
	NVocab    int      `json:"nVocab"`
	Positions int      `json:"positions"`
	Logits    []string `json:"logits"`
}

// Logits evaluates tokens from an empty context and returns llama.cpp's raw next-token logits (full
// vocabulary, no sampling applied) after the last token.
func (o *Oracle) Logits(model string, tokens []int) ([]float32, error) {
	rows, err := o.logits(model, tokens, false)
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// LogitsAll evaluates tokens from an empty context in one pass and returns the next-token logits after
// every position: rows[i] predicts the token after tokens[i].
func (o *Oracle) LogitsAll(model string, tokens []int) ([][]float32, error) {
	return o.logits(model, tokens, true)
}

func (o *Oracle) logits(model string, tokens []int, all bool) ([][]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("oracle logits %s: no tokens", model)
	}
	var r logitsResult
	req := o.withContext(map[string]any{"model": model, "tokens": tokens, "all": all})
	if err := o.call("logits", req, &r); err != nil {
		return nil, err
	}
	want := 1
	if all {
		want = len(tokens)
	}
	if r.Positions != want || len(r.Logits) != want {
		return nil, fmt.Errorf("oracle logits %s: got %d rows (positions %d), want %d", model, len(r.Logits), r.Positions, want)
	}
	rows := make([][]float32, want)
	for i, s := range r.Logits {
		row, err := decodeFloats(s, r.NVocab)
		if err != nil {
			return nil, fmt.Errorf("oracle logits %s: row %d: %w", model, i, err)
		}
		rows[i] = row
	}
	return rows, nil
}

// decodeFloats decodes base64 little-endian float32 values and checks the count.
func decodeFloats(s string, n int) ([]float32, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(b) != 4*n {
		return nil, fmt.Errorf("%d bytes of logits, want %d floats", len(b), n)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// Greedy evaluates the prompt tokens from an empty context and decodes n tokens with llama.cpp's greedy
// sampler (temperature 0, no penalties, no top-k/top-p). It does not stop at end-of-generation tokens,
// so it always returns n ids.
func (o *Oracle) Greedy(model string, tokens []int, n int) ([]int, error) {
	var r struct {
		Tokens []int `json:"tokens"`
	}
	req := o.withContext(map[string]any{"model": model, "tokens": tokens, "n": n})
	if err := o.call("greedy", req, &r); err != nil {
		return nil, err
	}
	if len(r.Tokens) != n {
		return nil, fmt.Errorf("oracle greedy %s: got %d tokens, want %d", model, len(r.Tokens), n)
	}
	return r.Tokens, nil
}

// GreedyUntilEOG is Greedy stopping at an end-of-generation token, as a server does: it returns at most n
// tokens without the end-of-generation token, and whether generation stopped at one.
func (o *Oracle) GreedyUntilEOG(model string, tokens []int, n int) ([]int, bool, error) {
	var r struct {
		Tokens []int `json:"tokens"`
		EOG    bool  `json:"eog"`
	}
	req := o.withContext(map[string]any{"model": model, "tokens": tokens, "n": n, "stopAtEog": true})
	if err := o.call("greedy", req, &r); err != nil {
		return nil, false, err
	}
	if len(r.Tokens) > n || !r.EOG && len(r.Tokens) != n || r.EOG && len(r.Tokens) == 0 {
		return nil, false, fmt.Errorf("oracle greedy %s: got %d tokens (eog %v) for n = %d", model, len(r.Tokens), r.EOG, n)
	}
	if r.EOG {
		r.Tokens = r.Tokens[:len(r.Tokens)-1]
	}
	return r.Tokens, r.EOG, nil
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatOptions control Chat. The zero value renders with the model's tokenizer.chat_template, adds the
// generation prompt and generates nothing.
type ChatOptions struct {
	Template           string // overrides the model's template when non-empty
	NoGenerationPrompt bool   // add_generation_prompt=false
	EnableThinking     *bool  // sets enable_thinking when non-nil (Qwen3 templates)
	N                  int    // greedy tokens to generate (stops early at an end-of-generation token)
}

// ChatResult is a rendered prompt and, when asked for, its greedy completion.
type ChatResult struct {
	Prompt           string `json:"prompt"`
	PromptTokens     []int  `json:"promptTokens"`     // Prompt tokenized with special tokens parsed
	CompletionTokens []int  `json:"completionTokens"` // including the end-of-generation token if reached
	Completion       string `json:"completion"`       // completion text without end-of-generation tokens
}

// Chat renders messages with llama.cpp's own Jinja engine (the one llama-server uses with --jinja) and
// the model's chat template, passing bos_token/eos_token as llama-server does, and optionally decodes
// the reply greedily.
func (o *Oracle) Chat(model string, messages []Message, opt ChatOptions) (ChatResult, error) {
	req := o.withContext(map[string]any{
		"model":               model,
		"messages":            messages,
		"addGenerationPrompt": !opt.NoGenerationPrompt,
		"n":                   opt.N,
	})
	if opt.Template != "" {
		req["template"] = opt.Template
	}
	if opt.EnableThinking != nil {
		req["enableThinking"] = *opt.EnableThinking
	}
	var r ChatResult
	err := o.call("chat", req, &r)
	return r, err
}

// BenchResult is a prompt-processing and generation speed measurement. Generation speed includes the
// per-token round trip through node-llama-cpp (a fraction of a millisecond: 1,800 tok/s on the 64-wide
// test model), so it is a lower bound for llama.cpp itself.
type BenchResult struct {
	PromptTokens    int     `json:"promptTokens"`
	GenTokens       int     `json:"genTokens"`
	Threads         int     `json:"threads"`
	PromptMs        float64 `json:"promptMs"`
	GenMs           float64 `json:"genMs"`
	PromptTokPerSec float64 `json:"promptTokPerSec"`
	GenTokPerSec    float64 `json:"genTokPerSec"`
}

// Bench measures prompt processing of promptTokens deterministic non-special tokens and greedy generation
// of genTokens tokens, with the Oracle's Context options (set Context.Threads to choose threads).
func (o *Oracle) Bench(model string, promptTokens, genTokens int) (BenchResult, error) {
	var r BenchResult
	req := o.withContext(map[string]any{"model": model, "promptTokens": promptTokens, "genTokens": genTokens})
	err := o.call("bench", req, &r)
	return r, err
}

// GrammarSample is one generation under a grammar: its tokens (without the end-of-generation token) and
// whether it ended at one (rather than at the token limit).
type GrammarSample struct {
	Tokens []int `json:"tokens"`
	EOG    bool  `json:"eog"`
}

// GrammarSamples samples count generations of at most n tokens after the prompt tokens under a GBNF
// grammar, with llama.cpp's own grammar parser and grammar sampler (llama-server's "grammar" field) at
// temperature, seeds seed, seed+1, …. A grammar llama.cpp refuses gives an *Error with its reason.
func (o *Oracle) GrammarSamples(model, grammar string, tokens []int, n, count int, temperature float64, seed int) ([]GrammarSample, error) {
	var r struct {
		Samples []GrammarSample `json:"samples"`
	}
	req := o.withContext(map[string]any{"model": model, "grammar": grammar, "tokens": tokens, "n": n, "samples": count,
		"temperature": temperature, "seed": seed})
	if err := o.call("grammar", req, &r); err != nil {
		return nil, err
	}
	if len(r.Samples) != count {
		return nil, fmt.Errorf("oracle grammar %s: %d samples, want %d", model, len(r.Samples), count)
	}
	return r.Samples, nil
}
