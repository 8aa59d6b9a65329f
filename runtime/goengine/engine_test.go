package goengine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

func TestMain(m *testing.M) {
	// ggml's loader logs through slog at info level; keep test output short.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	os.Exit(m.Run())
}

func load(t *testing.T, spec tinySpec, o Options) *Engine {
	t.Helper()
	o.Path = writeTinyGGUF(t, t.TempDir(), spec)
	if o.Threads == 0 {
		o.Threads = 1 // ggml's spinning thread pool crawls on a loaded 2-core machine
	}
	e, err := Load(context.Background(), o)
	if err != nil {
		t.Fatalf("load %s: %v", spec.arch, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestConformanceQwen3(t *testing.T) {
	enginetest.Run(t, load(t, tinySpec{arch: "qwen3", seed: 1}, Options{Parallel: 2, ContextLength: 256}), enginetest.Features{})
}

func TestConformanceQwen2F16(t *testing.T) {
	enginetest.Run(t, load(t, tinySpec{arch: "qwen2", seed: 2, f16: true}, Options{Parallel: 2, ContextLength: 256}), enginetest.Features{})
}

func TestConformanceQwen35(t *testing.T) {
	enginetest.Run(t, load(t, tinySpec{arch: "qwen35", layers: 4, seed: 3}, Options{Parallel: 2, ContextLength: 256}), enginetest.Features{CheckpointPrefixCache: true})
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		spec tinySpec
		want string
	}{
		{tinySpec{arch: "qwen35", layers: 4, mtp: true}, "multi-token-prediction"},
		{tinySpec{arch: "qwen35", layers: 4, f16: true, f16Conv: true, seed: 1}, "ssm_conv1d"},
		{tinySpec{arch: "llama", seed: 2}, `architecture "llama"`},
	} {
		path := writeTinyGGUF(t, dir, tc.spec)
		_, err := Load(context.Background(), Options{Path: path, Threads: 1})
		var me *modelcheck.Error
		if !errors.As(err, &me) || !me.InputError() || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%+v: err %v, want a modelcheck error about %q", tc.spec, err, tc.want)
		}
	}
	if _, err := Load(context.Background(), Options{Path: filepath.Join(dir, "missing.gguf")}); err == nil {
		t.Fatal("missing file loaded")
	}
	garbage := filepath.Join(dir, "garbage.gguf")
	os.WriteFile(garbage, []byte("GGUF\x03\x00\x00\x00garbage"), 0o644)
	if _, err := Load(context.Background(), Options{Path: garbage}); err == nil {
		t.Fatal("garbage loaded")
	}
	if _, err := Load(context.Background(), Options{Path: garbage, KVCacheType: "q3"}); err == nil {
		t.Fatal("bad kv cache type accepted")
	}
}

func TestInfoAndTemplate(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 5}, Options{Parallel: 3})
	info := e.Info()
	if info.Architecture != "qwen3" || info.ContextLength != 4096 || info.TrainContextLength != 8192 ||
		info.Parallel != 3 || info.BatchSize != 512 || !info.HasChatTemplate || info.Engine != "goengine" || info.ID != "tiny-qwen3-5" {
		t.Fatalf("info %+v", info)
	}
	off := false
	p, err := e.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "user", Content: "hi"}}, engine.TemplateOptions{AddGenerationPrompt: true, EnableThinking: &off})
	if err != nil || p != "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n" {
		t.Fatalf("template: %q %v", p, err)
	}
	ids, _ := e.Tokenize(context.Background(), p, true)
	if ids[0] != int32(info.VocabSize-4) { // <|im_start|>
		t.Fatalf("first token %d", ids[0])
	}
	// <|im_end|> is a control token: never rendered, and it ends generation.
	if e.piece(int32(info.VocabSize-3)) != "" || !e.eog[int32(info.VocabSize-3)] || !e.eog[int32(info.VocabSize-5)] {
		t.Fatal("control/EOG tokens")
	}
}

func TestCloseFailsRunningAndLaterRequests(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 41}, Options{ContextLength: 4096})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		n := 0
		_, err := e.Generate(context.Background(), engine.Request{Prompt: "go", IgnoreEOG: true}, func(engine.Token) error {
			if n++; n == 1 {
				close(started)
			}
			return nil
		})
		done <- err
	}()
	<-started
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("running request: %v, want ErrClosed", err)
	}
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: "x"}, nil); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBorrowPrefixFromBusySlot: a prompt sharing a long block with a request
// still generating in another slot reuses that slot's cells, and its output
// equals an uncached run on a separate engine.
func TestBorrowPrefixFromBusySlot(t *testing.T) {
	e := load(t, tinySpec{arch: "qwen3", seed: 71}, Options{Parallel: 2, ContextLength: 4096})
	ref, err := Load(context.Background(), Options{Path: e.Info().Path, Threads: 1, ContextLength: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	shared, _ := e.Tokenize(context.Background(), strings.Repeat("Review the transaction for fraud. ", 40), false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	go e.Generate(ctx, engine.Request{Tokens: append(slices.Clone(shared), 65), IgnoreEOG: true}, func(engine.Token) error {
		select {
		case <-started:
		default:
			close(started)
		}
		return nil
	})
	<-started
	req := engine.Request{Tokens: append(slices.Clone(shared), 66, 67), MaxTokens: 8}
	got, err := e.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.NoCache = true
	want, err := ref.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Timings.CachedTokens != len(shared) || !slices.Equal(got.Tokens, want.Tokens) {
		t.Fatalf("cached %d (want %d), tokens %v, uncached %v", got.Timings.CachedTokens, len(shared), got.Tokens, want.Tokens)
	}
}

// TestTwoEnginesInOneProcess: two engines generating at the same time give
// the results each gives alone (ggml work is serialized across engines).
func TestTwoEnginesInOneProcess(t *testing.T) {
	a := load(t, tinySpec{arch: "qwen3", seed: 71}, Options{ContextLength: 4096})
	b, err := Load(context.Background(), Options{Path: a.Info().Path, Threads: 1, ContextLength: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	shared, _ := a.Tokenize(context.Background(), strings.Repeat("Review the transaction for fraud. ", 40), false)
	req := engine.Request{Tokens: shared, MaxTokens: 6, NoCache: true}
	want, err := a.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var ra, rb engine.Response
		var wg sync.WaitGroup
		wg.Go(func() { ra, _ = a.Generate(context.Background(), req, nil) })
		wg.Go(func() { rb, _ = b.Generate(context.Background(), req, nil) })
		wg.Wait()
		if !slices.Equal(ra.Tokens, want.Tokens) || !slices.Equal(rb.Tokens, want.Tokens) {
			t.Fatalf("concurrent engines: %v and %v, alone %v", ra.Tokens, rb.Tokens, want.Tokens)
		}
	}
}
