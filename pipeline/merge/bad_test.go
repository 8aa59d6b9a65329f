package merge

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// TestBadInput: every broken adapter or base fails with one line naming what is wrong, and leaves nothing.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	q3 := preset(t, "qwen3")
	base := genBase(t, filepath.Join(dir, "base"), q3)
	rng := rand.New(rand.NewPCG(1, 2))
	qa := "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
	qb := "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
	pair := func(r, in, out int64) []tensor {
		return []tensor{
			{qa, safetensors.F32, []int64{r, in}, randVals(rng, r*in, 0.05)},
			{qb, safetensors.F32, []int64{out, r}, randVals(rng, out*r, 0.05)},
		}
	}
	hidden := tinymodel.Spec{Arch: tinymodel.Qwen3, HiddenSize: 128, HeadDim: 32}
	withNaN := pair(4, 256, 512)
	withNaN[1].vals[17] = float32(math.NaN())
	withInf := pair(4, 256, 512)
	withInf[0].vals[3] = float32(math.Inf(-1))
	zero := pair(4, 256, 512)
	clear(zero[1].vals)
	q0 := `model\.layers\.0\.self_attn\.q_proj` // the one module the hand-made adapters hold (target_modules regex)
	q35base := genBase(t, filepath.Join(dir, "q35base"), preset(t, "qwen35"))
	quantBase := genBase(t, filepath.Join(dir, "qbase"), q3)
	writeJSON(t, filepath.Join(quantBase, "config.json"), map[string]any{"architectures": []string{"Qwen3ForCausalLM"},
		"quantization_config": map[string]any{"quant_method": "bitsandbytes", "load_in_4bit": true}})
	gguf := filepath.Join(dir, "model.gguf")
	os.WriteFile(gguf, []byte("GGUF\x03\x00\x00\x00"), 0o644)
	ggufDir := filepath.Join(dir, "gguf-folder")
	os.MkdirAll(ggufDir, 0o755)
	os.WriteFile(filepath.Join(ggufDir, "Qwen3-Q4_K_M.gguf"), []byte("GGUF\x03\x00\x00\x00"), 0o644)

	cases := []struct {
		name  string
		base  string
		setup func(d string) string // returns the adapter folder
		want  []string              // substrings of the error
		typ   any
	}{
		{"rank-mismatch-config", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(8, 16, []string{"q_proj"}), pair(4, 256, 512))
		}, []string{"rank mismatch", qa, "[4 256]", "r = 8"}, &FormatError{}},
		{"rank-mismatch-factors", base, func(d string) string {
			ts := pair(4, 256, 512)
			ts[1] = tensor{qb, safetensors.F32, []int64{512, 2}, randVals(rng, 1024, 0.05)}
			return writeAdapter(t, d, loraConfig(4, 16, []string{"q_proj"}), ts)
		}, []string{"rank mismatch", "[4 256]", "[512 2]"}, &FormatError{}},
		{"missing-base-tensor", base, func(d string) string {
			ts := pair(4, 256, 512)
			ts[0].name = strings.Replace(qa, "layers.0", "layers.7", 1)
			ts[1].name = strings.Replace(qb, "layers.0", "layers.7", 1)
			return writeAdapter(t, d, loraConfig(4, 16, []string{"q_proj"}), ts)
		}, []string{`module "model.layers.7.self_attn.q_proj" does not exist in the base`, "layer 7", "Qwen3ForCausalLM (qwen3), 2 layers"}, &FormatError{}},
		{"target-module-absent", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, []string{"q_proj", "c_attn"}), pair(4, 256, 512))
		}, []string{"target_modules", `"c_attn"`}, &FormatError{}},
		{"other-architecture", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, []string{"c_attn"}), []tensor{
				{"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", safetensors.F32, []int64{4, 256}, randVals(rng, 1024, 0.05)},
				{"base_model.model.transformer.h.0.attn.c_attn.lora_B.weight", safetensors.F32, []int64{768, 4}, randVals(rng, 3072, 0.05)},
			})
		}, []string{`"transformer.h.0.attn.c_attn" does not exist in the base`, "another architecture", "Qwen3ForCausalLM"}, &FormatError{}},
		{"qwen3moe-adapter-into-qwen35", q35base, func(d string) string {
			return genAdapter(t, d, preset(t, "qwen3moe"), tinymodel.AdapterSpec{Seed: 4, TargetModules: []string{"gate_proj", "down_proj"}})
		}, []string{"another architecture", `module "model.layers.0.mlp.experts.0.down_proj" does not exist in the base`,
			`trained on "qwen3moe"`, "per-expert MoE modules", "Qwen3_5ForConditionalGeneration", "4 layers"}, &FormatError{}},
		{"fewer-layers", q35base, func(d string) string {
			// A dense Qwen3 adapter on the MLPs: every module exists in Qwen3.5 with the same shape, but it has
			// two layers where the base has four.
			return genAdapter(t, d, preset(t, "qwen3"), tinymodel.AdapterSpec{Seed: 5, TargetModules: []string{"gate_proj", "up_proj", "down_proj"}})
		}, []string{"another architecture", "stop at layer 1", "fewer layers", "model.language_model.layers.2.mlp.down_proj"}, &FormatError{}},
		{"other-hidden-size", base, func(d string) string {
			return genAdapter(t, d, hidden, tinymodel.AdapterSpec{Seed: 3})
		}, []string{"shape mismatch", "k_proj", "[8 128]", "[256 256]"}, &FormatError{}},
		{"nan", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, q0), withNaN)
		}, []string{qb, "NaN", "[512 4]"}, &FormatError{}},
		{"inf", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, q0), withInf)
		}, []string{qa, "-Inf", "[4 256]"}, &FormatError{}},
		{"changes-nothing", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, q0), zero)
		}, []string{"change nothing"}, &FormatError{}},
		{"empty-adapter", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, []string{"q_proj"}), nil)
		}, []string{"change nothing"}, &FormatError{}},
		{"not-targeted", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, []string{"k_proj"}), pair(4, 256, 512))
		}, []string{"does not select", "model.layers.0.self_attn.q_proj"}, &FormatError{}},
		{"dora-without-magnitude", base, func(d string) string {
			c := loraConfig(4, 16, []string{"q_proj"})
			c["use_dora"] = true
			return writeAdapter(t, d, c, pair(4, 256, 512))
		}, []string{"use_dora", "lora_magnitude_vector"}, &FormatError{}},
		{"pickle", base, func(d string) string {
			os.MkdirAll(d, 0o755)
			writeJSON(t, filepath.Join(d, AdapterConfigName), loraConfig(4, 16, []string{"q_proj"}))
			os.WriteFile(filepath.Join(d, "adapter_model.bin"), []byte("\x80\x02"), 0o644)
			return d
		}, []string{"adapter_model.bin", "pickle", "safetensors"}, &UnsupportedError{}},
		{"quantized-base", quantBase, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, []string{"q_proj"}), pair(4, 256, 512))
		}, []string{"quantized", "bitsandbytes 4-bit", "16-bit"}, &UnsupportedError{}},
		{"gguf-base", gguf, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, []string{"q_proj"}), pair(4, 256, 512))
		}, []string{"GGUF", "16-bit"}, &UnsupportedError{}},
		{"gguf-folder-base", ggufDir, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, []string{"q_proj"}), pair(4, 256, 512))
		}, []string{"GGUF", "Qwen3-Q4_K_M.gguf", "16-bit"}, &UnsupportedError{}},
		{"fused-expert-lora", base, func(d string) string {
			c := loraConfig(4, 16, []string{"q_proj"})
			c["target_parameters"] = []string{"experts.gate_up_proj"}
			return writeAdapter(t, d, c, pair(4, 256, 512))
		}, []string{"target_parameters"}, &UnsupportedError{}},
		{"modules-to-save-missing", base, func(d string) string {
			c := loraConfig(4, 16, []string{"q_proj"})
			c["modules_to_save"] = []string{"lm_head"}
			return writeAdapter(t, d, c, pair(4, 256, 512))
		}, []string{"modules_to_save", "lm_head"}, &FormatError{}},
		{"resized-vocab", base, func(d string) string {
			return writeAdapter(t, d, loraConfig(4, 16, []string{"q_proj"}), append(pair(4, 256, 512),
				tensor{"base_model.model.model.embed_tokens.weight", safetensors.F32, []int64{800, 256}, randVals(rng, 800*256, 0.1)}))
		}, []string{"embed_tokens.weight", "[800 256]", "[768 256]"}, &FormatError{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			work := filepath.Join(dir, c.name)
			os.MkdirAll(work, 0o755)
			ad := c.setup(filepath.Join(work, "adapter"))
			out := filepath.Join(work, "out")
			_, err := Run(context.Background(), Options{Base: c.base, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil)
			if err == nil {
				t.Fatal("merge succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			switch c.typ.(type) {
			case *FormatError:
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Errorf("error %T is not a *FormatError", err)
				}
			case *UnsupportedError:
				var ue *UnsupportedError
				if !errors.As(err, &ue) {
					t.Errorf("error %T is not an *UnsupportedError", err)
				}
			}
			ents, _ := os.ReadDir(work)
			for _, e := range ents {
				if e.Name() != "adapter" {
					t.Errorf("left %s behind", e.Name())
				}
			}
		})
	}
}
