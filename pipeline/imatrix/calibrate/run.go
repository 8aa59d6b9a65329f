package calibrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/runtime/engine"
)

// Defaults of llama-imatrix (tools/imatrix/imatrix.cpp main: n_ctx 512; --output-frequency 10).
const (
	DefaultChunkSize = 512
	DefaultSaveEvery = 10
)

// Model is what the stage evaluates. runtime/goengine's Engine provides it (the CLI adapts its Observe).
type Model interface {
	// Observe evaluates tokens from an empty context, every position through every layer, and calls fn with
	// every matrix product of a weight want accepts (experts: the weight holds several matrices).
	Observe(ctx context.Context, tokens []int32, want func(weight string, experts bool) bool, fn func(imatrix.Matmul) error) error
	Close() error
}

// Loader loads the GGUF at path for evaluation with at least contextLength tokens of context and forward
// passes of batch tokens.
type Loader func(ctx context.Context, path string, contextLength, batch int) (Model, error)

// Options configure Run.
type Options struct {
	// Model is the GGUF to calibrate (F16/BF16/F32, or already quantized: the statistics are of whatever the
	// file computes). Required.
	Model string `json:"model"`
	// Data is the calibration data: a ".jsonl" file of prompts as eval reads them ({"text": …} or
	// {"messages": […]}), or any other file as one plain text. Required.
	Data string `json:"data"`
	// DataName is the data set's name recorded in imatrix.datasets (and, by quantize, in the model's
	// quantize.imatrix.dataset, which model cards show); default Data as given. A workspace passes the name
	// phonellm.yaml uses, so no local folder ends up in a published file.
	DataName string `json:"data_name,omitempty"`
	// Out is the imatrix file to write. Required.
	Out string `json:"out"`
	// Format is the output format; default GGUF.
	Format imatrix.Format `json:"format,omitempty"`
	// Chat renders "text" records through the model's chat template too, as one user message each. Records
	// with "messages" are always rendered with it (the generation prompt is added unless the last message is
	// the assistant's), and the special tokens of a rendered record are parsed.
	Chat bool `json:"chat,omitempty"`
	// ParseSpecial turns the text of control tokens in plain-text data into their ids (llama-imatrix
	// --parse-special); always on with Chat.
	ParseSpecial bool `json:"parse_special,omitempty"`
	// ChunkSize is the tokens evaluated from an empty context at once (llama-imatrix -c); default 512.
	ChunkSize int `json:"chunk_size,omitempty"`
	// Chunks limits the number of chunks (llama-imatrix --chunks); 0 means every whole chunk of the data.
	Chunks int `json:"chunks,omitempty"`
	// Batch is the tokens per forward pass; default min(512, ChunkSize). A MUL_MAT whose pass holds fewer
	// than 16 tokens is not collected (llama-imatrix's rule), so a chunk size that is a multiple of the batch
	// loses nothing.
	Batch int `json:"batch,omitempty"`
	// ProcessOutput collects output.weight too (llama-imatrix --process-output).
	ProcessOutput bool `json:"process_output,omitempty"`
	// SaveEvery writes the statistics so far to Out+".partial" every SaveEvery chunks (llama-imatrix
	// --output-frequency); default 10, negative never.
	SaveEvery int `json:"save_every,omitempty"`
	// Resume continues from Out+".partial" when it was written for the same model, data and options.
	Resume bool `json:"resume,omitempty"`
	// Load loads the model; required.
	Load Loader `json:"-"`
}

// Validate checks the options without touching files.
func (o Options) Validate() error {
	switch {
	case o.Model == "":
		return errors.New("imatrix: no model")
	case o.Data == "":
		return errors.New("imatrix: no calibration data")
	case o.Out == "":
		return errors.New("imatrix: no output path")
	case o.Load == nil:
		return errors.New("imatrix: no model loader")
	case o.ChunkSize < 0 || o.Chunks < 0 || o.Batch < 0:
		return fmt.Errorf("imatrix: negative chunk size %d, chunk count %d or batch %d", o.ChunkSize, o.Chunks, o.Batch)
	case o.ChunkSize > 0 && o.ChunkSize < 2:
		return fmt.Errorf("imatrix: chunk size %d too small", o.ChunkSize)
	}
	switch o.Format {
	case "", imatrix.FormatGGUF, imatrix.FormatDat:
	default:
		return fmt.Errorf("imatrix: unknown format %q", o.Format)
	}
	return nil
}

func (o Options) dataName() string {
	if o.DataName != "" {
		return o.DataName
	}
	return o.Data
}

// Result is what a calibration run produced.
type Result struct {
	Model     string `json:"model"`
	Data      string `json:"data"`
	Format    string `json:"format"`
	Records   int    `json:"records"`
	Tokens    int    `json:"tokens"`     // tokens of the whole data set
	ChunkSize int    `json:"chunk_size"` // tokens per chunk
	Chunks    int    `json:"chunks"`     // chunks in the output (resumed ones included)
	Resumed   int    `json:"resumed,omitempty"`
	Entries   int    `json:"entries"`
	// Partial lists the expert stacks some of whose experts no token reached (their importance is 1).
	Partial   []string            `json:"partial,omitempty"`
	Seconds   float64             `json:"seconds"`
	TokensSec float64             `json:"tokens_per_second"`
	Artifacts []pipeline.Artifact `json:"artifacts"`
}

