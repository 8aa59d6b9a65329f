package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/internal/benchdata"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/runtime/bench"
	"github.com/spf13/cobra"
)

func init() { register("run", newBenchCmd) }

func newBenchCmd(a *app) *cobra.Command {
	var ef engineFlags
	var o bench.Options
	var skip []string
	var vs bool
	var vsPrompt, vsGen int
	cmd := &cobra.Command{
		Use:   "bench [MODEL.gguf | hf://…]",
		Short: "Measure prompt and generation speed, concurrency, fleet throughput and the prefix cache",
		Long: `Measure a model the way a phone serves it: prompt processing (tokens/s) at the given prompt lengths
(default 512 and 7000, the fraud-review case), generation tokens/s, aggregate rate at each concurrency level, a
fleet figure (requests/hour for a 7,000-in/8-out request) and the prefix cache (a second request sharing 90% of
its prompt). 'phonellm bench quantize' measures quantization speed and memory instead.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := ""
			if len(args) == 1 {
				arg = args[0]
			}
			path, err := resolveGGUF(a, arg)
			if err != nil {
				return err
			}
			o.Skip = skip
			maxPrompt := 0
			for _, n := range o.PromptLengths {
				maxPrompt = max(maxPrompt, n)
			}
			if maxPrompt == 0 {
				maxPrompt = 7000
			}
			if !cmd.Flags().Changed("ctx") {
				ef.ctx = maxPrompt + 256
			}
			eng, err := ef.load(a.ctx, path)
			if err != nil {
				return err
			}
			defer eng.Close()
			if vs {
				cr, err := bench.Compare(a.ctx, eng, bench.CompareOptions{
					Threads: eng.Info().Threads, FlashAttention: ef.flashAttn, PromptTokens: vsPrompt, GenerateTokens: vsGen, Repeats: o.Repeats})
				if err != nil {
					return err
				}
				return a.io.Result(cr, func(w io.Writer) {
					fmt.Fprintf(w, "%s, %d threads, prompt %d / generate %d tokens, medians of %d alternating runs after a warm-up\n", cr.Model, cr.Threads, cr.PromptTokens, cr.GenerateTokens, cr.Repeats)
					fmt.Fprintf(w, "  phonellm   prompt %8.1f tok/s   generate %7.1f tok/s\n", cr.EnginePromptPerSec, cr.EngineGeneratePerSec)
					fmt.Fprintf(w, "  llama.cpp  prompt %8.1f tok/s   generate %7.1f tok/s\n", cr.LlamaCppPromptPerSec, cr.LlamaCppGeneratePerSec)
					fmt.Fprintf(w, "  ratio      prompt %8.2f×        generate %7.2f×   same greedy tokens: %v\n", cr.PromptRatio, cr.GenerateRatio, cr.SameTokens)
				})
			}
			res, err := bench.Run(a.ctx, eng, o, func(s string) { a.io.Printf("%s\n", s) })
			if err != nil {
				return err
			}
			return a.io.Result(res, func(w io.Writer) { printBench(w, res) })
		},
	}
	ef.add(cmd)
	f := cmd.Flags()
	f.IntSliceVar(&o.PromptLengths, "prompt", nil, "prompt lengths in tokens (default 512,7000)")
	f.IntVar(&o.GenerateTokens, "gen", 0, "tokens to generate per measurement (default 128)")
	f.IntSliceVar(&o.Concurrency, "concurrency", nil, "concurrency levels (default 1 and --parallel)")
	f.IntVar(&o.Repeats, "repeats", 0, "repeats per measurement; the median is reported (default 1; 3 with --vs-llamacpp)")
	f.StringSliceVar(&skip, "skip", nil, "parts to skip: prompt, generate, concurrency, fleet, prefix")
	f.BoolVar(&vs, "vs-llamacpp", false, "time upstream llama.cpp (node-llama-cpp, scripts/setup-oracle.sh) on the same file, threads and prompt, and report ratios")
	f.IntVar(&vsPrompt, "vs-prompt", 512, "with --vs-llamacpp: prompt tokens")
	f.IntVar(&vsGen, "vs-gen", 64, "with --vs-llamacpp: generated tokens")
	cmd.AddCommand(newBenchQuantizeCmd(a), newBenchImatrixCmd(a), newBenchFleetCmd(a))
	return cmd
}

func printBench(w io.Writer, r bench.Result) {
	fmt.Fprintf(w, "%s (%s), %d threads\n", r.Model.ID, r.Model.Architecture, r.Model.Threads)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "test\ttokens\tseconds\ttokens/s")
	for _, p := range r.Prompt {
		fmt.Fprintf(tw, "prompt %d\t%d\t%.2f\t%.1f\n", p.Requested, p.Tokens, p.Seconds, p.PerSecond)
	}
	if g := r.Generate; g != nil {
		fmt.Fprintf(tw, "generate\t%d\t%.2f\t%.1f\n", g.Tokens, g.Seconds, g.PerSecond)
	}
	for _, c := range r.Concurrency {
		fmt.Fprintf(tw, "generate ×%d\t%d\t%.2f\t%.1f (%.1f per request)\n", c.Level, c.Tokens, c.Seconds, c.PerSecond, c.PerRequest)
	}
	tw.Flush()
	if f := r.Fleet; f != nil {
		fmt.Fprintf(w, "fleet: %d in / %d out: %.2f s per request, %.0f requests/hour per replica\n", f.PromptTokens, f.GenerateTokens, f.Seconds, f.RequestsPerHour)
	}
	if p := r.PrefixCache; p != nil {
		fmt.Fprintf(w, "prefix cache: %d of %d prompt tokens shared: prompt %.2f s → %.2f s (%.1f×), %.0f requests/hour\n",
			p.SharedTokens, p.PromptTokens, p.FirstPromptSeconds, p.SecondPromptSeconds, p.Speedup, p.RequestsPerHour)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func newBenchQuantizeCmd(a *app) *cobra.Command {
	var in, imatrixFile string
	var types []string
	var threads []int
	var repeats int
	cmd := &cobra.Command{
		Use:   "quantize [--in F16.gguf] [--types q4_k_m,q8_0,q4_0] [--threads 1,2] [--repeats N]",
		Short: "Measure quantization speed, CPU time and peak memory, side by side with llama-quantize",
		Long: `Quantize an F16 GGUF per type and thread count, each in a child process so its wall time, CPU time
(user + system) and peak RSS are its own. Without --in, a Qwen3-0.6B-shaped F16 GGUF (1.5 GB, the shape of
llama-quantize's published speed anchor) is generated once into $PHONELLM_HOME/bench and reused.

With LLAMA_QUANTIZE set to a llama-quantize executable, each measurement alternates llama-quantize and phonellm
on the same input, threads and type (--repeats rounds, default 3; the program that goes first alternates), and
the ratios are the medians of the per-round ratios; the first round's outputs are also compared tensor by
tensor. Without it, phonellm is compared with llama-quantize's published anchor, measured on another day, and
the output says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, t := range types {
				if _, err := gguf.ParseFileType(t); err != nil {
					return usageError("%v", err)
				}
			}
			if in == "" {
				p, err := benchF16(a)
				if err != nil {
					return err
				}
				in = p
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			tmp, err := os.MkdirTemp(filepath.Dir(in), ".bench-out-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			llama := getenv("LLAMA_QUANTIZE", "")
			if repeats <= 0 {
				repeats = 1
				if llama != "" {
					repeats = 3
				}
			}
			var upper []string
			for _, t := range types {
				upper = append(upper, strings.ToUpper(t))
			}
			res, err := bench.Quantize(a.ctx, bench.QuantizeOptions{
				Phonellm: exe, Env: append(os.Environ(), "PHONELLM_WORKSPACE="+tmp), LlamaQuantize: llama,
				Input: in, Types: upper, Threads: threads, Repeats: repeats, WorkDir: tmp, Imatrix: imatrixFile,
				Progress: func(s string) { a.io.Printf("%s\n", s) },
			})
			if err != nil {
				return err
			}
			return a.io.Result(res, func(w io.Writer) { printQuantBench(w, res) })
		},
	}
	cmd.Flags().StringVar(&in, "in", "", "F16 GGUF to quantize (default: a generated Qwen3-0.6B-shaped one)")
	cmd.Flags().StringSliceVar(&types, "types", []string{"q4_k_m", "q8_0", "q4_0"}, "quantization types")
	cmd.Flags().IntSliceVar(&threads, "threads", []int{1, 2}, "thread counts")
	cmd.Flags().StringVar(&imatrixFile, "imatrix", "", "also quantize every type with this importance matrix (both programs), rows without and with it")
	cmd.Flags().IntVar(&repeats, "repeats", 0, "timed runs of each program per type and thread count (default 3 with LLAMA_QUANTIZE, else 1)")
	return cmd
}

func printQuantBench(w io.Writer, r bench.QuantizeResult) {
	var size int64
	if len(r.Rows) > 0 {
		size = r.Rows[0].InputBytes
	}
	fmt.Fprintf(w, "input %s (%s)\n", r.Input, ui.HumanBytes(size))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "type\tthreads\tseconds\tCPU-s\tinput MB/s\tpeak RSS\tllama-quantize s\tCPU-s\tMB/s\tpeak RSS\tspeed\tCPU\tidentical\tbaseline")
	for _, x := range r.Rows {
		typ := x.Type
		if x.Imatrix {
			typ += " +imatrix"
		}
		lrss, ident := "-", "-"
		if x.LlamaPeakRSS > 0 {
			lrss = ui.HumanBytes(x.LlamaPeakRSS)
		}
		if x.Tensors > 0 {
			ident = fmt.Sprintf("%d/%d", x.IdenticalTensors, x.Tensors)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.1f\t%s\t%.2f\t%.2f\t%.1f\t%s\t%.2f×\t%.2f×\t%s\t%s\n", typ, x.Threads,
			x.Seconds, x.CPUSeconds, x.InputMBps, ui.HumanBytes(x.PeakRSS), x.LlamaSeconds, x.LlamaCPUSeconds,
			x.LlamaInputMBps, lrss, x.ThroughputRatio, x.CPURatio, ident, x.Baseline)
	}
	tw.Flush()
	fmt.Fprintf(w, "speed: llama-quantize wall time / phonellm's; CPU: phonellm CPU-seconds / llama-quantize's\n")
	if r.Load != "" {
		fmt.Fprintf(w, "load average before the runs: %s\n", r.Load)
	}
	fmt.Fprintf(w, "note: %s\n", r.Note)
}

// benchF16 returns the generated Qwen3-0.6B-shaped F16 GGUF used by the quantize benchmark, making it once.
func benchF16(a *app) (string, error) {
	a.io.Printf("input: a Qwen3-0.6B-shaped F16 GGUF in %s (generated once)\n", benchdata.Dir())
	return benchdata.Qwen3F16(a.ctx, a.reporter())
}
