package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Workload is what `phonellm bench fleet` sends: every request is one of the rubrics as its system message and
// one of the cases as its user message (rubrics × cases), answered with at most MaxTokens tokens.
type Workload struct {
	Rubrics   []string `json:"-"`
	Cases     []string `json:"-"`
	MaxTokens int      `json:"max_tokens"`
}

// WorkloadSpec is a workload file (YAML or JSON). Texts are given inline or as files relative to the workload
// file; Generate asks for generated texts of a given size instead.
//
//	rubrics: [{file: rubric-a.txt}, "an inline rubric"]
//	cases: [{file: case-1.txt}, "an inline case"]
//	max_tokens: 8
//
//	generate: {rubrics: 3, cases: 32, prompt_tokens: 7000, share: 0.9, seed: 1}
type WorkloadSpec struct {
	Rubrics   []TextRef     `yaml:"rubrics" json:"rubrics"`
	Cases     []TextRef     `yaml:"cases" json:"cases"`
	MaxTokens int           `yaml:"max_tokens" json:"max_tokens"`
	Generate  *GenerateSpec `yaml:"generate" json:"generate"`
}

// TextRef is a text, inline or in a file.
type TextRef struct {
	Text string
	File string
}

// UnmarshalYAML accepts a string or {file: path}.
func (t *TextRef) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&t.Text)
	}
	var f struct {
		File string `yaml:"file"`
	}
	if err := n.Decode(&f); err != nil || f.File == "" {
		return errors.New("want a text or {file: path}")
	}
	t.File = f.File
	return nil
}

// GenerateSpec asks for generated rubrics and cases: Rubrics rubrics and Cases cases, each prompt of about
// PromptTokens tokens of which the fraction Share is its rubric (the fraud-review case: 7,000 tokens, 0.9).
type GenerateSpec struct {
	Rubrics      int     `yaml:"rubrics" json:"rubrics"`
	Cases        int     `yaml:"cases" json:"cases"`
	PromptTokens int     `yaml:"prompt_tokens" json:"prompt_tokens"`
	Share        float64 `yaml:"share" json:"share"`
	Seed         uint64  `yaml:"seed" json:"seed"`
}

// Validate checks the counts and the share.
func (g GenerateSpec) Validate() error {
	switch {
	case g.Rubrics < 1 || g.Rubrics > 1000:
		return fmt.Errorf("rubrics = %d, want 1..1000", g.Rubrics)
	case g.Cases < 1 || g.Cases > 100000:
		return fmt.Errorf("cases = %d, want 1..100000", g.Cases)
	case g.PromptTokens < 16 || g.PromptTokens > 1<<20:
		return fmt.Errorf("prompt_tokens = %d, want 16..%d", g.PromptTokens, 1<<20)
	case math.IsNaN(g.Share) || g.Share <= 0 || g.Share >= 1:
		return fmt.Errorf("share = %v, want a fraction above 0 and below 1 (the part of each prompt that is its rubric)", g.Share)
	}
	return nil
}

// WorkloadError is a workload that cannot be used; it is an input error (pipeline.IsInputError).
type WorkloadError struct {
	Path string
	Msg  string
}

func (e *WorkloadError) Error() string {
	if e.Path == "" {
		return "bench fleet: workload: " + e.Msg
	}
	return fmt.Sprintf("bench fleet: workload %s: %s", e.Path, e.Msg)
}

// InputError classifies the error.
func (e *WorkloadError) InputError() bool { return true }

// Bounds on what a workload file may hold.
const (
	maxWorkloadFile = 1 << 20 // the workload file itself
	maxText         = 4 << 20 // one rubric or case
	maxTexts        = 100000  // rubrics plus cases
	maxTotalText    = 64 << 20
)

// ReadWorkloadSpec reads a workload file.
func ReadWorkloadSpec(path string) (WorkloadSpec, error) {
	var s WorkloadSpec
	f, err := os.Open(path)
	if err != nil {
		return s, &WorkloadError{Path: path, Msg: err.Error()}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxWorkloadFile+1))
	if err != nil {
		return s, &WorkloadError{Path: path, Msg: err.Error()}
	}
	return ParseWorkloadSpec(path, b)
}

// ParseWorkloadSpec parses the bytes of a workload file (path names it in errors).
func ParseWorkloadSpec(path string, b []byte) (WorkloadSpec, error) {
	var s WorkloadSpec
	if len(b) > maxWorkloadFile {
		return s, &WorkloadError{Path: path, Msg: fmt.Sprintf("larger than %d bytes (put long texts in files of their own)", maxWorkloadFile)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return s, &WorkloadError{Path: path, Msg: "empty (want rubrics and cases, or generate)"}
		}
		return s, &WorkloadError{Path: path, Msg: strings.ReplaceAll(err.Error(), "\n", "; ")}
	}
	if len(s.Rubrics)+len(s.Cases) > maxTexts {
		return s, &WorkloadError{Path: path, Msg: fmt.Sprintf("%d texts, at most %d", len(s.Rubrics)+len(s.Cases), maxTexts)}
	}
	return s, nil
}