// resumeKey is the metadata key of a partial file that says what it was computed from.
const resumeKey = "phonellm.imatrix.resume"

// Run computes the importance matrix of o.Model on o.Data: it tokenizes the data with the model's tokenizer
// (rendering chat records through its template with Chat), cuts the tokens into chunks of ChunkSize (the
// tokens after the last whole chunk are not used, as in llama-imatrix; when the model's vocabulary adds a BOS
// token, each chunk's first token is replaced by it), evaluates every chunk from an empty context, and
// accumulates the statistics of every weight product. Progress (tokens, with an ETA) goes to rep. The output
// is written atomically; a partial file next to it is refreshed every SaveEvery chunks and removed at the end.
func Run(ctx context.Context, o Options, rep pipeline.Reporter) (Result, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.Batch == 0 {
		o.Batch = min(512, o.ChunkSize)
	}
	o.Batch = min(o.Batch, o.ChunkSize)
	if o.SaveEvery == 0 {
		o.SaveEvery = DefaultSaveEvery
	}
	if o.Format == "" {
		o.Format = imatrix.FormatGGUF
	}
	begin := time.Now()
	res := Result{Model: o.Model, Data: o.Data, Format: string(o.Format), ChunkSize: o.ChunkSize}

	toks, records, bos, err := tokenize(ctx, o)
	if err != nil {
		return res, err
	}
	res.Records, res.Tokens = records, len(toks)
	n := len(toks) / o.ChunkSize
	if o.Chunks > 0 {
		n = min(n, o.Chunks)
	}
	if n == 0 {
		return res, pipeline.InputError(fmt.Errorf("imatrix: %s makes %d tokens, fewer than one chunk of %d (use a smaller --chunk-size or more data)",
			o.Data, len(toks), o.ChunkSize))
	}
	key, err := runKey(o)
	if err != nil {
		return res, err
	}

	col := imatrix.NewCollector()
	col.ProcessOutput = o.ProcessOutput
	partial := o.Out + ".partial"
	done := 0
	if o.Resume {
		if done, err = resume(partial, key, o, col); err != nil {
			return res, err
		}
		if done > 0 {
			rep.Note(pipeline.Info, fmt.Sprintf("resuming from %s: %d of %d chunks done", partial, done, n))
		}
		res.Resumed = min(done, n)
	} else if _, err := os.Stat(partial); err == nil {
		rep.Note(pipeline.Warn, fmt.Sprintf("%s exists; starting over (--resume continues it)", partial))
	}

	if done < n {
		m, err := o.Load(ctx, o.Model, o.ChunkSize, o.Batch)
		if err != nil {
			return res, fmt.Errorf("imatrix: load %s: %w", o.Model, err)
		}
		defer m.Close()
		const step = "imatrix"
		pipeline.BeginItems(rep, step, int64((n-done)*o.ChunkSize), "tokens")
		chunk := make([]int32, o.ChunkSize)
		for i := done; i < n; i++ {
			copy(chunk, toks[i*o.ChunkSize:(i+1)*o.ChunkSize])
			if bos >= 0 {
				chunk[0] = bos
			}
			err := m.Observe(ctx, chunk, col.Wants, col.Observe)
			if err != nil {
				rep.End(step, err)
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				return res, fmt.Errorf("imatrix: chunk %d: %w", i+1, err)
			}
			rep.Add(int64(o.ChunkSize))
			if o.SaveEvery > 0 && (i+1)%o.SaveEvery == 0 && i+1 < n {
				if err := save(partial, col, o, i+1, key); err != nil {
					rep.End(step, err)
					return res, err
				}
			}
		}
		rep.End(step, nil)
	}

	mat := col.Matrix([]string{o.dataName()}, n, o.ChunkSize, false)
	if len(mat.Entries) == 0 {
		return res, errors.New("imatrix: the model computed no product with a weight that could be collected")
	}
	for _, e := range mat.Entries {
		if e.Matrices() > 1 && slices.Contains(e.Counts, 0) {
			res.Partial = append(res.Partial, e.Name)
		}
	}
	if len(res.Partial) > 0 {
		rep.Note(pipeline.Warn, fmt.Sprintf("%d expert tensors have experts no calibration token reached (their importance is 1): %s",
			len(res.Partial), strings.Join(res.Partial[:min(3, len(res.Partial))], ", ")))
	}
	art, skipped, err := imatrix.WriteFile(o.Out, mat, o.Format)
	if err != nil {
		return res, err
	}
	if len(skipped) > 0 {
		rep.Note(pipeline.Warn, fmt.Sprintf("the legacy format stores only %d of %d entries (no data for %s)",
			len(mat.Entries)-len(skipped), len(mat.Entries), strings.Join(skipped, ", ")))
	}
	if err := os.Remove(partial); err != nil && !errors.Is(err, fs.ErrNotExist) {
		rep.Note(pipeline.Warn, fmt.Sprintf("could not remove %s: %v", partial, err))
	}
	res.Chunks, res.Entries = n, len(mat.Entries)-len(skipped)
	res.Artifacts = []pipeline.Artifact{art}
	res.Seconds = time.Since(begin).Seconds()
	if res.Seconds > 0 {
		res.TokensSec = float64((n-res.Resumed)*o.ChunkSize) / res.Seconds
	}
	return res, nil
}

