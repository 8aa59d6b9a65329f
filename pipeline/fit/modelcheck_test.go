package fit_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/hostile"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/fit"
)

// TestRefusesFilesThatDoNotLoad: fit estimated any parseable GGUF and said "fits" for files that abort the
// engine, so ship deployed them (issue 14). It now refuses them as bad input (exit 3), with the checks serve
// runs; the MTP block only matters for the built-in engine.
func TestRefusesFilesThatDoNotLoad(t *testing.T) {
	dir := t.TempDir()
	all, err := hostile.Corpus(context.Background(), filepath.Join(dir, "corpus"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]hostile.Mutant{}
	for _, m := range all {
		byName[m.Name] = m
	}
	for _, c := range []struct {
		mutant string
		engine fit.Engine
		ok     bool
	}{
		{"qwen3-f16/control/unchanged", fit.GoEngine, true},
		{"qwen3-f16/hparams/attention.head_count 5", fit.GoEngine, false},
		{"qwen3-f16/shapes/blk.0.ffn_up.weight transposed", fit.LlamaCpp, false},
		{"qwen3-f16/vocab/40 tokens more than embedding rows", fit.LlamaCpp, false},
		{"qwen3-f16/data/NaN in output_norm.weight", fit.GoEngine, false},
		{"qwen35-mtp-f32/control/unchanged", fit.LlamaCpp, true},
		{"qwen35-mtp-f32/control/unchanged", fit.GoEngine, false},
	} {
		m, ok := byName[c.mutant]
		if !ok {
			t.Fatalf("no mutant %q", c.mutant)
		}
		p := filepath.Join(dir, hostile.FileName(m))
		if err := m.Write(p); err != nil {
			t.Fatal(err)
		}
		res, err := fit.Run(context.Background(), fit.Options{Model: p, Engine: c.engine}, nil)
		switch {
		case c.ok && (err != nil || !res.Verdict.Fits):
			t.Errorf("%s (%s): %v %+v", c.mutant, c.engine, err, res.Verdict)
		case !c.ok && (err == nil || !pipeline.IsInputError(err)):
			t.Errorf("%s (%s): err %v, want an input error (verdict %s)", c.mutant, c.engine, err, res.Verdict.Status)
		}
		os.Remove(p)
	}
}
