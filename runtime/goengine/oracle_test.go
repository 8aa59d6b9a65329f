package goengine

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/oracle"

	"github.com/phonellm/phonellm/runtime/engine"
)

// oracleDir returns the node-llama-cpp install made by
// scripts/setup-oracle.sh. Without it the oracle tests skip, unless
// PHONELLM_REQUIRE_ORACLE=1 (set in CI) turns that into a failure.
func oracleDir(t *testing.T) string {
	t.Helper()
	return oracle.RequireModule(t, oracle.EnvDir, "node-llama-cpp/package.json")
}

type oracleOut struct {
	Prompt []int32 `json:"prompt"`
	Tokens []int32 `json:"tokens"`
}

func runOracle(t *testing.T, dir, model, prompt string, n int) oracleOut {
	t.Helper()
	in, _ := json.Marshal(map[string]any{"dir": dir, "model": model, "prompt": prompt, "n": n, "threads": 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "greedy.mjs"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle on %s: %v\n%s", model, err, stderr.String())
	}
	var o oracleOut
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("oracle output %q: %v", out, err)
	}
	return o
}

// TestGreedyMatchesLlamaCpp: with the chat template applied, prompt tokens
// and 32 greedy tokens equal upstream llama.cpp's, on generated tiny models
// and on every GGUF listed in PHONELLM_ORACLE_GGUFS (comma-separated; for
// example the project's converted and quantized test models).
func TestGreedyMatchesLlamaCpp(t *testing.T) {
	dir := oracleDir(t)
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
			compareWithOracle(t, e, dir)
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
			compareWithOracle(t, load(t, spec, Options{ContextLength: 512}), dir)
		})
	}
}

func compareWithOracle(t *testing.T, e *Engine, dir string) {
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
		want := runOracle(t, dir, e.Info().Path, prompt, 32)
		ids, _ := e.Tokenize(context.Background(), prompt, true)
		if !slices.Equal(ids, want.Prompt) {
			t.Fatalf("prompt tokens\n got  %v\n want %v", ids, want.Prompt)
		}
		if !slices.Equal(got.Tokens, want.Tokens) {
			t.Fatalf("%q: greedy tokens\n got  %v\n want %v", msg, got.Tokens, want.Tokens)
		}
	}
}
