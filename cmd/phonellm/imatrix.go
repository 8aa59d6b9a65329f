package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/imatrix/calibrate"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/phonellm/phonellm/runtime/goengine"
	"github.com/spf13/cobra"
)

func init() { register("build", newImatrixCmd) }

type imatrixFlags struct {
	model, data, out, format string
	chat, special, output    bool
	chunkSize, chunks, batch int
	saveEvery, threads       int
	resume, force            bool
}

func newImatrixCmd(a *app) *cobra.Command {
	var fl imatrixFlags
	cmd := &cobra.Command{
		Use:   "imatrix [--model F16.gguf] [--data prompts.jsonl] [-o imatrix.gguf]",
		Short: "Importance matrix from calibration prompts, for better quantization (llama-imatrix's format)",
		Long: `Run the model over calibration data with the built-in engine and collect, for every weight matrix, the
sum of squared activations per input column and the token count (per expert for mixture-of-experts layers), as
llama.cpp's llama-imatrix does. quantize --imatrix weights the quantization error by it; the low-bit types
(IQ1/IQ2/IQ3, Q2_K_S) need one. The output is llama.cpp's GGUF imatrix format (or the legacy .dat with
--format dat), which llama-quantize reads too.

The data is a text file or the JSONL prompts eval reads; records with "messages" are rendered through the
model's chat template (--chat renders "text" records as user messages too), so a fine-tune is calibrated on
its own prompts in the form it will answer them. The tokens are cut into chunks of --chunk-size tokens, each
evaluated from an empty context; the tail after the last whole chunk is not used.

In a workspace the model defaults to the converted GGUF and the data to phonellm.yaml's imatrix: entry; the run
is skipped when both are unchanged, and quantize then uses the result. A partial file (OUT.partial) is kept
every --save-every chunks; --resume continues an interrupted run from it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := a.findWorkspace()
			if err != nil {
				return err
			}
			res, _, err := runImatrixStage(a, ws, fl)
			if err != nil {
				return err
			}
			return a.io.Result(res, func(w io.Writer) { printImatrix(w, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.model, "model", "", "model GGUF to run (F16/BF16/F32; default: the workspace's converted GGUF)")
	f.StringVar(&fl.data, "data", "", "calibration data: JSONL prompts or text (default: phonellm.yaml's imatrix)")
	f.StringVarP(&fl.out, "out", "o", "", "output file (default <name>.imatrix.gguf)")
	f.StringVar(&fl.format, "format", "", "gguf or dat (default: from the output's extension, else gguf)")
	f.BoolVar(&fl.chat, "chat", false, "render text records through the chat template as user messages too")
	f.BoolVar(&fl.special, "parse-special", false, "turn control-token text in plain data into the tokens")
	f.BoolVar(&fl.output, "process-output", false, "collect output.weight too")
	f.IntVarP(&fl.chunkSize, "chunk-size", "c", calibrate.DefaultChunkSize, "tokens per chunk (llama-imatrix -c)")
	f.IntVar(&fl.chunks, "chunks", 0, "use at most this many chunks (default: all)")
	f.IntVarP(&fl.batch, "batch", "b", 0, "tokens per forward pass (default: min(512, chunk size))")
	f.IntVar(&fl.saveEvery, "save-every", calibrate.DefaultSaveEvery, "write OUT.partial every N chunks (0: never)")
	f.IntVar(&fl.threads, "threads", 0, "engine threads (default: all cores)")
	f.BoolVar(&fl.resume, "resume", false, "continue from OUT.partial of an interrupted run")
	f.BoolVar(&fl.force, "force", false, "compute again even when the output is up to date")
	return cmd
}

// runImatrixStage runs the imatrix stage through the workspace (skipped when its model and data are
// unchanged) and returns its result and the imatrix file.
func runImatrixStage(a *app, ws *workspace.Workspace, fl imatrixFlags) (calibrate.Result, string, error) {
	model, from, explicit := fl.model, "--model", fl.model != ""
	if model == "" {
		if ws != nil {
			model, from = workspaceGGUF(ws)
		}
		if model == "" {
			return calibrate.Result{}, "", usageError("no model: pass --model F16.gguf (in a workspace, run 'phonellm convert' first)")
		}
	}
	data, dataName := fl.data, fl.data
	if ws != nil && ws.Project.Imatrix != "" {
		if yml := ws.Path(ws.Project.Imatrix); data == "" {
			data, dataName = yml, ws.Project.Imatrix
		} else {
			explicit = explicit || !samePath(data, yml)
		}
	} else if data != "" {
		explicit = true
	}
	if data == "" {
		return calibrate.Result{}, "", usageError("no calibration data: pass --data FILE (JSONL prompts or text), or set imatrix: in phonellm.yaml")
	}
	if err := checkGGUFInput(model); err != nil {
		return calibrate.Result{}, "", err
	}
	mi, err := workspace.NewInput("model", model, "")
	if err != nil {
		return calibrate.Result{}, "", err
	}
	di, err := workspace.NewInput("data", data, "")
	if err != nil {
		return calibrate.Result{}, "", err
	}
	outDir := filepath.Dir(model)
	if ws != nil {
		outDir = ws.Root
	}
	def := filepath.Join(outDir, ggufName(a, model)+".imatrix.gguf")
	out := fl.out
	oneOff := explicit || oneOffOut(out, def)
	if out == "" {
		out = def
	}
	format := imatrix.FormatOf(out)
	if fl.format != "" {
		if format, err = imatrix.ParseFormat(fl.format); err != nil {
			return calibrate.Result{}, "", usageError("--format: %v", err)
		}
	}
	threads := fl.threads
	if threads == 0 {
		fmt.Sscan(getenv("PHONELLM_THREADS", "0"), &threads)
	}
	o := calibrate.Options{Model: model, Data: data, DataName: dataName, Out: out, Format: format, Chat: fl.chat, ParseSpecial: fl.special,
		ChunkSize: fl.chunkSize, Chunks: fl.chunks, Batch: fl.batch, ProcessOutput: fl.output, SaveEvery: fl.saveEvery,
		Resume: fl.resume, Load: engineLoader(threads)}
	if fl.saveEvery == 0 {
		o.SaveEvery = -1
	}
	if err := o.Validate(); err != nil {
		return calibrate.Result{}, "", usageError("%v", err)
	}
	opts := map[string]any{"out": out, "format": format, "chat": fl.chat, "parse_special": fl.special,
		"chunk_size": fl.chunkSize, "chunks": fl.chunks, "batch": fl.batch, "process_output": fl.output}
	step := workspace.Step{Stage: "imatrix", Inputs: []workspace.Input{mi, di}, Options: opts, OneOff: oneOff, Force: fl.force}
	var res calibrate.Result
	_, err = runStage(a, ws, step, map[string]string{"model": from}, &res, func() (calibrate.Result, []pipeline.Artifact, error) {
		r, err := calibrate.Run(a.ctx, o, a.reporter())
		if err != nil {
			return r, nil, err
		}
		return r, r.Artifacts, nil
	})
	if err != nil {
		return res, "", err
	}
	return res, out, nil
}

// engineLoader loads a model into the built-in engine for the imatrix stage.
func engineLoader(threads int) calibrate.Loader {
	return func(ctx context.Context, path string, n, batch int) (calibrate.Model, error) {
		e, err := goengine.Load(ctx, goengine.Options{Path: path, ContextLength: n, BatchSize: batch, Threads: threads})
		if err != nil {
			return nil, err
		}
		return observer{e}, nil
	}
}

// observer adapts the engine's Observe to the stage.
type observer struct{ e *goengine.Engine }

func (o observer) Observe(ctx context.Context, toks []int32, want func(string, bool) bool, fn func(imatrix.Matmul) error) error {
	return o.e.Observe(ctx, toks, goengine.ObserveOptions{Want: want,
		Matmul: func(m goengine.Matmul) error { return fn(imatrix.Matmul(m)) }})
}

func (o observer) Close() error { return o.e.Close() }

func printImatrix(w io.Writer, r calibrate.Result) {
	for _, art := range r.Artifacts {
		fmt.Fprintf(w, "%s\n", art.Path)
		fmt.Fprintf(w, "  %s imatrix, %d entries, %s, sha256 %s\n", r.Format, r.Entries, ui.HumanBytes(art.Size), art.SHA256)
	}
	resumed := ""
	if r.Resumed > 0 {
		resumed = fmt.Sprintf(" (%d resumed)", r.Resumed)
	}
	fmt.Fprintf(w, "  %d chunks of %d tokens%s from %d records (%d tokens) of %s\n", r.Chunks, r.ChunkSize, resumed, r.Records, r.Tokens, r.Data)
	if len(r.Partial) > 0 {
		fmt.Fprintf(w, "  experts no token reached in %d tensors: %s\n", len(r.Partial), strings.Join(r.Partial, ", "))
	}
	if r.Seconds > 0 {
		fmt.Fprintf(w, "  %.1f s, %.0f tokens/s\n", r.Seconds, r.TokensSec)
	}
}
