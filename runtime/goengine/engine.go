package goengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model"
	"github.com/ollama/ollama/model/input"
	ollamatok "github.com/ollama/ollama/tokenizer"

	// The ggml backend registers itself as "ggml"; the model packages
	// register the architectures this engine serves.
	_ "github.com/ollama/ollama/ml/backend/ggml"
	_ "github.com/ollama/ollama/model/models/qwen2"
	_ "github.com/ollama/ollama/model/models/qwen3"
	_ "github.com/ollama/ollama/model/models/qwen3next"

	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/goengine/internal/repack"
)

// Architectures lists the general.architecture values this engine runs: those package modelcheck validates
// (Ollama's engine also registers qwen3next, whose legacy fused layouts phonellm neither writes nor checks).
var Architectures = modelcheck.Architectures

// Options configure Load. The zero value (plus Path) is usable.
type Options struct {
	// Path of the GGUF file.
	Path string
	// ID is the model name served; default: file name without ".gguf".
	ID string
	// Threads for the CPU backend; 0 means engine.NumCPU().
	Threads int
	// Parallel is the number of slots (concurrent sequences); default 1.
	Parallel int
	// ContextLength is the per-slot context; 0 means min(4096, the model's).
	ContextLength int
	// BatchSize bounds the tokens evaluated in one forward pass (summed over
	// all slots); default 512, at most ContextLength.
	BatchSize int
	// KVCacheType is "f16" (default), "q8_0", "q4_0", or "f32" (exact comparisons in tests). The quantized types
	// need FlashAttention: without it Ollama's engine stores V transposed, one value per row, which a
	// block-quantized tensor cannot hold (ggml aborts), and their key and value head sizes must be multiples of
	// the 32-value block.
	KVCacheType string
	// FlashAttention enables the fused attention kernel.
	FlashAttention bool
	// NoRepack keeps quantized matrices in ggml's plain block layout instead
	// of the interleaved layouts of ggml-cpu's GEMM kernels (see package
	// repack); the output is the same, prompts are slower.
	NoRepack bool
}

// Validate checks o.
func (o Options) Validate() error {
	switch {
	case o.Path == "":
		return errors.New("goengine: no model path")
	case o.Threads < 0, o.Parallel < 0, o.ContextLength < 0, o.BatchSize < 0:
		return fmt.Errorf("goengine: negative threads/parallel/context/batch: %+v", o)
	case o.Parallel > 64:
		return fmt.Errorf("goengine: parallel %d above 64", o.Parallel)
	}
	switch o.KVCacheType {
	case "", "f16", "q8_0", "q4_0", "f32":
	default:
		return fmt.Errorf("goengine: kv cache type %q: want f16, q8_0, q4_0 or f32", o.KVCacheType)
	}
	if quantizedKV(o.KVCacheType) && !o.FlashAttention {
		return &OptionsError{Msg: fmt.Sprintf("goengine: kv cache type %s needs flash attention (Ollama's engine keeps V transposed without it, which a quantized cache cannot hold)", o.KVCacheType)}
	}
	return nil
}

func quantizedKV(t string) bool { return t == "q8_0" || t == "q4_0" }

// OptionsError reports engine options that cannot work together.
type OptionsError struct{ Msg string }

func (e *OptionsError) Error() string { return e.Msg }

// InputError classifies the error (pipeline.IsInputError).
func (e *OptionsError) InputError() bool { return true }

// Engine is a engine.Engine over Ollama's Go engine.
type Engine struct {
	m       model.Model
	tk      *tokenizer.Tokenizer  // text <-> ids (Ollama's model tokenizer is not used)
	vocab   *ollamatok.Vocabulary // the model's vocabulary as Ollama read it
	cache   kvcache.Cache
	tmpl    *engine.ChatTemplate
	info    engine.ModelInfo
	eog     map[int32]bool
	control []bool
	numCtx  int
	batch   int

	mu       sync.Mutex
	cond     *sync.Cond
	incoming []*sequence
	closed   bool
	sem      chan struct{}
	loopDone chan struct{}

	// Owned by the loop goroutine.
	slots     []*slot
	next      int
	recurrent bool // the cache keeps recurrent state (qwen35): see plan

	packed   *repack.Packed // repack buffer of the weights, freed after the backend
	repacked repack.Stats

	vocabOnce sync.Once
	constrain *engine.Vocabulary // for constraints: see vocabulary
}

