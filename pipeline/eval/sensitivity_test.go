package eval

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// TestSensitivity ranks tiny Qwen3's tensor groups under Q4_K_M on the Go engine: every quantized group is
// tried once, raising any group to Q8_0 lowers the KLD and costs bytes, the ranking is by gain, and the
// suggestions are valid --tensor-type rules. No trial file is left behind.
func TestSensitivity(t *testing.T) {
	if testing.Short() {
		t.Skip("quantizes and runs a tiny model ten times")
	}
	dir := tinyModels(t, "qwen3")
	work := t.TempDir()
	r, err := Sensitivity(context.Background(), SensitivityOptions{
		Reference: filepath.Join(dir, "f32.gguf"), FileType: gguf.FileTypeQ4_K_M, Prompts: "testdata/prompts.txt",
		Load: goLoader, WorkDir: work,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline Q4_K_M mean KLD %.6f", r.BaselineKLD)
	var names []string
	for _, g := range r.Groups {
		t.Logf("%-18s %-7s ×%d → Q8_0: KLD %.6f, gain %.6f, +%d bytes (%.4f per MiB)", g.Group, g.Type, g.Tensors, g.MeanKLD, g.Gain, g.ExtraBytes, g.GainPerMiB)
		names = append(names, g.Group)
		if g.Gain <= 0 || g.ExtraBytes <= 0 || g.MeanKLD >= r.BaselineKLD {
			t.Errorf("%s: gain %g for %d extra bytes", g.Group, g.Gain, g.ExtraBytes)
		}
	}
	slices.Sort(names)
	want := []string{"attn_k.weight", "attn_output.weight", "attn_q.weight", "attn_v.weight", "ffn_down.weight", "ffn_gate.weight", "ffn_up.weight", "token_embd.weight"}
	if !slices.Equal(names, want) {
		t.Errorf("groups %v, want %v", names, want)
	}
	if !slices.IsSortedFunc(r.Groups, func(a, b GroupSensitivity) int {
		switch {
		case a.Gain > b.Gain:
			return -1
		case a.Gain < b.Gain:
			return 1
		}
		return 0
	}) {
		t.Error("groups not sorted by gain")
	}
	if len(r.Suggestions) != 3 {
		t.Errorf("suggestions %q", r.Suggestions)
	}
	for _, s := range r.Suggestions {
		if _, err := plan.ParseTensorTypeRule(s); err != nil {
			t.Errorf("suggestion %q: %v", s, err)
		}
	}
	t.Logf("suggested: %q", r.Suggestions)
	if left, _ := os.ReadDir(work); len(left) != 0 {
		t.Errorf("trial files left: %v", left)
	}
}