// tokenize reads and tokenizes the calibration data with the model's own tokenizer and chat template. bos is
// the token every chunk starts with when the vocabulary asks for a BOS token (tokenizer.ggml.add_bos_token;
// llama-imatrix then replaces each chunk's first token with it), -1 otherwise.
func tokenize(ctx context.Context, o Options) (toks []int32, records int, bos int32, err error) {
	bos = -1
	f, err := gguf.OpenFile(o.Model)
	if err != nil {
		return nil, 0, bos, fmt.Errorf("imatrix: %w", err)
	}
	defer f.Close()
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, 0, bos, fmt.Errorf("imatrix: %w", err)
	}
	prompts, err := eval.ReadPrompts(o.Data)
	if err != nil {
		return nil, 0, bos, err
	}
	var tmpl *engine.ChatTemplate
	for i, p := range prompts {
		text, special := p.Text, o.ParseSpecial
		if o.Chat || len(p.Messages) > 0 {
			if tmpl == nil {
				tmpl, err = engine.NewChatTemplate(f.String("tokenizer.chat_template"), tokenText(tk, tk.BOS()), tokenText(tk, firstOr(tk.EOS(), -1)))
				if err != nil {
					return nil, 0, bos, pipeline.InputError(fmt.Errorf("imatrix: %s: %w", o.Model, err))
				}
			}
			msgs := p.Messages
			if len(msgs) == 0 {
				msgs = []engine.Message{{Role: "user", Content: p.Text}}
			}
			gen := msgs[len(msgs)-1].Role != "assistant"
			if text, err = tmpl.Render(ctx, msgs, engine.TemplateOptions{AddGenerationPrompt: gen}); err != nil {
				return nil, 0, bos, pipeline.InputError(fmt.Errorf("imatrix: %s record %d: chat template: %w", o.Data, i+1, err))
			}
			special = true
		}
		ids, err := tk.Encode(ctx, text, tokenizer.Options{ParseSpecial: special})
		if err != nil {
			return nil, 0, bos, fmt.Errorf("imatrix: %s record %d: %w", o.Data, i+1, err)
		}
		toks = append(toks, ids...)
	}
	if v, ok := f.KV("tokenizer.ggml.add_bos_token"); ok && v.V == true && tk.BOS() >= 0 {
		bos = tk.BOS()
	}
	return toks, len(prompts), bos, nil
}

func firstOr(v []int32, d int32) int32 {
	if len(v) > 0 {
		return v[0]
	}
	return d
}

func tokenText(tk *tokenizer.Tokenizer, id int32) string {
	if id < 0 || int(id) >= tk.Len() {
		return ""
	}
	return tk.Token(id)
}

// runKey fingerprints what the statistics depend on: the model file (name, size, modification time), the
// data's sha256 and the options that change which tokens are evaluated and collected.
func runKey(o Options) (string, error) {
	st, err := os.Stat(o.Model)
	if err != nil {
		return "", fmt.Errorf("imatrix: %w", err)
	}
	_, dataSum, err := fsx.HashFile(o.Data)
	if err != nil {
		return "", fmt.Errorf("imatrix: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "model %s %d %d\ndata %s\nchunk %d batch %d chat %v special %v output %v\n",
		filepath.Base(o.Model), st.Size(), st.ModTime().UnixNano(), dataSum, o.ChunkSize, o.Batch, o.Chat, o.ParseSpecial, o.ProcessOutput)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// save writes the statistics of the first chunks chunks to path (atomically), with the run's key.
func save(path string, col *imatrix.Collector, o Options, chunks int, key string) error {
	m := col.Matrix([]string{o.dataName()}, chunks, o.ChunkSize, true)
	m.Meta = map[string]string{resumeKey: key}
	_, _, err := imatrix.WriteFile(path, m, imatrix.FormatGGUF)
	return err
}

// resume loads a partial file written by an identical run into col and returns the chunks it covers; 0
// when there is none.
func resume(path, key string, o Options, col *imatrix.Collector) (int, error) {
	m, err := imatrix.Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if m.Meta[resumeKey] != key || m.ChunkSize != o.ChunkSize {
		return 0, pipeline.InputError(fmt.Errorf("imatrix: %s was computed from another model, data set or options; remove it or run without --resume", path))
	}
	if err := col.Add(m, path); err != nil {
		return 0, err
	}
	return m.ChunkCount, nil
}
