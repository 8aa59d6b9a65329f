package hostile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Outcome is what a correct phonellm does with a mutant in one command.
type Outcome int

const (
	NotRun  Outcome = iota // the command does not take this kind of input
	Accept                 // exit 0
	Refuse                 // exit 3: bad input, one line naming the problem
	Either                 // exit 0 or 3 (a choice left to another part of the system), never a crash
	Stopped                // ended by SIGTERM: exit 130 (README: interrupted), or 0
)

func (o Outcome) String() string {
	return [...]string{"not run", "accept", "refuse", "accept or refuse", "stopped"}[o]
}

// Allows reports whether an exit code is what the outcome asks for.
func (o Outcome) Allows(code int) bool {
	switch o {
	case Accept:
		return code == 0
	case Refuse:
		return code == 3
	case Either:
		return code == 0 || code == 3
	case Stopped:
		return code == 130 || code == 0
	}
	return false
}

// Reply is what `serve` must answer to one chat request once it loaded a mutant.
type Reply int

const (
	NoReply       Reply = iota // nothing is asked (the model is refused at load)
	Answer                     // 200 with a completion
	AnswerOrError              // 200, or a clean error response (the request fails, the server stays up)
)

func (r Reply) String() string {
	return [...]string{"none", "answer", "answer or error"}[r]
}

// Expect is a mutant's expected outcome in each command. GGUF mutants go through inspect, fit, quantize and
// serve; checkpoint mutants through inspect, convert and quantize.
type Expect struct {
	Inspect, Fit, Quantize, Convert, Serve Outcome
	Reply                                  Reply
	// Runtime names the serving-side guard the reply depends on (runtime/engine's template evaluation limits,
	// goengine's check of non-finite logits), or "" when loading alone decides it.
	Runtime string
}

// Runtime guards.
const (
	RuntimeTemplates = "template limits"
	RuntimeNaN       = "non-finite logits"
)

// The expectations of GGUF mutants.
var (
	// ggufValid: still a model every engine loads and answers with.
	ggufValid = Expect{Inspect: Accept, Fit: Accept, Quantize: Accept, Serve: Accept, Reply: Answer}
	// ggufRefused: malformed or inconsistent: every command refuses it.
	ggufRefused = Expect{Inspect: Refuse, Fit: Refuse, Quantize: Refuse, Serve: Refuse}
	// ggufServeRefused: valid for llama.cpp, but the built-in engine cannot run it (an MTP block, an
	// embedding model): only serve refuses.
	ggufServeRefused = Expect{Inspect: Accept, Fit: Accept, Quantize: Accept, Serve: Refuse}
	// ggufBadWeights: well formed, but weights that are not finite. quantize refuses them (as llama-quantize
	// does); serve loads them (weights are not read at load) and the request answers or fails cleanly.
	ggufBadWeights = Expect{Inspect: Accept, Fit: Accept, Quantize: Refuse, Serve: Accept, Reply: AnswerOrError, Runtime: RuntimeNaN}
	// ggufOddVocab: a well-formed vocabulary the tokenizer must cope with (prompts may tokenize to little or
	// nothing): the request answers or fails cleanly.
	ggufOddVocab = Expect{Inspect: Accept, Fit: Accept, Quantize: Accept, Serve: Accept, Reply: AnswerOrError}
	// ggufTemplateSyntax: a chat template that does not compile: serve refuses it at load.
	ggufTemplateSyntax = Expect{Inspect: Accept, Fit: Accept, Quantize: Accept, Serve: Refuse}
	// ggufHostileTemplate: a template that compiles but loops, recurses or explodes when rendered: serve may
	// refuse it at load; a request must end (500) within its limits.
	ggufHostileTemplate = Expect{Inspect: Accept, Fit: Accept, Quantize: Accept, Serve: Either, Reply: AnswerOrError, Runtime: RuntimeTemplates}
)

// The expectations of checkpoint mutants.
var (
	ckptValid = Expect{Inspect: Accept, Convert: Accept, Quantize: Accept}
	// ckptMalformed: a file of the checkpoint cannot be read (or is not a file): every command refuses it.
	ckptMalformed = Expect{Inspect: Refuse, Convert: Refuse, Quantize: Refuse}
	// ckptInvalid: readable, but the GGUF it would make is not a loadable model (or phonellm does not convert
	// it): convert and quantize refuse it; inspect, which only lists what is there, shows it.
	ckptInvalid = Expect{Inspect: Accept, Convert: Refuse, Quantize: Refuse}
	// ckptBadWeights: NaN weights convert (values are not checked) but do not quantize.
	ckptBadWeights = Expect{Inspect: Accept, Convert: Accept, Quantize: Refuse}
)

// Mutant is one hostile input: a GGUF file or a Hugging Face checkpoint folder.
type Mutant struct {
	Name     string // <base>/<category>/<what>, unique
	Category string // e.g. "header", "hparams", "shapes", "data", "templates", "vocab", "config", "safetensors"
	Expect   Expect

	gguf func() []byte          // GGUF mutants: the file's bytes
	ckpt func(dir string) error // checkpoint mutants: writes the folder dir (which does not exist yet)
}