// Load turns the spec into texts: files are read relative to dir. Generated workloads are made by Generate
// instead (they need the model's tokenizer).
func (s WorkloadSpec) Load(path string) (Workload, error) {
	bad := func(format string, args ...any) error {
		return &WorkloadError{Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	if s.Generate != nil {
		return Workload{}, bad("generate: is made with Generate, not Load")
	}
	switch {
	case len(s.Rubrics) == 0 && len(s.Cases) == 0:
		return Workload{}, bad("empty: no rubrics and no cases (want both, or generate:)")
	case len(s.Rubrics) == 0:
		return Workload{}, bad("no rubrics (want at least one)")
	case len(s.Cases) == 0:
		return Workload{}, bad("no cases (want at least one)")
	case len(s.Rubrics)+len(s.Cases) > maxTexts:
		return Workload{}, bad("%d texts, at most %d", len(s.Rubrics)+len(s.Cases), maxTexts)
	case s.MaxTokens < 0 || s.MaxTokens > 1<<16:
		return Workload{}, bad("max_tokens = %d, want 0..%d", s.MaxTokens, 1<<16)
	}
	dir := filepath.Dir(path)
	total := 0
	read := func(kind string, i int, r TextRef) (string, error) {
		text := r.Text
		if r.File != "" {
			p := r.File
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			st, err := os.Stat(p)
			if err != nil {
				return "", bad("%s %d: %v", kind, i, err)
			}
			if !st.Mode().IsRegular() || st.Size() > maxText {
				return "", bad("%s %d: %s is not a file of at most %d bytes", kind, i, p, maxText)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return "", bad("%s %d: %v", kind, i, err)
			}
			text = string(b)
		}
		switch {
		case text == "":
			return "", bad("%s %d is empty", kind, i)
		case len(text) > maxText:
			return "", bad("%s %d: %d bytes, at most %d", kind, i, len(text), maxText)
		case !utf8.ValidString(text):
			return "", bad("%s %d is not UTF-8 text", kind, i)
		}
		if total += len(text); total > maxTotalText {
			return "", bad("more than %d bytes of text in all", maxTotalText)
		}
		return text, nil
	}
	w := Workload{MaxTokens: s.MaxTokens}
	for i, r := range s.Rubrics {
		t, err := read("rubric", i, r)
		if err != nil {
			return Workload{}, err
		}
		w.Rubrics = append(w.Rubrics, t)
	}
	for i, r := range s.Cases {
		t, err := read("case", i, r)
		if err != nil {
			return Workload{}, err
		}
		w.Cases = append(w.Cases, t)
	}
	return w, nil
}

// words are what generated texts are made of: the vocabulary of a fraud review.
var words = strings.Fields(`account address amount approved authorization bank billing blocked card cardholder
	change charge chargeback check city country customer date decline delivery device dispute domain email evidence
	express first flagged fraud history identity issuer item location login merchant mismatch mobile name new
	network order origin password payment pattern phone previous price proxy purchase recent refund region review
	risk seller session shipping signal speed store subscription time transaction transfer travel unusual user
	value velocity verified wallet weekend within without year`)

// Generate makes the texts of a generated workload. count returns the number of tokens of a text (the model's
// tokenizer, or an estimate): each rubric is sized to Share × PromptTokens tokens and each case to the rest.
// Rubrics start with their own number, so that no two share more than a few leading tokens.
func Generate(g GenerateSpec, maxTokens int, count func(string) (int, error)) (Workload, error) {
	if err := g.Validate(); err != nil {
		return Workload{}, &WorkloadError{Msg: "generate: " + err.Error()}
	}
	rng := rand.New(rand.NewPCG(g.Seed, 0x5eed))
	// Tokens per word, measured on a sample of the same kind of text.
	sample := text(rng, "Sample.", 2000)
	n, err := count(sample)
	if err != nil {
		return Workload{}, fmt.Errorf("bench fleet: count tokens: %w", err)
	}
	if n <= 0 {
		return Workload{}, fmt.Errorf("bench fleet: the tokenizer made %d tokens of a %d-byte sample", n, len(sample))
	}
	perWord := float64(n) / 2001
	rubricTokens := int(math.Round(float64(g.PromptTokens) * g.Share))
	caseTokens := max(g.PromptTokens-rubricTokens, 1)
	sized := func(head string, tokens int) (string, error) {
		nw := max(int(float64(tokens)/perWord), 1)
		for range 4 { // a few corrections: the sample's rate is close, not exact
			t := text(rng, head, nw)
			got, err := count(t)
			if err != nil {
				return "", fmt.Errorf("bench fleet: count tokens: %w", err)
			}
			if math.Abs(float64(got-tokens)) <= max(2, 0.01*float64(tokens)) || got <= 0 {
				return t, nil
			}
			nw = max(int(float64(nw)*float64(tokens)/float64(got)), 1)
		}
		return text(rng, head, nw), nil
	}
	w := Workload{MaxTokens: maxTokens}
	for i := range g.Rubrics {
		t, err := sized(fmt.Sprintf("Rubric %d. Review the transaction below and answer with one line, RISK_LEVEL: 1 to 5.", i+1), rubricTokens)
		if err != nil {
			return Workload{}, err
		}
		w.Rubrics = append(w.Rubrics, t)
	}
	for i := range g.Cases {
		t, err := sized(fmt.Sprintf("Case %d:", i+1), caseTokens)
		if err != nil {
			return Workload{}, err
		}
		w.Cases = append(w.Cases, t)
	}
	return w, nil
}

// text is head followed by n random words, in sentences.
func text(rng *rand.Rand, head string, n int) string {
	var b strings.Builder
	b.WriteString(head)
	for i := range n {
		b.WriteByte(' ')
		b.WriteString(words[rng.IntN(len(words))])
		if i%12 == 11 {
			b.WriteByte('.')
		}
	}
	b.WriteByte('.')
	return b.String()
}
