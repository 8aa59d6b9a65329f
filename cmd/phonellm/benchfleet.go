package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/phonellm/phonellm/internal/benchdata"
	"github.com/phonellm/phonellm/internal/benchdata/fleet"
	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/runtime/bench"
	"github.com/phonellm/phonellm/runtime/gateway"
	"github.com/spf13/cobra"
)

type benchFleetFlags struct {
	gatewayURL, apiKeyEnv, workload, arch, kvType, affinity, model string
	replicas, threads, parallel, ctx                               int
	gen                                                            bench.GenerateSpec
	maxTokens, concurrency, requests, rounds                       int
	duration, timeout                                              time.Duration
	compare                                                        bool
}

func newBenchFleetCmd(a *app) *cobra.Command {
	var fl benchFleetFlags
	cmd := &cobra.Command{
		Use:   "fleet [MODEL.gguf] [--gateway URL] [--workload FILE] [--compare]",
		Short: "Load a fleet through its gateway with a rubrics × cases workload; compare affinity with load-only routing",
		Long: `Drive a gateway with --concurrency clients, each sending one review at a time: a rubric as the system
message and a case as the user message, for --duration per phase. Reports requests per hour, p50/p95 latency
and the prompt-cache hit rate (what the replicas reported: cached / prompt tokens), overall and per replica
(from the gateway's /metrics). --compare runs the same workload routed by load only (the Phonellm-Routing: load
header) in alternating phases of the same run, --rounds of each, and prints the ratio.

Without --gateway it starts a local fleet itself: --replicas 'phonellm serve' processes of MODEL (default: a
generated --arch qwen3 or qwen35 model of ~25 M parameters, Q4_K_M, made once into $PHONELLM_HOME/bench) with
--threads each, and a gateway in this process; their CPU seconds are reported too.

The workload is a YAML/JSON file (--workload):
    rubrics: [{file: rubric-a.txt}, "an inline rubric"]
    cases: [{file: case-1.txt}, "an inline case"]
    max_tokens: 8
or generated: --rubrics 3 --cases 32 --prompt-tokens 7000 --share 0.9 (each prompt ~7,000 tokens, 90 % of it
its rubric; the file form is generate: {rubrics: 3, cases: 32, prompt_tokens: 7000, share: 0.9}). Texts are
sized with the model's tokenizer, or at 4 bytes per token against a remote gateway.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				fl.model = args[0]
			}
			return runBenchFleet(a, cmd, fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.gatewayURL, "gateway", "", "gateway base URL to load (default: start a local fleet)")
	f.StringVar(&fl.apiKeyEnv, "api-key-env", "", "environment variable holding the gateway's API key (with --gateway; default PHONELLM_API_KEY when set)")
	f.StringVar(&fl.workload, "workload", "", "workload file (YAML or JSON): rubrics and cases, or generate:")
	f.IntVar(&fl.gen.Rubrics, "rubrics", 3, "generated workload: number of rubrics")
	f.IntVar(&fl.gen.Cases, "cases", 32, "generated workload: number of cases")
	f.IntVar(&fl.gen.PromptTokens, "prompt-tokens", 7000, "generated workload: tokens per prompt")
	f.Float64Var(&fl.gen.Share, "share", 0.9, "generated workload: fraction of each prompt that is its rubric")
	f.Uint64Var(&fl.gen.Seed, "seed", 1, "seed of the generated texts and of the clients' choices")
	f.IntVar(&fl.maxTokens, "max-tokens", 8, "tokens generated per request")
	f.IntVar(&fl.concurrency, "concurrency", 6, "clients sending at once")
	f.DurationVar(&fl.duration, "duration", 2*time.Minute, "how long each phase sends requests")
	f.IntVar(&fl.requests, "requests", 0, "end a phase after this many answers (0: duration only)")
	f.BoolVar(&fl.compare, "compare", false, "alternate with phases routed by load only, and print the ratio")
	f.IntVar(&fl.rounds, "rounds", 2, "with --compare: phases of each routing")
	f.DurationVar(&fl.timeout, "timeout", 10*time.Minute, "per-request timeout")
	f.IntVar(&fl.replicas, "replicas", 3, "local fleet: replicas")
	f.IntVar(&fl.threads, "threads", 1, "local fleet: threads per replica")
	f.IntVar(&fl.parallel, "parallel", 1, "local fleet: slots per replica")
	f.IntVar(&fl.ctx, "ctx", 8192, "local fleet: context tokens per slot")
	f.StringVar(&fl.kvType, "kv-type", "f16", "local fleet: KV cache type (f16, q8_0, q4_0)")
	f.StringVar(&fl.arch, "arch", "qwen3", "local fleet without MODEL: generated model shape, qwen3 or qwen35")
	f.StringVar(&fl.affinity, "affinity", "auto", "local fleet: the gateway's routing (auto, system, prefix, off)")
	return cmd
}

func runBenchFleet(a *app, cmd *cobra.Command, fl benchFleetFlags) error {
	mode, err := gateway.ParseAffinityMode(fl.affinity)
	if err != nil {
		return usageError("--affinity: %v", err)
	}
	local := fl.gatewayURL == ""
	if !local {
		for _, n := range []string{"replicas", "threads", "parallel", "ctx", "kv-type", "arch", "affinity"} {
			if cmd.Flags().Changed(n) {
				return usageError("--%s sets up a local fleet; it does not apply with --gateway", n)
			}
		}
	}
	// The workload: a file, or generated from the flags.
	var spec bench.WorkloadSpec
	if fl.workload != "" {
		if spec, err = bench.ReadWorkloadSpec(fl.workload); err != nil {
			return err
		}
	} else {
		g := fl.gen
		spec.Generate = &g
	}
	maxTokens := fl.maxTokens
	if spec.MaxTokens > 0 && !cmd.Flags().Changed("max-tokens") {
		maxTokens = spec.MaxTokens
	}
	if spec.Generate != nil {
		if err := spec.Generate.Validate(); err != nil {
			return &bench.WorkloadError{Path: fl.workload, Msg: "generate: " + err.Error()}
		}
	}
	var wl bench.Workload
	if spec.Generate == nil {
		if wl, err = spec.Load(fl.workload); err != nil {
			return err
		}
		wl.MaxTokens = maxTokens
	}

	o := bench.FleetOptions{Concurrency: fl.concurrency, Duration: fl.duration, Requests: fl.requests, Compare: fl.compare,
		Rounds: fl.rounds, Seed: fl.gen.Seed, Timeout: fl.timeout}
	count := func(s string) (int, error) { return (len(s) + 3) / 4, nil }
	if local {
		model := fl.model
		if model == "" {
			a.io.Printf("model: a generated %s-shaped Q4_K_M in %s (made once)\n", fl.arch, benchdata.Dir())
			if model, err = fleet.Model(a.ctx, fl.arch, a.reporter()); err != nil {
				return err
			}
		}
		if count, err = modelTokenCounter(a.ctx, model); err != nil {
			return err
		}
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "phonellm-bench-fleet-")
		if err != nil {
			return err
		}
		a.io.Printf("starting %d replicas of %s (%d thread(s), %d slot(s), ctx %d); logs in %s\n", fl.replicas, filepath.Base(model),
			fl.threads, fl.parallel, fl.ctx, dir)
		lf, err := bench.StartLocalFleet(a.ctx, bench.LocalFleetOptions{Exe: exe, Model: model, Replicas: fl.replicas, Threads: fl.threads,
			Parallel: fl.parallel, Ctx: fl.ctx, KVType: fl.kvType, Dir: dir, Affinity: gateway.AffinityOptions{Mode: mode}})
		if err != nil {
			return err
		}
		defer func() {
			lf.Close()
			os.RemoveAll(dir)
		}()
		o.URL, o.Model, o.CPU = lf.URL, lf.Alias, lf.CPU
	} else {
		o.URL = fl.gatewayURL
		if o.APIKey, err = clientAPIKey(fl.apiKeyEnv); err != nil {
			return err
		}
		o.Model = fl.model
	}
	if spec.Generate != nil {
		if wl, err = bench.Generate(*spec.Generate, maxTokens, count); err != nil {
			return err
		}
	}
	o.Workload = wl
	a.io.Printf("workload: %d rubrics × %d cases, %d tokens out; %d clients, %s per phase\n", len(wl.Rubrics), len(wl.Cases), wl.MaxTokens,
		o.Concurrency, o.Duration)
	res, err := bench.RunFleet(a.ctx, o, func(s string) { a.io.Printf("%s\n", s) })
	if err != nil {
		return err
	}
	return a.io.Result(res, func(w io.Writer) { res.WriteTable(w) })
}

// modelTokenCounter counts tokens with the model file's own tokenizer.
func modelTokenCounter(ctx context.Context, path string) (func(string) (int, error), error) {
	f, err := gguf.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench fleet: %w", err)
	}
	defer f.Close()
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("bench fleet: %w", err)
	}
	return func(s string) (int, error) {
		ids, err := tk.Encode(ctx, s, tokenizer.Options{ParseSpecial: true})
		return len(ids), err
	}, nil
}
