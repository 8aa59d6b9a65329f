package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/internal/benchdata"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize"
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

// quantBenchRow is one measured quantization.
type quantBenchRow struct {
	Type       string  `json:"type"`
	Threads    int     `json:"threads"`
	Seconds    float64 `json:"seconds"`
	InputBytes int64   `json:"input_bytes"`
	InputMBps  float64 `json:"input_mb_per_s"`
	PeakRSS    int64   `json:"peak_rss_bytes"`
	OutBytes   int64   `json:"output_bytes"`
	Imatrix    bool    `json:"imatrix,omitempty"`
}

type quantBenchResult struct {
	Input string          `json:"input"`
	Rows  []quantBenchRow `json:"rows"`
}

func newBenchQuantizeCmd(a *app) *cobra.Command {
	var in, imatrixFile string
	var types []string
	var threads []int
	cmd := &cobra.Command{
		Use:   "quantize [--in F16.gguf] [--types q4_k_m,q8_0,q4_0] [--threads 1,2]",
		Short: "Measure quantization speed (MB/s of input) and peak memory",
		Long: `Quantize an F16 GGUF once per type and thread count, each in a child process so its peak RSS is measured
alone, and report input MB/s and peak RSS. Without --in, a Qwen3-0.6B-shaped F16 GGUF (1.5 GB, the shape of
llama-quantize's published speed anchor) is generated once into $PHONELLM_HOME/bench and reused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if in == "" {
				p, err := benchF16(a)
				if err != nil {
					return err
				}
				in = p
			}
			st, err := os.Stat(in)
			if err != nil {
				return err
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
			res := quantBenchResult{Input: in}
			for _, t := range types {
				if _, err := gguf.ParseFileType(t); err != nil {
					return usageError("%v", err)
				}
				for _, th := range threads {
					// With --imatrix each type runs without and with it, alternating, for the memory comparison.
					for _, im := range imatrixRuns(imatrixFile) {
						out := filepath.Join(tmp, "out.gguf")
						argv := []string{exe, "quantize", t, "--in", in, "-o", out, "--threads", strconv.Itoa(th), "-q", "--json"}
						if im != "" {
							argv = append(argv, "--imatrix", im)
						} else {
							argv = append(argv, "--no-imatrix")
						}
						child, err := bench.RunChild(a.ctx, argv, append(os.Environ(), "PHONELLM_WORKSPACE="+tmp), a.io.Err)
						if err != nil {
							return fmt.Errorf("bench quantize %s (%d threads): %w", t, th, err)
						}
						el := child.Seconds
						var qr quantize.Result
						json.Unmarshal(child.Stdout, &qr)
						row := quantBenchRow{Type: strings.ToUpper(t), Threads: th, Seconds: el, InputBytes: st.Size(),
							InputMBps: float64(st.Size()) / 1e6 / el, PeakRSS: child.PeakRSS, Imatrix: im != ""}
						if len(qr.Artifacts) > 0 {
							row.OutBytes = qr.Artifacts[0].Size
						}
						with := ""
						if row.Imatrix {
							with = " with imatrix"
						}
						a.io.Printf("%s%s, %d threads: %.1f s, %.1f MB/s, peak RSS %s\n", row.Type, with, th, el, row.InputMBps, ui.HumanBytes(row.PeakRSS))
						res.Rows = append(res.Rows, row)
						os.Remove(out)
					}
				}
			}
			return a.io.Result(res, func(w io.Writer) {
				fmt.Fprintf(w, "input %s (%s)\n", in, ui.HumanBytes(st.Size()))
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "type\tthreads\tseconds\tinput MB/s\tpeak RSS\toutput")
				for _, r := range res.Rows {
					typ := r.Type
					if r.Imatrix {
						typ += " +imatrix"
					}
					fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%s\t%s\n", typ, r.Threads, r.Seconds, r.InputMBps, ui.HumanBytes(r.PeakRSS), ui.HumanBytes(r.OutBytes))
				}
				tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&in, "in", "", "F16 GGUF to quantize (default: a generated Qwen3-0.6B-shaped one)")
	cmd.Flags().StringSliceVar(&types, "types", []string{"q4_k_m", "q8_0", "q4_0"}, "quantization types")
	cmd.Flags().IntSliceVar(&threads, "threads", []int{1, 2}, "thread counts")
	cmd.Flags().StringVar(&imatrixFile, "imatrix", "", "also quantize with this importance matrix, alternating with plain runs")
	return cmd
}

// imatrixRuns is the importance matrix of each run of one type: none, then the file when there is one.
func imatrixRuns(file string) []string {
	if file == "" {
		return []string{""}
	}
	return []string{"", file}
}

// benchF16 returns the generated Qwen3-0.6B-shaped F16 GGUF used by the quantize benchmark, making it once.
func benchF16(a *app) (string, error) {
	a.io.Printf("input: a Qwen3-0.6B-shaped F16 GGUF in %s (generated once)\n", benchdata.Dir())
	return benchdata.Qwen3F16(a.ctx, a.reporter())
}