var _ engine.Engine = (*Engine)(nil)

// Load reads the GGUF at o.Path, allocates the KV cache and the compute
// graph, loads the weights and starts the decode loop.
func Load(ctx context.Context, o Options) (e *Engine, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	// The metadata is read once for the checks and the tokenizer, before any weights are loaded.
	f, err := gguf.OpenFile(o.Path)
	if err != nil {
		return nil, fmt.Errorf("goengine: %w", err)
	}
	arch, train, err := precheck(f, o.KVCacheType)
	if err != nil {
		f.Close()
		return nil, err
	}
	// The vocabulary is checked before any weights are loaded: a hostile one is refused by name.
	tk, err := loadTokenizer(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	if o.Threads == 0 {
		o.Threads = runtime.NumCPU()
	}
	if o.Parallel == 0 {
		o.Parallel = 1
	}
	if o.ContextLength == 0 {
		o.ContextLength = 4096
		if train > 0 && train < o.ContextLength {
			o.ContextLength = train
		}
	}
	if o.BatchSize == 0 {
		o.BatchSize = 512
	}
	o.BatchSize = min(o.BatchSize, o.ContextLength)
	if o.ID == "" {
		o.ID = strings.TrimSuffix(filepath.Base(o.Path), ".gguf")
	}

	// ggml reports allocation failures by panicking.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("goengine: load %s: %v", o.Path, r)
			if e != nil && e.m != nil {
				e.m.Backend().Close()
			}
			e = nil
		}
	}()

	ggmlMu.Lock()
	defer ggmlMu.Unlock()
	fa := ml.FlashAttentionDisabled
	if o.FlashAttention {
		fa = ml.FlashAttentionEnabled
	}
	m, err := model.New(o.Path, ml.BackendParams{AllocMemory: true, NumThreads: o.Threads, FlashAttention: fa})
	if err != nil {
		return nil, fmt.Errorf("goengine: load %s: %w", o.Path, err)
	}
	e = &Engine{m: m, tk: tk, numCtx: o.ContextLength, batch: o.BatchSize}
	tok, ok := m.(ollamatok.Tokenizer)
	if !ok {
		m.Backend().Close()
		return nil, &engine.UnsupportedError{Path: o.Path, Reason: "model has no tokenizer"}
	}
	e.vocab = tok.Vocabulary()
	if len(e.vocab.Values) != tk.Len() {
		m.Backend().Close()
		return nil, fmt.Errorf("goengine: %s: the engine read %d tokens, the tokenizer %d", o.Path, len(e.vocab.Values), tk.Len())
	}
	e.cache = m.Config().Cache
	if e.cache == nil {
		m.Backend().Close()
		return nil, &engine.UnsupportedError{Path: o.Path, Reason: "architecture " + arch + " has no KV cache"}
	}
	_, e.recurrent = e.cache.(kvcache.CheckpointCache)
	e.cache.Init(m.Backend(), kvDType(o.KVCacheType), o.Parallel, o.ContextLength, o.BatchSize)
	if err := e.reserve(o.BatchSize, o.Parallel); err != nil {
		e.closeModel()
		return nil, fmt.Errorf("goengine: reserve prompt graph: %w", err)
	}
	if err := e.reserve(1, o.Parallel); err != nil {
		e.closeModel()
		return nil, fmt.Errorf("goengine: reserve decode graph: %w", err)
	}
	if err := m.Backend().Load(ctx, func(float32) {}); err != nil {
		e.closeModel()
		return nil, fmt.Errorf("goengine: load weights of %s: %w", o.Path, err)
	}
	if pl, ok := m.(model.PostLoader); ok {
		if err := pl.PostLoad(); err != nil {
			e.closeModel()
			return nil, fmt.Errorf("goengine: finish loading %s: %w", o.Path, err)
		}
	}
	if !o.NoRepack {
		e.packed, e.repacked, err = repack.Model(m.Backend())
		if err != nil {
			// The plain layout computes the same thing, only slower.
			slog.Warn("goengine: weights keep the plain layout", "model", o.Path, "error", err)
		}
	}

	e.setupVocab()
	cfg := m.Backend().Config()
	src := cfg.String("tokenizer.chat_template")
	e.tmpl, err = engine.NewChatTemplate(src, e.tokenText(e.vocab.BOS), e.tokenText(e.vocab.EOS))
	if err != nil {
		e.closeModel()
		return nil, fmt.Errorf("goengine: %s: %w", o.Path, err)
	}
	e.info = engine.ModelInfo{
		ID: o.ID, Path: o.Path, Architecture: arch, Engine: "goengine",
		ContextLength: o.ContextLength, TrainContextLength: train, Parallel: o.Parallel,
		Threads: o.Threads, BatchSize: o.BatchSize, VocabSize: len(e.vocab.Values),
		HasChatTemplate: src != "", RepackedTensors: e.repacked.Tensors, ResumesAtCheckpoints: e.recurrent,
	}
	e.cond = sync.NewCond(&e.mu)
	e.sem = make(chan struct{}, o.Parallel)
	e.slots = make([]*slot, o.Parallel)
	for i := range e.slots {
		e.slots[i] = &slot{id: i}
		if e.recurrent {
			e.slots[i].ck = newCkStore(ollamaRule)
		}
	}
	e.loopDone = make(chan struct{})
	// Loading's garbage (the repack scratch copy of the largest matrix, the metadata decoded twice) goes back
	// to the system now rather than whenever the scavenger gets to it: what serve holds after loading is the
	// model, not a timing of the collector (pipeline/fit/rsscheck).
	debug.FreeOSMemory()
	go e.loop()
	return e, nil
}

