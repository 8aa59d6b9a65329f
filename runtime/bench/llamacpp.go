package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/phonellm/phonellm/runtime"
)

//go:embed llamacpp.mjs
var llamacppScript []byte

// CompareOptions configure Compare.
type CompareOptions struct {
	// OracleDir holds node_modules/node-llama-cpp (scripts/setup-oracle.sh
	// installs it in $HOME/.cache/phonellm/oracle, the default).
	OracleDir string
	// Node is the node executable; default "node" from PATH.
	Node string
	// Threads for llama.cpp; use the engine's. Default Info().Threads or 1.
	Threads int
	// FlashAttention for llama.cpp; set it as the engine has it (goengine's
	// default is off).
	FlashAttention bool
	// PromptTokens and GenerateTokens of the request; default 512 and 64.
	PromptTokens, GenerateTokens int
}

// CompareResult puts phonellm's engine and upstream llama.cpp side by side
// on the same file, threads and prompt. Ratios are engine/llama.cpp (1 is
// parity, above 1 faster).
type CompareResult struct {
	Model                  string  `json:"model"`
	Threads                int     `json:"threads"`
	PromptTokens           int     `json:"prompt_tokens"`
	GenerateTokens         int     `json:"generate_tokens"`
	EnginePromptPerSec     float64 `json:"engine_prompt_tokens_per_second"`
	EngineGeneratePerSec   float64 `json:"engine_generate_tokens_per_second"`
	LlamaCppPromptPerSec   float64 `json:"llamacpp_prompt_tokens_per_second"`
	LlamaCppGeneratePerSec float64 `json:"llamacpp_generate_tokens_per_second"`
	PromptRatio            float64 `json:"prompt_ratio"`
	GenerateRatio          float64 `json:"generate_ratio"`
	// SameTokens reports whether both produced the same greedy tokens.
	SameTokens bool `json:"same_tokens"`
}

// Compare times e and node-llama-cpp's llama.cpp on the GGUF at
// e.Info().Path with one identical greedy request.
func Compare(ctx context.Context, e runtime.Engine, o CompareOptions) (CompareResult, error) {
	info := e.Info()
	if info.Path == "" {
		return CompareResult{}, errors.New("bench: compare: the engine reports no model path")
	}
	if o.OracleDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return CompareResult{}, fmt.Errorf("bench: compare: %w", err)
		}
		o.OracleDir = filepath.Join(home, ".cache", "phonellm", "oracle")
	}
	if _, err := os.Stat(filepath.Join(o.OracleDir, "node_modules", "node-llama-cpp", "package.json")); err != nil {
		return CompareResult{}, fmt.Errorf("bench: compare: node-llama-cpp not installed in %s (run scripts/setup-oracle.sh): %w", o.OracleDir, err)
	}
	if o.Node == "" {
		o.Node = "node"
	}
	if o.Threads == 0 {
		o.Threads = max(info.Threads, 1)
	}
	if o.PromptTokens == 0 {
		o.PromptTokens = 512
	}
	if o.GenerateTokens == 0 {
		o.GenerateTokens = 64
	}
	if o.PromptTokens+o.GenerateTokens >= info.ContextLength {
		return CompareResult{}, fmt.Errorf("bench: compare: %d+%d tokens exceed the %d-token context", o.PromptTokens, o.GenerateTokens, info.ContextLength)
	}
	p := &prompts{e: e}
	toks, err := p.unique(o.PromptTokens)
	if err != nil {
		return CompareResult{}, err
	}
	r, err := e.Generate(ctx, runtime.Request{Tokens: toks, MaxTokens: o.GenerateTokens, NoCache: true, IgnoreEOG: true}, nil)
	if err != nil {
		return CompareResult{}, fmt.Errorf("bench: compare, engine: %w", err)
	}

	batch := info.BatchSize
	if batch == 0 {
		batch = 512
	}
	in, _ := json.Marshal(map[string]any{"dir": o.OracleDir, "model": info.Path, "threads": o.Threads,
		"context": o.PromptTokens + o.GenerateTokens + 1, "batch": batch, "flash_attention": o.FlashAttention, "prompt": toks, "generate": o.GenerateTokens})
	f, err := os.CreateTemp("", "phonellm-llamacpp-*.mjs")
	if err != nil {
		return CompareResult{}, fmt.Errorf("bench: compare: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(llamacppScript)
	if cerr := f.Close(); werr != nil || cerr != nil {
		return CompareResult{}, fmt.Errorf("bench: compare: write script: %v", errors.Join(werr, cerr))
	}
	cmd := exec.CommandContext(ctx, o.Node, f.Name())
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return CompareResult{}, fmt.Errorf("bench: compare, node-llama-cpp: %w: %s", err, trimOut(stderr.Bytes()))
	}
	var lc struct {
		PromptSeconds   float64 `json:"prompt_seconds"`
		GenerateSeconds float64 `json:"generate_seconds"`
		Tokens          []int32 `json:"tokens"`
	}
	if err := json.Unmarshal(out, &lc); err != nil {
		return CompareResult{}, fmt.Errorf("bench: compare, node-llama-cpp output %q: %w", trimOut(out), err)
	}
	res := CompareResult{Model: info.Path, Threads: o.Threads, PromptTokens: o.PromptTokens, GenerateTokens: o.GenerateTokens,
		EnginePromptPerSec: rate(o.PromptTokens, r.Timings.PromptDuration.Seconds()), EngineGeneratePerSec: r.Timings.GeneratePerSecond(),
		LlamaCppPromptPerSec: rate(o.PromptTokens, lc.PromptSeconds), LlamaCppGeneratePerSec: rate(o.GenerateTokens-1, lc.GenerateSeconds),
		SameTokens: slices.Equal(r.Tokens, lc.Tokens)}
	if res.LlamaCppPromptPerSec > 0 {
		res.PromptRatio = res.EnginePromptPerSec / res.LlamaCppPromptPerSec
	}
	if res.LlamaCppGeneratePerSec > 0 {
		res.GenerateRatio = res.EngineGeneratePerSec / res.LlamaCppGeneratePerSec
	}
	return res, nil
}

func trimOut(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 500 {
		s = s[len(s)-500:]
	}
	return s
}
