package modelcheck

import (
	"fmt"
	"sort"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Model is what Check looks at: a GGUF's metadata and tensor infos (names, types, ggml-order shapes; offsets are
// not used), read from a file or planned by a writer.
type Model struct {
	Name    string // file or label used in messages
	KVs     []gguf.KV
	Tensors []gguf.TensorInfo
}

// FromFile returns the Model of an opened GGUF file.
func FromFile(f *gguf.File) Model { return Model{Name: f.Name, KVs: f.KVs, Tensors: f.Tensors} }

// Options select the checks.
type Options struct {
	// Serve also refuses what phonellm's built-in engine (Ollama's Go engine) cannot run although llama.cpp
	// can: a multi-token-prediction block (nextn_predict_layers > 0).
	Serve bool
	// KVCacheType is the KV cache type the model will be served with ("", "f16", "q8_0", "q4_0"). A quantized
	// cache stores key rows in 32-element blocks, so the head size must be a multiple of 32 (ggml asserts it).
	KVCacheType string
	// SkipTokenizer leaves the vocabulary's content to the caller, which builds the runtime tokenizer itself
	// right after (goengine.Load); CheckFile otherwise builds it once to check it.
	SkipTokenizer bool
}

// Architectures lists the general.architecture values this package knows, which are those phonellm converts
// and serves.
var Architectures = []string{"qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe"}

// Problem is one reason a model is refused.
type Problem struct {
	Key    string // full metadata key at fault, or ""
	Tensor string // tensor at fault, or ""
	Msg    string // what is wrong and what was expected
	// Unsupported marks a valid model that phonellm does not run (another architecture, an MTP block to
	// serve), as opposed to an inconsistent one.
	Unsupported bool
}

func (p Problem) String() string {
	switch {
	case p.Tensor != "":
		return "tensor " + p.Tensor + ": " + p.Msg
	case p.Key != "":
		return p.Key + ": " + p.Msg
	}
	return p.Msg
}

// Error reports a model that does not pass: the problems found, in the order checked (hyper-parameters first,
// then tensors, then the vocabulary). It is an input error (exit 3).
type Error struct {
	File     string
	Problems []Problem // at least one
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("modelcheck: ")
	if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	if e.Unsupported() {
		b.WriteString("unsupported model: ")
	} else {
		b.WriteString("invalid model: ")
	}
	b.WriteString(e.Problems[0].String())
	if n := len(e.Problems) - 1; n == 1 {
		b.WriteString(" (and 1 more problem)")
	} else if n > 1 {
		fmt.Fprintf(&b, " (and %d more problems)", n)
	}
	return b.String()
}

// InputError classifies the error as bad input (exit 3).
func (e *Error) InputError() bool { return true }

// Unsupported reports whether the first problem is a model phonellm does not run rather than a broken one.
func (e *Error) Unsupported() bool { return len(e.Problems) > 0 && e.Problems[0].Unsupported }

// Keys lists the metadata keys named by the problems, in order, without repeats.
func (e *Error) Keys() []string {
	var keys []string
	seen := map[string]bool{}
	for _, p := range e.Problems {
		if p.Key != "" && !seen[p.Key] {
			seen[p.Key] = true
			keys = append(keys, p.Key)
		}
	}
	return keys
}

// maxProblems bounds the problems collected: a broken file can fail every tensor; the first few say enough.
const maxProblems = 32

// checker accumulates problems.
type checker struct {
	m        Model
	o        Options
	kv       map[string]gguf.Value
	tensors  map[string]gguf.TensorInfo
	arch     string
	problems []Problem
}

func (c *checker) add(p Problem) {
	if len(c.problems) < maxProblems {
		c.problems = append(c.problems, p)
	}
}

func (c *checker) keyf(key, format string, args ...any) {
	c.add(Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) tensorf(name, format string, args ...any) {
	c.add(Problem{Tensor: name, Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) failed() bool { return len(c.problems) > 0 }

func (c *checker) err() error {
	if len(c.problems) == 0 {
		return nil
	}
	return &Error{File: c.m.Name, Problems: c.problems}
}

// Check validates the model's metadata and tensor list (no tensor data). It returns nil or an *Error.
func Check(m Model, o Options) error {
	c := &checker{m: m, o: o, kv: make(map[string]gguf.Value, len(m.KVs)), tensors: make(map[string]gguf.TensorInfo, len(m.Tensors))}
	for _, kv := range m.KVs {
		c.kv[kv.Key] = kv.Value
	}
	for _, t := range m.Tensors {
		c.tensors[t.Name] = t
	}
	c.check()
	return c.err()
}

func (c *checker) check() {
	c.metadataShapes()
	v, ok := c.kv["general.architecture"]
	arch, isStr := v.V.(string)
	switch {
	case !ok:
		c.keyf("general.architecture", "missing")
		return
	case !isStr:
		c.keyf("general.architecture", "is a %s, want a string", v.Type)
		return
	}
	c.arch = arch
	known := false
	for _, a := range Architectures {
		known = known || a == arch
	}
	if !known {
		c.add(Problem{Key: "general.architecture", Unsupported: true,
			Msg: fmt.Sprintf("architecture %q is not one phonellm runs (supported: %s)", arch, strings.Join(Architectures, ", "))})
		return
	}
	h, ok := c.hparams()
	if !ok {
		// Shapes follow from the hyper-parameters; with those broken, tensor messages would only repeat it.
		return
	}
	switch c.o.KVCacheType {
	case "q8_0", "q4_0":
		if h.headDim%32 != 0 {
			c.add(Problem{Key: c.k("attention.key_length"), Unsupported: true,
				Msg: fmt.Sprintf("head size %d is not a multiple of 32, which a %s KV cache needs (use an f16 cache)", h.headDim, c.o.KVCacheType)})
			return
		}
	}
	c.checkTensors(h)
	c.vocabulary(h)
}

// k is the full key of an architecture hyper-parameter.
func (c *checker) k(suffix string) string { return c.arch + "." + suffix }

// metadataShapes refuses metadata values no engine reads: arrays of arrays (Ollama's decoder fails on them).
func (c *checker) metadataShapes() {
	keys := make([]string, 0, len(c.kv))
	for k := range c.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if a, ok := c.kv[k].V.(gguf.Array); ok && a.Elem == gguf.ValueArray {
			c.keyf(k, "arrays of arrays are not supported")
		}
	}
}