// precheck validates the file before any of it reaches ggml: package modelcheck's checks (hyper-parameters
// consistent with the tensor shapes, supported types, vocabulary within the embedding, finite norms) plus what
// this engine cannot run (an MTP block; a quantized KV cache with heads that are not whole blocks). Ollama's
// loader and ggml assert (abort the process) or panic on files that fail them. It returns the architecture
// and the training context.
func precheck(f *gguf.File, kvType string) (arch string, trainCtx int, err error) {
	// SkipTokenizer: loadTokenizer builds (and so checks) the vocabulary right after.
	if err := modelcheck.CheckFile(f, modelcheck.Options{Serve: true, KVCacheType: kvType, SkipTokenizer: true}); err != nil {
		return "", 0, err
	}
	// A chat template that does not compile is the file's fault too (exit 3, not a failure of the engine).
	if src := f.String("tokenizer.chat_template"); src != "" {
		if _, err := engine.NewChatTemplate(src, "", ""); err != nil {
			return "", 0, &modelcheck.Error{File: f.Name, Problems: []modelcheck.Problem{{Key: "tokenizer.chat_template", Msg: err.Error()}}}
		}
	}
	arch = f.Architecture()
	if n, ok := f.Uint(arch + ".context_length"); ok && n <= math.MaxInt32 {
		trainCtx = int(n)
	}
	return arch, trainCtx, nil
}

// loadTokenizer builds the tokenizer from the file's tokenizer.ggml.* keys.
func loadTokenizer(f *gguf.File) (*tokenizer.Tokenizer, error) {
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("goengine: %w", err)
	}
	return tk, nil
}

func kvDType(s string) ml.DType {
	switch s {
	case "q8_0":
		return ml.DTypeQ80
	case "q4_0":
		return ml.DTypeQ40
	case "f32":
		return ml.DTypeF32
	}
	return ml.DTypeF16
}

// reserve sizes the compute buffers for the worst-case graph of n tokens,
// as ollamarunner's reserveWorstCaseGraph does.
func (e *Engine) reserve(n, parallel int) error {
	ctx := e.m.Backend().NewContext()
	defer ctx.Close()
	toks := make([]int32, n)
	b := input.Batch{Positions: make([]int32, n), Sequences: make([]int, n)}
	for i := range b.Positions {
		b.Positions[i] = int32(i)
	}
	b.Inputs = ctx.Input().FromInts(toks, n)
	b.Outputs = ctx.Input().Empty(ml.DTypeI32, parallel)
	if err := e.cache.StartForward(ctx, b, true); err != nil {
		return err
	}
	t, err := e.m.Forward(ctx, b)
	if err != nil {
		return err
	}
	ctx.SetBatchSize(n)
	ctx.Forward(t).Reserve()
	return nil
}

// eogNames are end-of-generation token texts llama.cpp adds to its EOG set
// (src/llama-vocab.cpp, special_eog_ids).
var eogNames = map[string]bool{
	"<|eot_id|>": true, "<|im_end|>": true, "<|end|>": true, "<end_of_turn>": true,
	"<|endoftext|>": true, "<|eom_id|>": true, "<EOT>": true, "<|end_of_text|>": true,
}

