package bench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/phonellm/phonellm/internal/home"
	"github.com/phonellm/phonellm/runtime/engine"
)

//go:embed llamacpp.mjs
var llamacppScript []byte

// CompareOptions configure Compare.
type CompareOptions struct {
	// OracleDir holds node_modules/node-llama-cpp (scripts/setup-oracle.sh
	// installs it in $PHONELLM_ORACLE_DIR, default ~/.cache/phonellm/oracle:
	// home.OracleDir).
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
	// Repeats is the number of timed runs per engine after one untimed
	// warm-up run each (which pages the weights in and sizes the buffers);
	// runs alternate between the engines. Default 3.
	Repeats int
}

// CompareResult puts phonellm's engine and upstream llama.cpp side by side
// on the same file, threads and prompt. Ratios are engine/llama.cpp (1 is
// parity, above 1 faster).
type CompareResult struct {
	Model                  string  `json:"model"`
	Threads                int     `json:"threads"`
	PromptTokens           int     `json:"prompt_tokens"`
	GenerateTokens         int     `json:"generate_tokens"`
	Repeats                int     `json:"repeats"`
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
// e.Info().Path with the same greedy request: one warm-up run each, then
// o.Repeats timed runs from an empty cache, alternating between the two.
// Rates are medians; ratios are the medians of the per-pair ratios.
func Compare(ctx context.Context, e engine.Engine, o CompareOptions) (CompareResult, error) {
	info := e.Info()
	if info.Path == "" {
		return CompareResult{}, errors.New("bench: compare: the engine reports no model path")
	}
	if o.OracleDir == "" {
		o.OracleDir = home.OracleDir()
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
	if o.Repeats <= 0 {
		o.Repeats = 3
	}
	if o.PromptTokens+o.GenerateTokens >= info.ContextLength {
		return CompareResult{}, fmt.Errorf("bench: compare: %d+%d tokens exceed the %d-token context", o.PromptTokens, o.GenerateTokens, info.ContextLength)
	}
	p := &prompts{ctx: ctx, e: e}
	toks, err := p.unique(o.PromptTokens)
	if err != nil {
		return CompareResult{}, err
	}
	batch := info.BatchSize
	if batch == 0 {
		batch = 512
	}
	in, _ := json.Marshal(map[string]any{"dir": o.OracleDir, "model": info.Path, "threads": o.Threads,
		"context": o.PromptTokens + o.GenerateTokens + 1, "batch": batch, "flash_attention": o.FlashAttention, "prompt": toks, "generate": o.GenerateTokens})
	lc, err := startLlamaCpp(ctx, o.Node, in)
	if err != nil {
		return CompareResult{}, err
	}
	defer lc.close()

	// Pair 0 is the warm-up (pages the weights in, sizes the buffers; its
	// greedy tokens are compared). The timed pairs alternate between the
	// engines, so a slow spell of the machine hits both; the ratios are
	// medians of the per-pair ratios.
	var first, lcFirst []int32
	var ep, eg, lp, lg, rp, rg []float64
	for i := range o.Repeats + 1 {
		r, err := e.Generate(ctx, engine.Request{Tokens: toks, MaxTokens: o.GenerateTokens, NoCache: true, IgnoreEOG: true}, nil)
		if err != nil {
			return CompareResult{}, fmt.Errorf("bench: compare, engine: %w", err)
		}
		l, err := lc.run()
		if err != nil {
			return CompareResult{}, err
		}
		if i == 0 {
			first, lcFirst = r.Tokens, l.Tokens
			continue
		}
		ep = append(ep, rate(o.PromptTokens, r.Timings.PromptDuration.Seconds()))
		eg = append(eg, r.Timings.GeneratePerSecond())
		lp = append(lp, rate(o.PromptTokens, l.PromptSeconds))
		lg = append(lg, rate(o.GenerateTokens-1, l.GenerateSeconds))
		if lp[len(lp)-1] > 0 && lg[len(lg)-1] > 0 {
			rp = append(rp, ep[len(ep)-1]/lp[len(lp)-1])
			rg = append(rg, eg[len(eg)-1]/lg[len(lg)-1])
		}
	}
	res := CompareResult{Model: info.Path, Threads: o.Threads, PromptTokens: o.PromptTokens, GenerateTokens: o.GenerateTokens,
		Repeats: o.Repeats, EnginePromptPerSec: median(ep), EngineGeneratePerSec: median(eg),
		LlamaCppPromptPerSec: median(lp), LlamaCppGeneratePerSec: median(lg),
		PromptRatio: median(rp), GenerateRatio: median(rg),
		SameTokens: slices.Equal(first, lcFirst)}
	return res, nil
}

// llamaCpp is a running llamacpp.mjs: one request line in, then one run per
// "run" line, each answered with one JSON line.
type llamaCpp struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
	script string
}

// llamaCppRun is one timed request of llamacpp.mjs.
type llamaCppRun struct {
	PromptSeconds   float64 `json:"prompt_seconds"`
	GenerateSeconds float64 `json:"generate_seconds"`
	Tokens          []int32 `json:"tokens"`
}

func startLlamaCpp(ctx context.Context, node string, req []byte) (*llamaCpp, error) {
	f, err := os.CreateTemp("", "phonellm-llamacpp-*.mjs")
	if err != nil {
		return nil, fmt.Errorf("bench: compare: %w", err)
	}
	_, werr := f.Write(llamacppScript)
	if cerr := f.Close(); werr != nil || cerr != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("bench: compare: write script: %v", errors.Join(werr, cerr))
	}
	l := &llamaCpp{script: f.Name(), stderr: &bytes.Buffer{}}
	l.cmd = exec.CommandContext(ctx, node, f.Name())
	l.cmd.Stderr = l.stderr
	if l.in, err = l.cmd.StdinPipe(); err == nil {
		var out io.ReadCloser
		if out, err = l.cmd.StdoutPipe(); err == nil {
			l.out = bufio.NewReaderSize(out, 1<<16)
			err = l.cmd.Start()
		}
	}
	if err == nil {
		_, err = l.in.Write(append(req, '\n'))
	}
	if err != nil {
		l.close()
		return nil, fmt.Errorf("bench: compare, node-llama-cpp: %w", err)
	}
	return l, nil
}

// run asks for one more run and reads its result.
func (l *llamaCpp) run() (llamaCppRun, error) {
	var r llamaCppRun
	if _, err := io.WriteString(l.in, "run\n"); err != nil {
		return r, l.fail(err)
	}
	line, err := l.out.ReadBytes('\n')
	if err != nil {
		return r, l.fail(err)
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return r, fmt.Errorf("bench: compare, node-llama-cpp output %q: %w", trimOut(line), err)
	}
	return r, nil
}

// fail reports err with the script's exit status and the end of its stderr.
func (l *llamaCpp) fail(err error) error {
	l.in.Close()
	if werr := l.cmd.Wait(); werr != nil {
		err = werr
	}
	return fmt.Errorf("bench: compare, node-llama-cpp: %w: %s", err, trimOut(l.stderr.Bytes()))
}

func (l *llamaCpp) close() {
	if l.in != nil {
		l.in.Close()
	}
	if l.cmd.Process != nil {
		l.cmd.Wait()
	}
	os.Remove(l.script)
}

func trimOut(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 500 {
		s = s[len(s)-500:]
	}
	return s
}
