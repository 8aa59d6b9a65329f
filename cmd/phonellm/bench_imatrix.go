package main

import (
	"fmt"
	"io"

	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/imatrix/calibrate"
	"github.com/spf13/cobra"
)

func newBenchImatrixCmd(a *app) *cobra.Command {
	var in string
	var tokens, chunk, repeats, threads int
	cmd := &cobra.Command{
		Use:   "imatrix [--in F16.gguf] [--tokens 100000] [--repeats 2]",
		Short: "Measure what collecting an importance matrix costs over plain evaluation",
		Long: `Evaluate the same tokens in the same chunks with the built-in engine, alternately without and with the
importance-matrix statistics collected, and report wall and CPU time of both and their ratio (the target is
1.3× at most). Without --in, the Qwen3-0.6B-shaped F16 GGUF of 'bench quantize' is used (generated once).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if in == "" {
				p, err := benchF16(a)
				if err != nil {
					return err
				}
				in = p
			}
			f, err := gguf.OpenFile(in)
			if err != nil {
				return err
			}
			tk, err := tokenizer.FromGGUF(f)
			f.Close()
			if err != nil {
				return err
			}
			// Token ids spread over the vocabulary's real tokens; the statistics do not matter, the work does.
			toks := make([]int32, tokens)
			for i := range toks {
				toks[i] = int32((i*7919 + 13) % tk.Len())
			}
			m, err := engineLoader(threads)(a.ctx, in, chunk, min(512, chunk))
			if err != nil {
				return err
			}
			defer m.Close()
			res, err := calibrate.MeasureOverhead(a.ctx, m, toks, chunk, repeats, a.reporter())
			if err != nil {
				return err
			}
			return a.io.Result(res, func(w io.Writer) {
				fmt.Fprintf(w, "%s: %d tokens in chunks of %d, %d alternating pairs\n", in, res.Tokens, res.Chunk, res.Repeats)
				for i := range res.PlainSeconds {
					fmt.Fprintf(w, "  pair %d: plain %.1f s (%.1f s CPU), collecting %.1f s (%.1f s CPU)\n", i+1,
						res.PlainSeconds[i], res.PlainCPU[i], res.CollectSeconds[i], res.CollectCPU[i])
				}
				fmt.Fprintf(w, "  collecting / plain: %.3f× wall, %.3f× CPU (medians)\n", res.Ratio, res.CPURatio)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&in, "in", "", "GGUF to evaluate (default: a generated Qwen3-0.6B-shaped F16 GGUF)")
	f.IntVar(&tokens, "tokens", 100000, "tokens per pass")
	f.IntVarP(&chunk, "chunk-size", "c", calibrate.DefaultChunkSize, "tokens per chunk")
	f.IntVar(&repeats, "repeats", 2, "plain/collecting pairs")
	f.IntVar(&threads, "threads", 0, "engine threads (default: all cores)")
	return cmd
}