// eogAnyType are EOG texts llama.cpp stops on whatever their token type: Qwen's tokenizer.json marks the FIM
// and repo tokens special:false, so they are not CONTROL in the GGUF, yet llama.cpp adds them to
// special_eog_ids and treats them as control (their text is hidden).
var eogAnyType = map[string]bool{"<|fim_pad|>": true, "<|repo_name|>": true, "<|file_sep|>": true}

func (e *Engine) setupVocab() {
	e.eog = map[int32]bool{}
	for _, id := range e.tk.EOS() {
		e.eog[id] = true
	}
	n := e.tk.Len()
	e.control = make([]bool, n)
	for i := range n {
		id := int32(i)
		text := e.tk.Token(id)
		if e.tk.Type(id) == tokenizer.Control {
			e.control[i] = true
			if eogNames[text] {
				e.eog[id] = true
			}
		}
		if eogAnyType[text] {
			e.control[i] = true
			e.eog[id] = true
		}
	}
}

// Vocabulary describes the model's tokens (for constraints and
// log-probabilities; built on first use): each token's piece is exactly what
// the engine emits for it, so a grammar sees the text the client gets.
func (e *Engine) Vocabulary() *engine.Vocabulary { return e.vocabulary() }

func (e *Engine) vocabulary() *engine.Vocabulary {
	e.vocabOnce.Do(func() {
		toks := make([]engine.VocabToken, e.tk.Len())
		for i := range toks {
			id := int32(i)
			toks[i] = engine.VocabToken{Piece: e.piece(id), Text: e.tk.Token(id), EOG: e.eog[id]}
		}
		e.constrain = engine.NewVocabulary(toks)
	})
	return e.constrain
}

func (e *Engine) tokenText(ids []int32) string {
	if len(ids) == 0 || ids[0] < 0 || int(ids[0]) >= len(e.vocab.Values) {
		return ""
	}
	return e.vocab.Values[ids[0]]
}

// Info implements engine.Engine.
func (e *Engine) Info() engine.ModelInfo { return e.info }

// tokenizeSlack is how many contexts' worth of text Tokenize tokenizes in full: a prompt somewhat longer
// than the context gets its exact length (for OpenAI's context_length_exceeded message), while the work a
// request can cause stays a small multiple of what the context can hold.
const tokenizeSlack = 4

// Tokenize implements engine.Engine. Special tokens in the text are parsed. Text that makes more than
// tokenizeSlack contexts of tokens is refused with a *tokenizer.LimitError as soon as that is known —
// before tokenizing at all when its length in bytes shows it — and tokenization stops with ctx.
func (e *Engine) Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error) {
	limit := tokenizeSlack * e.numCtx
	ids, err := e.tk.Encode(ctx, text, tokenizer.Options{
		AddSpecial:    addSpecial,
		ParseSpecial:  true,
		MaxTokens:     limit,
		MaxInputBytes: limit * e.tk.MaxBytesPerToken(),
	})
	if err != nil {
		return nil, fmt.Errorf("goengine: tokenize: %w", err)
	}
	return ids, nil
}

// Detokenize implements engine.Engine. Control tokens are rendered as
// their text.
func (e *Engine) Detokenize(tokens []int32) (string, error) {
	s, err := e.tk.Decode(tokens)
	if err != nil {
		return "", fmt.Errorf("goengine: detokenize: %w", err)
	}
	return s, nil
}

// piece is the visible text of a generated token: control tokens render
// as nothing (llama-server's default). It may be part of a UTF-8
// character; the request's TextStream holds such bytes back.
func (e *Engine) piece(t int32) string {
	if t < 0 || int(t) >= len(e.control) || e.control[t] {
		return ""
	}
	return e.tk.Piece(t)
}

// ApplyChatTemplate implements engine.Engine.
func (e *Engine) ApplyChatTemplate(ctx context.Context, messages []engine.Message, opts engine.TemplateOptions) (string, error) {
	return e.tmpl.Render(ctx, messages, opts)
}

// Close implements engine.Engine: it fails queued and running requests
// with engine.ErrClosed, stops the loop and frees the model.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.cond.Broadcast()
	e.mu.Unlock()
	<-e.loopDone
	ggmlMu.Lock()
	defer ggmlMu.Unlock()
	e.closeModel()
	return nil
}

func (e *Engine) closeModel() {
	if e.cache != nil {
		e.cache.Close()
	}
	e.m.Backend().Close()
	e.packed.Free()
}
