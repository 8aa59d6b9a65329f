package modelcheck_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

var (
	ckptOnce sync.Once
	ckptDir  string
	ckptErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if ckptDir != "" {
		os.RemoveAll(ckptDir)
	}
	os.Exit(code)
}

// checkpoints generates every tiny preset once per test binary (removed by TestMain).
func checkpoints(t *testing.T) string {
	t.Helper()
	ckptOnce.Do(func() {
		dir, err := os.MkdirTemp("", "modelcheck-")
		if err != nil {
			ckptErr = err
			return
		}
		ckptDir = dir
		for _, p := range tinymodel.Presets() {
			if ckptErr = tinymodel.Generate(filepath.Join(dir, p.Name), p); ckptErr != nil {
				return
			}
		}
	})
	if ckptErr != nil {
		t.Fatal(ckptErr)
	}
	return ckptDir
}

func planned(m *convert.Model) modelcheck.Model {
	out := modelcheck.Model{Name: m.Name, KVs: m.KVs}
	for _, t := range m.Tensors {
		out.Tensors = append(out.Tensors, gguf.TensorInfo{Name: t.Name, Type: t.Type, Shape: t.Shape})
	}
	return out
}

// TestPipelineOutputsPass: every model phonellm converts (with and without the MTP block) and quantizes passes,
// so the checks refuse nothing the pipeline itself writes.
func TestPipelineOutputsPass(t *testing.T) {
	dir := checkpoints(t)
	for _, p := range tinymodel.Presets() {
		for _, mtp := range []bool{false, true} {
			m, err := convert.Load(filepath.Join(dir, p.Name), convert.Options{KeepMTP: mtp})
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			if err := modelcheck.Check(planned(m), modelcheck.Options{}); err != nil {
				t.Errorf("%s (mtp %v): %v", p.Name, mtp, err)
			}
			err = modelcheck.Check(planned(m), modelcheck.Options{Serve: true})
			if mtp && m.MTP {
				if e, ok := err.(*modelcheck.Error); !ok || !e.Unsupported() {
					t.Errorf("%s with MTP to serve: %v, want unsupported", p.Name, err)
				}
			} else if err != nil {
				t.Errorf("%s to serve: %v", p.Name, err)
			}
			for _, ft := range []gguf.FileType{gguf.FileTypeQ4_K_M, gguf.FileTypeQ8_0, gguf.FileTypeQ2_K, gguf.FileTypeIQ4_XS} {
				src := quantize.FromModel(m)
				qp, err := quantize.MakeSourcePlan(src, ft, plan.Overrides{})
				if err != nil {
					t.Fatalf("%s %s: %v", p.Name, ft, err)
				}
				q := modelcheck.Model{Name: p.Name + "-" + ft.String(), KVs: m.KVs}
				for _, e := range qp.Entries {
					q.Tensors = append(q.Tensors, gguf.TensorInfo{Name: e.Name, Type: e.To, Shape: e.Shape})
				}
				if err := modelcheck.Check(q, modelcheck.Options{}); err != nil {
					t.Errorf("%s %s: %v", p.Name, ft, err)
				}
			}
			m.Close()
		}
	}
}
