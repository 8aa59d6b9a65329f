package tinymodel

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"sort"
	"testing"
)

// TestOutlierChannels: the same few hidden dimensions carry OutlierScale times the gain in every hidden-size
// norm (the stored offset of a Qwen3.5 zero-centred norm included), the embedding's values in those columns
// are heavy-tailed, the files hold exactly what TensorValues computes (the generator streams the embedding in
// chunks, each knowing its columns), and a spec without outliers is unchanged.
func TestOutlierChannels(t *testing.T) {
	for _, preset := range []string{"qwen3", "qwen35"} {
		t.Run(preset, func(t *testing.T) {
			p, _ := Preset(preset)
			p.MTPLayers, p.Vision, p.MaxShardBytes = 0, false, 0
			plain := p
			p.OutlierChannels = 3
			s, err := p.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			if s.OutlierScale != 20 {
				t.Fatalf("default scale %g", s.OutlierScale)
			}
			prefix, centre := "model.", 0.0
			if preset == "qwen35" {
				prefix, centre = "model.language_model.", 1
			}
			var outCols []int
			for _, name := range []string{prefix + "layers.0.input_layernorm.weight", prefix + "layers.1.post_attention_layernorm.weight"} {
				v, _, err := p.TensorValues(name)
				if err != nil {
					t.Fatal(err)
				}
				var cols []int
				for c, x := range v {
					if gain := float64(x) + centre; math.Abs(gain) > 5 {
						cols = append(cols, c)
						if gain < 15 || gain > 25 {
							t.Errorf("%s[%d]: gain %g, want about 20", name, c, gain)
						}
					} else if math.Abs(gain-1) > 0.3 {
						t.Errorf("%s[%d]: ordinary gain %g", name, c, gain)
					}
				}
				if outCols == nil {
					outCols = cols
				}
				if len(cols) != 3 || !equal(cols, outCols) {
					t.Fatalf("%s: outlier channels %v, want the same 3 as %v", name, cols, outCols)
				}
			}
			// The final norm keeps ordinary gains.
			fin, _, _ := p.TensorValues(prefix + "norm.weight")
			for c, x := range fin {
				if math.Abs(float64(x)+centre-1) > 0.3 {
					t.Errorf("final norm[%d]: gain %g", c, float64(x)+centre)
				}
			}
			// Embedding: the outlier columns' values are heavy-tailed at the ordinary scale.
			emb := prefix + "embed_tokens.weight"
			v, shape, err := p.TensorValues(emb)
			if err != nil {
				t.Fatal(err)
			}
			d := int(shape[1])
			var in, out []float64
			for i, x := range v {
				if contains(outCols, i%d) {
					out = append(out, math.Abs(float64(x)))
				} else {
					in = append(in, math.Abs(float64(x)))
				}
			}
			sort.Float64s(in)
			sort.Float64s(out)
			med := func(a []float64) float64 { return a[len(a)/2] }
			if r := med(out) / med(in); r < 0.5 || r > 2 {
				t.Errorf("embedding outlier columns: median ratio %.1f, want about 1", r)
			}
			if tail := out[len(out)*999/1000] / med(out); tail < 6 || in[len(in)*999/1000]/med(in) > 5 {
				t.Errorf("embedding outlier columns: 99.9th percentile / median %.1f, want a heavy tail", tail)
			}
			if in[len(in)-1] > 4*0.1 {
				t.Errorf("ordinary embedding value %g beyond the Irwin-Hall bound", in[len(in)-1])
			}
			// The written file equals TensorValues (F32 here), across the generator's chunks.
			dir := t.TempDir()
			if err := Generate(dir, p); err != nil {
				t.Fatal(err)
			}
			hdr, start, data := readHeader(t, filepath.Join(dir, "model.safetensors"))
			e := hdr[emb]
			body := data[start+e.Offsets[0]:]
			for i, want := range v {
				if got := math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:])); got != want {
					t.Fatalf("%s[%d] = %v in the file, TensorValues %v", emb, i, got, want)
				}
			}
			// Without outliers nothing changes.
			a, _, _ := plain.TensorValues(emb)
			q := plain
			q.OutlierScale = 7 // ignored without channels
			b, _, _ := q.TensorValues(emb)
			if !equalF(a, b) {
				t.Error("OutlierScale without OutlierChannels changed the weights")
			}
		})
	}
	bad, _ := Preset("qwen3")
	bad.OutlierChannels = bad.HiddenSize + 1
	if _, err := bad.Normalize(); err == nil {
		t.Error("more outlier channels than the hidden size accepted")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalF(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