// Checkpoint reports whether the mutant is a checkpoint folder (else a GGUF file).
func (m Mutant) Checkpoint() bool { return m.ckpt != nil }

// Write materializes the mutant at path: a file, or a folder for checkpoints.
func (m Mutant) Write(path string) error {
	if m.ckpt != nil {
		return m.ckpt(path)
	}
	return os.WriteFile(path, m.gguf(), 0o644)
}

// Bytes returns a GGUF mutant's file (nil for checkpoints).
func (m Mutant) Bytes() []byte {
	if m.gguf == nil {
		return nil
	}
	return m.gguf()
}

// Corpus generates the bases under dir and returns every mutant, in a fixed order. The same code gives the
// same mutants, byte for byte.
func Corpus(ctx context.Context, dir string) ([]Mutant, error) {
	bases, err := Bases(ctx, dir)
	if err != nil {
		return nil, err
	}
	var all []Mutant
	for _, b := range bases {
		all = append(all, ggufMutants(b)...)
	}
	for _, b := range bases {
		if b.Name == "qwen3-f16" || b.Name == "qwen35-f16" {
			all = append(all, checkpointMutants(b)...)
		}
	}
	seen := map[string]bool{}
	for _, m := range all {
		if seen[m.Name] {
			return nil, fmt.Errorf("hostile: two mutants named %s", m.Name)
		}
		seen[m.Name] = true
	}
	return all, nil
}

// Regressions are the files issue 14 reported, in every sample: an abort (head_count 3, a transposed ffn_up),
// a panic on the first request (a vocabulary larger than the embedding) and the checkpoint convert used to
// turn into such a file with exit 0.
var Regressions = []string{
	"qwen3-f16/hparams/attention.head_count 3",
	"qwen3-f16/shapes/blk.0.ffn_up.weight transposed",
	"qwen3-f16/vocab/40 tokens more than embedding rows",
	"qwen3-f16-ckpt/config/num_key_value_heads 0",
}

// Sample picks about n mutants spread over every category and base (the i-th of each group in turn, so a
// small sample still covers every kind of damage) plus the Regressions. It is deterministic.
func Sample(all []Mutant, n int) []Mutant {
	if n >= len(all) {
		return all
	}
	var must []Mutant
	for _, name := range Regressions {
		for _, m := range all {
			if m.Name == name {
				must = append(must, m)
			}
		}
	}
	return append(must, spreadSample(all, n-len(must), must)...)
}

func spreadSample(all []Mutant, n int, skip []Mutant) []Mutant {
	taken := map[string]bool{}
	for _, m := range skip {
		taken[m.Name] = true
	}
	groups := map[string][]Mutant{}
	var keys []string
	for _, m := range all {
		if taken[m.Name] {
			continue
		}
		base, _, _ := strings.Cut(m.Name, "/")
		k := base + "/" + m.Category
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], m)
	}
	sort.Strings(keys)
	var out []Mutant
	for i := 0; len(out) < n; i++ {
		added := false
		for _, k := range keys {
			g := groups[k]
			// Take elements spread over the group rather than its first ones.
			if i < len(g) && len(out) < n {
				out = append(out, g[spread(i, len(g))])
				added = true
			}
		}
		if !added {
			break
		}
	}
	return out
}

// spread maps 0, 1, 2, ... to indices that cover [0, n) evenly early on (0, n/2, n/4, 3n/4, ...), each once.
func spread(i, n int) int {
	// The bit-reversal order of the smallest power of two ≥ n, skipping indices ≥ n.
	p := 1
	for p < n {
		p <<= 1
	}
	k := -1
	for j := 0; j < p; j++ {
		r := reverse(j, p)
		if r < n {
			k++
			if k == i {
				return r
			}
		}
	}
	return i
}

func reverse(j, p int) int {
	r := 0
	for b := 1; b < p; b <<= 1 {
		r <<= 1
		if j&b != 0 {
			r |= 1
		}
	}
	return r
}

// WriteAll writes every mutant under dir (GGUFs as <name>.gguf with '/' replaced, checkpoints as folders) and
// a MANIFEST listing names and expectations. For inspecting the corpus by hand.
func WriteAll(all []Mutant, dir string) error {
	var man strings.Builder
	for _, m := range all {
		p := filepath.Join(dir, FileName(m))
		if err := m.Write(p); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		fmt.Fprintf(&man, "%s\t%s\t%+v\n", filepath.Base(p), m.Name, m.Expect)
	}
	return os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte(man.String()), 0o644)
}

// FileName is a file system name for the mutant.
func FileName(m Mutant) string {
	r := strings.NewReplacer("/", "__", " ", "_", "\x00", "NUL")
	n := r.Replace(m.Name)
	if !m.Checkpoint() {
		n += ".gguf"
	}
	return n
}
