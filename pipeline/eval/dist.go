package eval

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/runtime/engine"
)

// defaultQueue is the number of reference logit rows that may wait for the candidate.
const defaultQueue = 8

// DistOptions configure the distribution check.
type DistOptions struct {
	// Reference and Candidate are GGUF paths, loaded with Load.
	Reference string `json:"reference"`
	Candidate string `json:"candidate"`
	// Prompts is a prompt set (see ReadPrompts).
	Prompts string `json:"prompts"`
	// Load loads a model; required when Reference is set (the CLI passes the Go engine's loader).
	Load Loader `json:"-"`
	// Window is the number of tokens evaluated from an empty context at once; a longer prompt is split into
	// consecutive windows, as llama-perplexity splits its text into chunks. 0 means the smaller context
	// length of the two models.
	Window int `json:"window,omitempty"`
	// MaxTokens stops after this many positions in all; 0 means the whole prompt set.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Queue is the number of reference rows (full-vocabulary logits) that may wait for the candidate;
	// default 8. Memory holds Queue+1 rows besides each engine's own chunk.
	Queue int `json:"-"`
}

// Validate checks o without touching files.
func (o DistOptions) Validate() error {
	switch {
	case o.Reference == "" || o.Candidate == "":
		return errors.New("eval: distribution check needs a reference and a candidate model")
	case o.Prompts == "":
		return errors.New("eval: distribution check needs a prompt set")
	case o.Load == nil:
		return errors.New("eval: distribution check has no model loader")
	case o.Window < 0, o.MaxTokens < 0, o.Queue < 0:
		return fmt.Errorf("eval: negative window %d, max tokens %d or queue %d", o.Window, o.MaxTokens, o.Queue)
	}
	return nil
}

// DistResult is the outcome of the distribution check. KL divergences are in nats.
type DistResult struct {
	Reference string `json:"reference"`
	Candidate string `json:"candidate"`
	Prompts   int    `json:"prompts"`
	Windows   int    `json:"windows"`
	Window    int    `json:"window"`
	// Positions is the number of compared next-token distributions (every evaluated position);
	// PredictedTokens those whose next token is in the window (the perplexity's tokens).
	Positions       int     `json:"positions"`
	PredictedTokens int     `json:"predicted_tokens"`
	MeanKLD         float64 `json:"mean_kld"`
	MedianKLD       float64 `json:"median_kld"`
	P99KLD          float64 `json:"p99_kld"`
	MaxKLD          float64 `json:"max_kld"`
	// Top1 is the fraction of positions where both models' most likely token is the same.
	Top1 float64 `json:"top1"`
	// RMSDeltaTop is the RMS over positions of P_cand − P_ref of the reference's most likely token
	// (llama-perplexity's "RMS Δp").
	RMSDeltaTop  float64 `json:"rms_delta_p"`
	PPLReference float64 `json:"ppl_reference"`
	PPLCandidate float64 `json:"ppl_candidate"`
	// NonFinite counts the positions where the candidate's logits hold a NaN or an infinity (a broken
	// model): they are left out of every figure above, and any of them fails the gate. FirstNonFinite says
	// where the first one is.
	NonFinite      int     `json:"non_finite_positions,omitempty"`
	FirstNonFinite string  `json:"first_non_finite,omitempty"`
	Seconds        float64 `json:"seconds"`
}

// Distributions loads o.Reference and o.Candidate, reads o.Prompts and compares the two models on them. A
// candidate that is the reference (CheckCandidate) is refused; one that is not quantized is compared with a
// warning.
func Distributions(ctx context.Context, o DistOptions, rep pipeline.Reporter) (DistResult, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := o.Validate(); err != nil {
		return DistResult{}, err
	}
	if err := CheckCandidate(o.Reference, o.Candidate); err != nil {
		return DistResult{}, err
	}
	if ft, q, err := ModelType(o.Candidate); err == nil && !q {
		rep.Note(pipeline.Warn, fmt.Sprintf("the candidate %s is %s, not quantized: the gate then measures two float models", o.Candidate, typeName(ft)))
	}
	prompts, err := ReadPrompts(o.Prompts)
	if err != nil {
		return DistResult{}, err
	}
	ref, err := o.Load(ctx, o.Reference)
	if err != nil {
		return DistResult{}, fmt.Errorf("eval: load reference: %w", err)
	}
	defer ref.Close()
	cand, err := o.Load(ctx, o.Candidate)
	if err != nil {
		return DistResult{}, fmt.Errorf("eval: load candidate: %w", err)
	}
	defer cand.Close()
	r, err := CompareDistributions(ctx, ref, cand, prompts, o, rep)
	r.Reference, r.Candidate = o.Reference, o.Candidate
	return r, err
}

