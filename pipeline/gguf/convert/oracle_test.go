package convert

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// TestOracleLoads loads every preset's F32, F16 and BF16 GGUF in upstream llama.cpp (the node-llama-cpp
// oracle): the files must load with the right vocabulary, give finite logits, and the 16-bit files' logits
// must stay close to the F32 file's. (The comparison with the plain-Go reference forward belongs
// with internal/testkit/reference.) Skipped when the oracle is not installed (failed under CI=1).
func TestOracleLoads(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: runs llama.cpp")
	}
	o := oracle.Shared(t)
	prompt := []int{17, 250, 3, 99, 512, 42, 7}
	for _, spec := range tinymodel.Presets() {
		t.Run(spec.Name, func(t *testing.T) {
			dir := generate(t, spec)
			var ref []float32
			for _, ot := range []OutType{OutF32, OutF16, OutBF16} {
				out := filepath.Join(t.TempDir(), spec.Name+"-"+string(ot)+".gguf")
				if _, err := Run(t.Context(), Options{Model: dir, Out: out, OutType: ot}, pipeline.Discard); err != nil {
					t.Fatal(err)
				}
				info, err := o.Load(out)
				if err != nil {
					t.Fatalf("%s: llama.cpp refused the file: %v", ot, err)
				}
				if info.VocabSize != spec.VocabSize || info.Architecture != spec.Arch {
					t.Errorf("%s: llama.cpp sees %s with %d tokens, want %s with %d", ot, info.Architecture, info.VocabSize, spec.Arch, spec.VocabSize)
				}
				logits, err := o.Logits(out, prompt)
				if err != nil {
					t.Fatal(err)
				}
				var maxAbs, maxDiff float64
				for i, v := range logits {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("%s: logit %d is %v", ot, i, v)
					}
					maxAbs = max(maxAbs, math.Abs(float64(v)))
					if ref != nil {
						maxDiff = max(maxDiff, math.Abs(float64(v-ref[i])))
					}
				}
				if ref == nil {
					ref = logits
				} else {
					t.Logf("%s: max |logit - f32 logit| = %.3g (max |logit| %.3g)", ot, maxDiff, maxAbs)
					if maxDiff > 0.05*max(1, maxAbs) {
						t.Errorf("%s: logits differ from the F32 file's by %g", ot, maxDiff)
					}
				}
				if err := o.Unload(out); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestOracleMTP loads a Qwen3.5 GGUF written with KeepMTP (block_count = layers + 1, nextn_predict_layers,
// blk.N.nextn.*): runtimes since llama.cpp b9180 accept it.
func TestOracleMTP(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: runs llama.cpp")
	}
	o := oracle.Shared(t)
	for _, name := range []string{"qwen35", "qwen35moe"} {
		spec, _ := tinymodel.Preset(name)
		dir := generate(t, spec)
		out := filepath.Join(t.TempDir(), "mtp.gguf")
		res, err := Run(t.Context(), Options{Model: dir, Out: out, KeepMTP: true, OutType: OutF16}, pipeline.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !res.MTP || res.Blocks != spec.NumLayers+spec.MTPLayers {
			t.Errorf("%s: result %+v", name, res)
		}
		info, err := o.Load(out)
		if err != nil {
			t.Fatalf("%s with MTP: llama.cpp refused the file: %v", name, err)
		}
		if v, ok := info.Metadata[spec.Arch+".nextn_predict_layers"]; !ok || v != float64(spec.MTPLayers) {
			t.Errorf("%s: nextn_predict_layers = %v", name, v)
		}
		if _, err := o.Logits(out, []int{1, 2, 3}); err != nil {
			t.Error(err)
		}
		o.Unload(out)
	}
}

// TestOracleVReorderEquivalence checks the V-head reorder against llama.cpp without any reference code:
// checkpoint A has 2 K heads and 4 V heads (HF grouped layout, reordered by the converter); checkpoint B is
// the same model with every K head duplicated (4 K heads = 4 V heads, V head j using K head j as
// repeat_interleave makes A's V head j use K head j/2), which the converter leaves alone. Both must give the
// same logits in llama.cpp.
func TestOracleVReorderEquivalence(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: runs llama.cpp")
	}
	o := oracle.Shared(t)
	spec, _ := tinymodel.Preset("qwen35")
	spec.MTPLayers, spec.Vision, spec.MaxShardBytes = 0, false, 0
	dirA := generate(t, spec)
	kh, dk := spec.LinearNumKeyHeads, spec.LinearKeyHeadDim
	if kh*2 != spec.LinearNumValueHeads {
		t.Fatalf("preset has %d K and %d V heads; the test wants r = 2", kh, spec.LinearNumValueHeads)
	}
	dirB := filepath.Join(t.TempDir(), "dup")
	if err := os.MkdirAll(dirB, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(dirA, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dirB, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dirA, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["text_config"].(map[string]any)["linear_num_key_heads"] = 2 * kh
	writeJSON(t, dirB, "config.json", cfg)

	// dupHeads doubles each of the 2·kh q/k heads (rows of rowLen values) at the start of x.
	dupHeads := func(x []float32, rowLen int) []float32 {
		var out []float32
		for part := 0; part < 2; part++ { // q, then k
			for h := 0; h < kh; h++ {
				head := x[(part*kh+h)*dk*rowLen : (part*kh+h+1)*dk*rowLen]
				out = append(out, head...)
				out = append(out, head...)
			}
		}
		return append(out, x[2*kh*dk*rowLen:]...)
	}
	ck, err := safetensors.OpenDir(dirA)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var infos []safetensors.WriteInfo
	vals := map[string][]float32{}
	for _, ti := range ck.Tensors() {
		v, err := ck.ReadFloat32(ti.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		shape := append([]int64(nil), ti.Shape...)
		if strings.HasSuffix(ti.Name, "linear_attn.in_proj_qkv.weight") || strings.HasSuffix(ti.Name, "linear_attn.conv1d.weight") {
			rowLen := int(ti.NumElements() / ti.Shape[0])
			v = dupHeads(v, rowLen)
			shape[0] += int64(2 * kh * dk)
		}
		infos = append(infos, safetensors.WriteInfo{Name: ti.Name, DType: safetensors.F32, Shape: shape})
		vals[ti.Name] = v
	}
	w, err := safetensors.Create(filepath.Join(dirB, "model.safetensors"), infos, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if err := w.WriteFloat32(in.Name, vals[in.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}

	prompt := []int{17, 250, 3, 99, 512, 42, 7, 300, 11}
	var logits [2][]float32
	for i, dir := range []string{dirA, dirB} {
		out := filepath.Join(t.TempDir(), "m.gguf")
		if _, err := Run(t.Context(), Options{Model: dir, Out: out, OutType: OutF32}, pipeline.Discard); err != nil {
			t.Fatal(err)
		}
		if logits[i], err = o.Logits(out, prompt); err != nil {
			t.Fatal(err)
		}
		o.Unload(out)
	}
	var maxDiff, maxAbs float64
	for i := range logits[0] {
		maxDiff = max(maxDiff, math.Abs(float64(logits[0][i]-logits[1][i])))
		maxAbs = max(maxAbs, math.Abs(float64(logits[0][i])))
	}
	t.Logf("max |logit A - logit B| = %.3g (max |logit| %.3g)", maxDiff, maxAbs)
	if maxDiff > 1e-3 {
		t.Errorf("reordered and duplicated-K models disagree by %g", maxDiff)
	}
}
