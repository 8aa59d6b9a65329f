package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() { register("build", newFitCmd) }

func newFitCmd(a *app) *cobra.Command {
	var o fit.Options
	var fileType string
	var cf capacityFlags
	cmd := &cobra.Command{
		Use:   "fit [MODEL.gguf] [--phone 16gb] [--ctx 8192] [--parallel 1] [--all]",
		Short: "Will this GGUF run on that phone? Memory estimate, headroom, largest context and slots",
		Long: `Estimate the resident memory of serving a GGUF on a phone from its metadata alone (weights, KV cache of the
attention layers for ctx × parallel slots, recurrent state of Qwen3.5's delta-net layers, compute buffers,
runtime overhead) and compare it with a phone profile: verdict, headroom, the largest context and slot count that
fit and, when it does not fit, the best quantization type or smaller model that would. --config sizes a model
from its config.json alone (no weights). Exit code 4 when it does not fit.

Capacity planning (--reviews-per-hour N, --prompt-tokens, --shared-tokens, --latency): estimates the phone's
prompt and generation speed (prompt from its cores, anchored to published phone figures recorded in the profile;
generation from its memory bandwidth), the time of a review that reuses the shared prefix and of one that does
not, the reviews one phone serves an hour, and the phones the target needs and what they cost per hour on
Acurast at the plan's price (--price-per-hour to override) — each as a range, with its basis.

Profiles: ` + profileNames() + ` (add or override with --profiles FILE).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Config == "" {
				arg := ""
				if len(args) == 1 {
					arg = args[0]
				}
				p, err := resolveGGUF(a, arg)
				if err != nil {
					return err
				}
				o.Model = p
			}
			if o.Engine == "llamacpp" { // the spelling --engine's help and bench use
				o.Engine = fit.LlamaCpp
			}
			if fileType != "" {
				ft, err := gguf.ParseFileType(fileType)
				if err != nil {
					return usageError("%v", err)
				}
				o.FileType = ft
			}
			prefixes := 0
			phoneFrom := "" // the file that named the profile when the command line did not
			if ws, _ := a.findWorkspace(); ws != nil {
				if o.Phone == "" && ws.Project.Phone != "" {
					o.Phone = ws.Project.Phone
					phoneFrom = filepath.Join(ws.Root, workspace.FileName)
				}
				prefixes = len(ws.Project.Warm)
			}
			phones := o.Engine == "" || o.Engine == fit.LlamaCpp || o.Engine == "llamacpp"
			if phones && o.Checkpoints == 0 {
				o.Checkpoints = deploy.DefaultCtxCheckpoints // what ship runs the phones with
			}
			res, err := fit.Run(a.ctx, o, a.reporter())
			if err != nil {
				var ue *fit.UnknownProfileError
				switch {
				case errors.As(err, &ue) && phoneFrom != "":
					return fmt.Errorf("%s: phone: %w", phoneFrom, err) // a bad input file (exit 3)
				case errors.As(err, &ue):
					return usageError("--phone: %v", err)
				}
				return err
			}
			var plan *fit.CapacityPlan
			if cf.active(cmd) {
				co, err := cf.options(cmd)
				if err != nil {
					return err
				}
				p, err := fit.RunCapacity(o, co)
				if err != nil {
					return err
				}
				plan = &p
			}
			out := fitOutput{Result: res, Capacity: plan}
			if phones && res.Verdict.Fits {
				if out.PromptCache, out.WithPromptCache, err = promptCachePlan(o, res, prefixes); err != nil {
					return err
				}
			}
			if err := a.io.Result(out, func(w io.Writer) {
				printFit(w, res)
				if out.PromptCache != nil {
					printPromptCache(w, *out.PromptCache, *out.WithPromptCache)
				}
				if plan != nil {
					printCapacity(w, *plan)
				}
			}); err != nil {
				return err
			}
			if !res.Verdict.Fits {
				return withCode(exitVerdict, fmt.Errorf("%s does not fit a %s phone (%s over)", res.Model, res.Verdict.Profile,
					ui.HumanBytes(-res.Verdict.Headroom)), suggestionHint(res))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Phone, "phone", "", "phone profile (default: the workspace's, else 16gb)")
	f.IntVar(&o.Ctx, "ctx", 4096, "context tokens per slot")
	f.IntVar(&o.Parallel, "parallel", 1, "parallel slots (concurrent chats)")
	f.StringVar(&o.KVType, "kv-type", "f16", "KV cache type: f16, q8_0, q4_0")
	f.BoolVar(&o.All, "all", false, "also print a table over every profile")
	f.StringVar(&o.ProfilesFile, "profiles", "", "JSON file with extra or overriding phone profiles")
	f.StringVar(&o.Config, "config", "", "size a model from its config.json instead of a GGUF (no weights needed)")
	f.StringVar(&fileType, "type", "", "with --config: quantization type to size it at (default q4_k_m)")
	f.StringVar((*string)(&o.Engine), "engine", "", "runtime to account for: llamacpp (phones, default) or goengine (phonellm serve)")
	f.StringVar(&o.FlashAttention, "flash-attn", "auto", "flash attention as the runtime will run: on, off, or auto (the runtime's default: on for llama.cpp, off for phonellm serve)")
	cf.add(cmd)
	return cmd
}

func profileNames() string {
	s := ""
	for i, p := range fit.Builtin() {
		if i > 0 {
			s += ", "
		}
		s += p.Name
	}
	return s
}

func suggestionHint(res fit.Result) string {
	if res.Suggestion != nil && res.Suggestion.Message != "" {
		return res.Suggestion.Message
	}
	return ""
}

func printFit(w io.Writer, r fit.Result) {
	v := r.Verdict
	status := string(v.Status)
	fmt.Fprintf(w, "%s on a %s phone: %s\n", r.Model, v.Profile, status)
	fmt.Fprintf(w, "  needs %s of %s usable (headroom %s)\n", ui.HumanBytes(v.Needed), ui.HumanBytes(v.Usable), signedBytes(v.Headroom))
	b := r.Breakdown
	fmt.Fprintf(w, "  weights %s, KV cache %s, recurrent state %s, compute %s", ui.HumanBytes(b.Weights), ui.HumanBytes(b.KVCache),
		ui.HumanBytes(b.Recurrent+b.Checkpoints), ui.HumanBytes(b.Compute))
	if b.Inputs+b.Repack > 0 {
		fmt.Fprintf(w, ", engine buffers %s", ui.HumanBytes(b.Inputs+b.Repack))
	}
	fmt.Fprintf(w, ", overhead %s\n", ui.HumanBytes(b.Overhead+b.Output))
	fmt.Fprintf(w, "  largest context that fits: %d tokens; most slots at this context: %d\n", r.MaxCtx, r.MaxParallel)
	switch {
	case v.Threads > 0 && v.MaxTokensPerSec > 0:
		fmt.Fprintf(w, "  threads %d, decode at most ~%.0f tokens/s (%s of weights read per token at the profile's %.0f GB/s)\n",
			v.Threads, v.MaxTokensPerSec, ui.HumanBytes(v.BytesPerToken), v.BandwidthGBps)
	case v.Threads > 0:
		fmt.Fprintf(w, "  threads %d (decode speed: %s of weights per token is too little for memory bandwidth to bound it; measure with 'phonellm bench')\n",
			v.Threads, ui.HumanBytes(v.BytesPerToken))
	}
	if s := r.Suggestion; s != nil && s.Message != "" {
		fmt.Fprintf(w, "  suggestion: %s\n", s.Message)
	}
	if len(r.Table) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nphone\tverdict\tusable\tneeded\theadroom\tmax ctx\tmax slots")
		for _, row := range r.Table {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", row.Profile, row.Status, ui.HumanBytes(row.Usable),
				ui.HumanBytes(row.Needed), signedBytes(row.Headroom), row.MaxCtx, row.MaxParallel)
		}
		tw.Flush()
	}
}

func signedBytes(n int64) string {
	if n < 0 {
		return "-" + ui.HumanBytes(-n)
	}
	return ui.HumanBytes(n)
}