// CompareDistributions compares ref and cand on prompts (o's paths and Load are not used). Both models see
// the reference tokenizer's tokens; the candidate's tokenizer must agree.
func CompareDistributions(ctx context.Context, ref, cand LogitModel, prompts []Prompt, o DistOptions, rep pipeline.Reporter) (DistResult, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	begin := time.Now()
	ri, ci := ref.Info(), cand.Info()
	if ri.VocabSize != ci.VocabSize {
		return DistResult{}, fmt.Errorf("eval: reference vocabulary has %d tokens, candidate %d: not the same model", ri.VocabSize, ci.VocabSize)
	}
	window := o.Window
	if window == 0 {
		window = min(ri.ContextLength, ci.ContextLength)
	}
	if window <= 0 {
		return DistResult{}, fmt.Errorf("eval: no usable window (context lengths %d and %d)", ri.ContextLength, ci.ContextLength)
	}
	queue := o.Queue
	if queue == 0 {
		queue = defaultQueue
	}

	seqs := make([][]int32, 0, len(prompts))
	total := 0
	for i, p := range prompts {
		toks, err := promptTokens(ctx, ref, p)
		if err != nil {
			return DistResult{}, fmt.Errorf("eval: prompt %d: reference: %w", i+1, err)
		}
		ct, err := promptTokens(ctx, cand, p)
		if err != nil {
			return DistResult{}, fmt.Errorf("eval: prompt %d: candidate: %w", i+1, err)
		}
		if !slices.Equal(toks, ct) {
			return DistResult{}, fmt.Errorf("eval: prompt %d: the reference and candidate tokenizers disagree (%d and %d tokens)", i+1, len(toks), len(ct))
		}
		if o.MaxTokens > 0 && total+len(toks) > o.MaxTokens {
			toks = toks[:o.MaxTokens-total]
		}
		if len(toks) > 0 {
			seqs = append(seqs, toks)
		}
		total += len(toks)
	}
	if total == 0 {
		return DistResult{}, errors.New("eval: the prompts have no tokens")
	}

	res := DistResult{Prompts: len(prompts), Window: window}
	var acc accumulator
	free := make(chan []float32, queue+1)
	for range queue + 1 {
		free <- nil
	}
	const step = "distribution"
	pipeline.BeginItems(rep, step, int64(total), "tokens")
	var err error
	for i, toks := range seqs {
		for start := 0; start < len(toks) && err == nil; start += window {
			w := toks[start:min(start+window, len(toks))]
			if err = lockstep(ctx, ref, cand, w, i+1, start, free, &acc, rep); err != nil {
				err = fmt.Errorf("eval: prompt %d, tokens %d-%d: %w", i+1, start, start+len(w), err)
			}
			res.Windows++
		}
		if err != nil {
			break
		}
	}
	rep.End(step, err)
	if err != nil {
		return DistResult{}, err
	}
	acc.fill(&res)
	res.Seconds = time.Since(begin).Seconds()
	return res, nil
}

func promptTokens(ctx context.Context, m LogitModel, p Prompt) ([]int32, error) {
	text := p.Text
	if len(p.Messages) > 0 {
		var err error
		text, err = m.ApplyChatTemplate(ctx, p.Messages, engine.TemplateOptions{AddGenerationPrompt: true})
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
	}
	return m.Tokenize(ctx, text, true)
}

// sameModel reports whether a and b are the same model value.
func sameModel(a, b LogitModel) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

type row struct {
	pos    int
	logits []float32
}

// lockstep evaluates toks on both models at once: the reference's rows wait in a queue bounded by the free
// buffers until the candidate's callback for the same position compares them. A candidate row that is not
// finite is counted (DistResult.NonFinite), not an error.
// prompt and start (1-based prompt number, offset of toks in it) only locate positions in messages.
func lockstep(ctx context.Context, ref, cand LogitModel, toks []int32, prompt, start int, free chan []float32, acc *accumulator, rep pipeline.Reporter) error {
	if sameModel(ref, cand) {
		// One model cannot run twice at once (the Go engine takes itself for a Logits call): compare each row
		// with itself.
		return ref.Logits(ctx, toks, func(pos int, l []float32) error {
			next := int32(-1)
			if pos+1 < len(toks) {
				next = toks[pos+1]
			}
			s, err := compareRow(l, l, next, &acc.scratch)
			if err != nil {
				return fmt.Errorf("position %d: %w", pos, err)
			}
			acc.add(s)
			rep.Add(1)
			return nil
		})
	}
	g, gctx := errgroup.WithContext(ctx)
	rows := make(chan row, cap(free))
	g.Go(func() error {
		defer close(rows)
		err := ref.Logits(gctx, toks, func(pos int, l []float32) error {
			var b []float32
			select {
			case b = <-free:
			case <-gctx.Done():
				return gctx.Err()
			}
			b = append(b[:0], l...)
			rows <- row{pos, b} // never blocks: rows holds as many as there are buffers
			return nil
		})
		if err != nil {
			return fmt.Errorf("reference: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		n := 0
		err := cand.Logits(gctx, toks, func(pos int, lc []float32) error {
			var r row
			var ok bool
			select {
			case r, ok = <-rows:
			case <-gctx.Done():
				return gctx.Err()
			}
			if !ok {
				return fmt.Errorf("reference stopped after %d positions", n)
			}
			defer func() { free <- r.logits }()
			if r.pos != pos || pos != n {
				return fmt.Errorf("position %d from the reference, %d from the candidate, %d expected", r.pos, pos, n)
			}
			next := int32(-1)
			if pos+1 < len(toks) {
				next = toks[pos+1]
			}
			s, err := compareRow(r.logits, lc, next, &acc.scratch)
			switch {
			case errors.Is(err, errCandidateNotFinite):
				acc.nonFinite(prompt, start+pos, err)
			case err != nil:
				return fmt.Errorf("position %d: %w", pos, err)
			default:
				acc.add(s)
			}
			rep.Add(1)
			n++
			return nil
		})
		if err != nil {
			return fmt.Errorf("candidate: %w", err)
		}
		extra := 0
		for r := range rows {
			extra++
			free <- r.logits
		}
		if n != len(toks) || extra > 0 {
			return fmt.Errorf("%d tokens: the candidate gave %d positions, the reference %d", len(toks), n, n+extra)
		}
		return nil
	})
	err := g.Wait()
	// Return every buffer: on error, rows may still hold some.
	for r := range rows {
		free <- r.logits
	}
	return err
}
