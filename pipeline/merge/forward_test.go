package merge

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/reference"
	"github.com/phonellm/phonellm/internal/tinymodel"
)

// TestForwardMatchesRuntimeLoRA: the reference forward pass of the merged checkpoint equals the forward of
// the base with the adapter applied at run time, and differs from the base's.
func TestForwardMatchesRuntimeLoRA(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen35"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			spec := preset(t, name)
			base := genBase(t, filepath.Join(dir, "base"), spec)
			targets := []string{"q_proj", "v_proj", "down_proj"}
			if name == "qwen35" {
				targets = append(targets, "in_proj_qkv", "out_proj")
			}
			ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 4, RSLoRA: true, BStd: 0.05, TargetModules: targets,
				AlphaPattern: map[string]float64{"down_proj": 4}})
			out := filepath.Join(dir, "out")
			if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil); err != nil {
				t.Fatal(err)
			}
			tokens := []int{1, 17, 300, 42, 5, 99, 250, 7}
			logits := func(dir string, ads []reference.Adapter) [][]float32 {
				m, err := reference.LoadWith(dir, reference.Options{Adapters: ads})
				if err != nil {
					t.Fatal(err)
				}
				return m.Forward(tokens)
			}
			merged := logits(out, nil)
			runtime := logits(base, []reference.Adapter{{Dir: ad}})
			plain := logits(base, nil)
			var maxDiff, maxEffect float64
			for i := range merged {
				for j := range merged[i] {
					maxDiff = math.Max(maxDiff, math.Abs(float64(merged[i][j]-runtime[i][j])))
					maxEffect = math.Max(maxEffect, math.Abs(float64(merged[i][j]-plain[i][j])))
				}
			}
			if maxDiff > 1e-4 {
				t.Errorf("merged vs run-time LoRA logits differ by %g", maxDiff)
			}
			if maxEffect < 1e-2 {
				t.Errorf("the adapter barely changes the logits (%g)", maxEffect)
			}
			t.Logf("max |merged - runtime| = %.2g, max |merged - base| = %.2g", maxDiff, maxEffect)
		})
	}
}
