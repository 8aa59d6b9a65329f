package goengine

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"

	"github.com/phonellm/phonellm/runtime/engine"
)

// oracleDir returns the node-llama-cpp install made by scripts/setup-oracle.sh, for the tests that run
// scripts of their own against it; without it they are oracle.Unavailable.
func oracleDir(t *testing.T) string {
	t.Helper()
	return oracle.RequireModule(t, oracle.EnvDir, "node-llama-cpp/package.json")
}

type oracleOut struct {
	Prompt []int32 // the prompt tokenized with special tokens parsed
	Tokens []int32 // up to n greedy tokens, stopping at (and without) an end-of-generation token
}

// runOracle asks upstream llama.cpp (the shared oracle process) for what this engine's Generate returns on the
// prompt: its tokens and up to n greedy tokens.
func runOracle(t *testing.T, model, prompt string, n int) oracleOut {
	t.Helper()
	o := oracle.Shared(t)
	ids, err := o.Tokenize(model, prompt, true)
	if err != nil {
		t.Fatalf("oracle on %s: %v", model, err)
	}
	toks, _, err := o.GreedyUntilEOG(model, ids, n)
	if err != nil {
		t.Fatalf("oracle on %s: %v", model, err)
	}
	return oracleOut{Prompt: int32s(ids), Tokens: int32s(toks)}
}

func int32s(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// TestGreedyMatchesLlamaCpp: with the chat template applied, prompt tokens
// and 32 greedy tokens equal upstream llama.cpp's, on generated tiny models
// and on every GGUF listed in PHONELLM_ORACLE_GGUFS (comma-separated; for
// example the project's converted and quantized test models).
func TestGreedyMatchesLlamaCpp(t *testing.T) {
	oracle.Shared(t) // skips (or fails) the test when the oracle is missing
	for _, path := range strings.Split(os.Getenv("PHONELLM_ORACLE_GGUFS"), ",") {
		if path = strings.TrimSpace(path); path == "" {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			e, err := Load(context.Background(), Options{Path: path, Threads: 1, ContextLength: 512})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			compareWithOracle(t, e)
		})
	}
	for _, spec := range []tinySpec{
		{arch: "qwen3", seed: 11},
		{arch: "qwen3", seed: 12, f16: true},
		{arch: "qwen2", seed: 13, f16: true},
		{arch: "qwen35", layers: 4, seed: 14},
		{arch: "qwen35", layers: 4, seed: 15, f16: true},
	} {
		name := spec.arch
		if spec.f16 {
			name += "-f16"
		}
		t.Run(name, func(t *testing.T) {
			compareWithOracle(t, load(t, spec, Options{ContextLength: 512}))
		})
	}
}

func compareWithOracle(t *testing.T, e *Engine) {
	for _, msg := range []string{"hello world", "Is this transaction fraud? Amount: 9,999 EUR."} {
		prompt, err := e.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "system", Content: "Answer briefly."}, {Role: "user", Content: msg}},
			engine.TemplateOptions{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 32}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := runOracle(t, e.Info().Path, prompt, 32)
		ids, _ := e.Tokenize(context.Background(), prompt, true)
		if !slices.Equal(ids, want.Prompt) {
			t.Fatalf("prompt tokens\n got  %v\n want %v", ids, want.Prompt)
		}
		if !slices.Equal(got.Tokens, want.Tokens) {
			t.Fatalf("%q: greedy tokens\n got  %v\n want %v", msg, got.Tokens, want.Tokens)
		}
	}
}
