package merge

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// mergeCase is one base + adapters whose merge is checked against the naive float64 merge.
type mergeCase struct {
	name      string
	base      tinymodel.Spec
	adapters  func(t *testing.T, dir string, base tinymodel.Spec) []naiveAdapter
	mapName   func(string) string
	wantNames []string // tensors the merge must change (subset)
	untied    bool
}

func toQwen35(s string) string {
	if strings.HasPrefix(s, "model.") && !strings.HasPrefix(s, "model.language_model.") {
		return "model.language_model." + strings.TrimPrefix(s, "model.")
	}
	return s
}

func mergeCases(t *testing.T) []mergeCase {
	bf16 := func(s tinymodel.Spec) tinymodel.Spec { s.DType = tinymodel.BF16; return s }
	one := func(spec tinymodel.AdapterSpec) func(*testing.T, string, tinymodel.Spec) []naiveAdapter {
		return func(t *testing.T, dir string, base tinymodel.Spec) []naiveAdapter {
			return []naiveAdapter{{dir: genAdapter(t, filepath.Join(dir, "a"), base, spec)}}
		}
	}
	return []mergeCase{
		{name: "qwen3-lora", base: preset(t, "qwen3"), adapters: one(tinymodel.AdapterSpec{Seed: 1}),
			wantNames: []string{"model.layers.1.self_attn.o_proj.weight"}},
		{name: "qwen2-bf16-rslora-patterns", base: bf16(preset(t, "qwen2")), adapters: one(tinymodel.AdapterSpec{Seed: 2, Rank: 8, Alpha: 16, RSLoRA: true,
			TargetModules: []string{"q_proj", "v_proj", "down_proj"}, Layers: []int{1},
			RankPattern: map[string]int{"down_proj": 4}, AlphaPattern: map[string]float64{"v_proj": 4}}),
			wantNames: []string{"model.layers.1.mlp.down_proj.weight", "model.layers.1.self_attn.v_proj.weight"}},
		{name: "qwen2-dora-modules-to-save", base: preset(t, "qwen2"), adapters: one(tinymodel.AdapterSpec{Seed: 3, DoRA: true,
			TargetModules: []string{"k_proj", "up_proj"}, ModulesToSave: []string{"lm_head"}}),
			wantNames: []string{"lm_head.weight", "model.layers.0.mlp.up_proj.weight"}},
		{name: "qwen35-embedding-linear-attn", base: preset(t, "qwen35"), adapters: one(tinymodel.AdapterSpec{Seed: 4,
			TargetModules: []string{"in_proj_qkv", "out_proj", "q_proj", "embed_tokens"}}),
			wantNames: []string{"model.language_model.embed_tokens.weight", "model.language_model.layers.0.linear_attn.in_proj_qkv.weight"}},
		{name: "qwen35-text-only-keys", base: bf16(preset(t, "qwen35")), adapters: one(tinymodel.AdapterSpec{Seed: 5, TextOnly: true, DType: tinymodel.BF16,
			TargetModules: []string{"o_proj", "gate_proj"}, ModulesToSave: []string{"embed_tokens"}}),
			mapName: toQwen35, wantNames: []string{"model.language_model.embed_tokens.weight", "model.language_model.layers.3.self_attn.o_proj.weight"}},
		{name: "qwen3moe-experts", base: preset(t, "qwen3moe"), adapters: one(tinymodel.AdapterSpec{Seed: 6, Rank: 4, Alpha: 8,
			TargetModules: []string{"gate_proj", "down_proj"}}),
			wantNames: []string{"model.layers.0.mlp.experts.3.down_proj.weight"}},
		{name: "two-adapters-weighted", base: bf16(preset(t, "qwen2")), adapters: func(t *testing.T, dir string, base tinymodel.Spec) []naiveAdapter {
			a := genAdapter(t, filepath.Join(dir, "a"), base, tinymodel.AdapterSpec{Seed: 7, TargetModules: []string{"q_proj", "o_proj"}})
			b := genAdapter(t, filepath.Join(dir, "b"), base, tinymodel.AdapterSpec{Seed: 8, Rank: 4, TargetModules: []string{"q_proj", "up_proj"}, RSLoRA: true})
			return []naiveAdapter{{dir: a, weight: 0.5}, {dir: b, weight: -2}}
		}, wantNames: []string{"model.layers.0.self_attn.q_proj.weight"}},
		{name: "tied-lm-head-lora", base: preset(t, "qwen3"), untied: true, adapters: func(t *testing.T, dir string, base tinymodel.Spec) []naiveAdapter {
			rng := rand.New(rand.NewPCG(9, 9))
			ts := []tensor{
				{"base_model.model.lm_head.lora_A.weight", safetensors.F32, []int64{4, 256}, randVals(rng, 4*256, 0.06)},
				{"base_model.model.lm_head.lora_B.weight", safetensors.F32, []int64{768, 4}, randVals(rng, 768*4, 0.05)},
			}
			return []naiveAdapter{{dir: writeAdapter(t, filepath.Join(dir, "a"), loraConfig(4, 8, []string{"lm_head"}), ts)}}
		}, wantNames: []string{"lm_head.weight"}},
		{name: "tied-embedding-dora", base: bf16(preset(t, "qwen2-tied")), untied: true, adapters: func(t *testing.T, dir string, base tinymodel.Spec) []naiveAdapter {
			rng := rand.New(rand.NewPCG(10, 10))
			cfg := loraConfig(4, 4, `model\.embed_tokens|model\.layers\.0\.self_attn\.q_proj`)
			cfg["use_dora"] = true
			mag := make([]float32, 256)
			for i := range mag {
				mag[i] = float32(2.7 * (1 + 0.1*rng.NormFloat64())) // ≈ column norms of a [768,256] std-0.1 embedding
			}
			qmag := make([]float32, 256)
			for i := range qmag {
				qmag[i] = float32(0.64 * (1 + 0.1*rng.NormFloat64()))
			}
			ts := []tensor{
				{"base_model.model.model.embed_tokens.lora_embedding_A", safetensors.F32, []int64{4, 768}, randVals(rng, 4*768, 0.5)},
				{"base_model.model.model.embed_tokens.lora_embedding_B", safetensors.F32, []int64{256, 4}, randVals(rng, 256*4, 0.05)},
				{"base_model.model.model.embed_tokens.lora_magnitude_vector", safetensors.F32, []int64{256}, mag},
				{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", safetensors.BF16, []int64{4, 256}, randVals(rng, 4*256, 0.06)},
				{"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", safetensors.BF16, []int64{256, 4}, randVals(rng, 256*4, 0.05)},
				{"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", safetensors.BF16, []int64{256}, qmag},
			}
			return []naiveAdapter{{dir: writeAdapter(t, filepath.Join(dir, "a"), cfg, ts)}}
		}, wantNames: []string{"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"}},
		{name: "lora-bias-and-saved-bias", base: preset(t, "qwen2"), adapters: func(t *testing.T, dir string, base tinymodel.Spec) []naiveAdapter {
			rng := rand.New(rand.NewPCG(11, 11))
			cfg := loraConfig(2, 4, []string{"k_proj"})
			cfg["lora_bias"] = true
			cfg["bias"] = "all"
			ts := []tensor{
				{"base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight", safetensors.F32, []int64{2, 256}, randVals(rng, 2*256, 0.06)},
				{"base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight", safetensors.F32, []int64{128, 2}, randVals(rng, 128*2, 0.05)},
				{"base_model.model.model.layers.1.self_attn.k_proj.lora_B.bias", safetensors.F32, []int64{128}, randVals(rng, 128, 0.05)},
				{"base_model.model.model.layers.1.self_attn.k_proj.base_layer.bias", safetensors.F32, []int64{128}, randVals(rng, 128, 0.02)},
				{"base_model.model.model.layers.0.self_attn.q_proj.bias", safetensors.F32, []int64{256}, randVals(rng, 256, 0.02)},
			}
			return []naiveAdapter{{dir: writeAdapter(t, filepath.Join(dir, "a"), cfg, ts)}}
		}, mapName: func(s string) string { return strings.Replace(s, ".base_layer.", ".", 1) },
			wantNames: []string{"model.layers.1.self_attn.k_proj.bias", "model.layers.0.self_attn.q_proj.bias"}},
	}
}

func TestMergeMatchesNaive(t *testing.T) {
	for _, c := range mergeCases(t) {
		t.Run(c.name, func(t *testing.T) { runMergeCase(t, c) })
	}
}

// runMergeCase merges one case with Run and through Wrap and compares both with the naive merge.
func runMergeCase(t *testing.T, c mergeCase) {
	dir := t.TempDir()
	base := genBase(t, filepath.Join(dir, "base"), c.base)
	nads := c.adapters(t, dir, c.base)
	mapName := c.mapName
	if mapName == nil {
		mapName = identity
	}
	tied := ""
	if c.base.TiedEmbeddings {
		tied = "model.embed_tokens.weight"
	}
	want := naive(t, tinyBase(t, c.base), tied, nads, mapName)
	if c.untied && want["lm_head.weight"] == nil { // untied head with no change of its own: the base embedding
		e := tinyBase(t, c.base)(tied)
		want["lm_head.weight"] = &e
	}
	for _, n := range c.wantNames {
		if want[n] == nil {
			t.Fatalf("test case does not change %q", n)
		}
	}
	o := Options{Base: base, Out: filepath.Join(dir, "out"), MaxShardBytes: 1 << 20}
	for _, a := range nads {
		o.Adapters = append(o.Adapters, AdapterRef{Path: a.dir, Weight: a.weight})
	}
	res, err := Run(context.Background(), o, pipeline.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Untied != c.untied {
		t.Errorf("Untied = %v, want %v", res.Untied, c.untied)
	}
	if len(res.Report.Tensors) != len(want) {
		t.Errorf("report lists %d tensors, the naive merge changed %d", len(res.Report.Tensors), len(want))
	}
	checkOutput(t, o.Out, base, want)
	checkConfig(t, o.Out, c.untied)
	checkBaseHashes(t, o.Out, base)
	checkWrap(t, base, nads, want)
}

func checkConfig(t *testing.T, out string, untied bool) {
	t.Helper()
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if untied && tieFlag(ck.Config) {
		t.Error("merged config.json still ties the embeddings")
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json", ProvenanceName} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("merged folder lacks %s", f)
		}
	}
	var prov provenance
	data, _ := os.ReadFile(filepath.Join(out, ProvenanceName))
	if err := json.Unmarshal(data, &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Base.Files) == 0 || len(prov.Adapters) == 0 || len(prov.Adapters[0].Files) != 2 || len(prov.Tensors) == 0 {
		t.Errorf("provenance incomplete: %d base files, %d adapters, %d tensors", len(prov.Base.Files), len(prov.Adapters), len(prov.Tensors))
	}
	for _, f := range prov.Base.Files {
		if len(f.SHA256) != 64 {
			t.Errorf("provenance: base file %s has hash %q", f.Name, f.SHA256)
		}
	}
}

// checkBaseHashes compares the provenance record's base file hashes (hashed from the merge's maps) with the
// files' own.
func checkBaseHashes(t *testing.T, out, base string) {
	t.Helper()
	var prov provenance
	data, _ := os.ReadFile(filepath.Join(out, ProvenanceName))
	if err := json.Unmarshal(data, &prov); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(base)
	if len(prov.Base.Files) != len(ents) {
		t.Errorf("provenance lists %d base files, the base has %d", len(prov.Base.Files), len(ents))
	}
	for _, f := range prov.Base.Files {
		n, sum, err := fsxHash(filepath.Join(base, f.Name))
		if err != nil || n != f.Size || sum != f.SHA256 {
			t.Errorf("provenance: base file %s: %d %s, the file has %d %s (%v)", f.Name, f.Size, f.SHA256, n, sum, err)
		}
	}
}

// checkWrap reads the merged tensors through Wrap in odd row blocks from several goroutines and compares them
// with the naive values.
func checkWrap(t *testing.T, base string, nads []naiveAdapter, want map[string]*ntensor) {
	t.Helper()
	ck, err := checkpoint.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ads []Adapter
	for _, a := range nads {
		ad, err := OpenAdapter(a.dir, a.weight)
		if err != nil {
			t.Fatal(err)
		}
		defer ad.Close()
		ads = append(ads, ad)
	}
	src, _, err := Wrap(context.Background(), ck, ck.Config, ads)
	if err != nil {
		t.Fatal(err)
	}
	src.cache.limit = 1 // force evictions and reloads
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := 0
	near := map[string]int{}
	for name, w := range want {
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cols := w.shape[len(w.shape)-1]
				rows := int64(len(w.vals)) / cols
				step := int64(3 + 2*g)
				var buf []float32
				for r0 := int64(g); r0 < rows; r0 += step {
					n := min(step, rows-r0)
					var err error
					buf, err = src.ReadRows(context.Background(), name, r0, n, buf)
					if err != nil {
						t.Error(err)
						return
					}
					for i, x := range buf {
						j := int(r0*cols) + i
						if e := roundTo(w.dtype, w.vals[j]); math.Float32bits(e) != math.Float32bits(x) {
							mu.Lock()
							if w.near(j, x) {
								near[name]++
							} else {
								bad++
							}
							mu.Unlock()
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	if bad > 0 {
		t.Errorf("Wrap.ReadRows: %d values differ from the naive merge", bad)
	}
	for name, n := range near {
		if max := 3 * maxNear(len(want[name].vals)); n > max { // each value is read by three goroutines
			t.Errorf("Wrap.ReadRows %s: %d values round the other way at a rounding boundary, more than %d", name, n, max)
		}
	}
}

// TestFanInFanOut merges into a GPT-2-style base whose Conv1D weights are stored [in, out], with DoRA (norm per
// stored column) and a LoRA bias.
func TestFanInFanOut(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(12, 12))
	const d = 48
	base := filepath.Join(dir, "base")
	os.MkdirAll(base, 0o755)
	bt := map[string]tensor{
		"transformer.h.0.attn.c_attn.weight": {"transformer.h.0.attn.c_attn.weight", safetensors.F32, []int64{d, 3 * d}, randVals(rng, d*3*d, 0.05)},
		"transformer.h.0.attn.c_attn.bias":   {"transformer.h.0.attn.c_attn.bias", safetensors.F32, []int64{3 * d}, randVals(rng, 3*d, 0.05)},
		"transformer.h.0.attn.c_proj.weight": {"transformer.h.0.attn.c_proj.weight", safetensors.F32, []int64{d, d}, randVals(rng, d*d, 0.05)},
		"transformer.wte.weight":             {"transformer.wte.weight", safetensors.F32, []int64{64, d}, randVals(rng, 64*d, 0.1)},
	}
	var list []tensor
	for _, x := range bt {
		list = append(list, x)
	}
	writeST(t, filepath.Join(base, "model.safetensors"), list)
	writeJSON(t, filepath.Join(base, "config.json"), map[string]any{"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"}, "tie_word_embeddings": true})
	cfg := loraConfig(4, 8, []string{"c_attn", "c_proj"})
	cfg["fan_in_fan_out"], cfg["use_dora"], cfg["lora_bias"] = true, true, true
	mag := func(n int64) []float32 {
		m := make([]float32, n)
		for i := range m {
			m[i] = float32(0.35 * (1 + 0.1*rng.NormFloat64()))
		}
		return m
	}
	ad := writeAdapter(t, filepath.Join(dir, "a"), cfg, []tensor{
		{"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", safetensors.F32, []int64{4, d}, randVals(rng, 4*d, 0.1)},
		{"base_model.model.transformer.h.0.attn.c_attn.lora_B.weight", safetensors.F32, []int64{3 * d, 4}, randVals(rng, 3*d*4, 0.05)},
		{"base_model.model.transformer.h.0.attn.c_attn.lora_B.bias", safetensors.F32, []int64{3 * d}, randVals(rng, 3*d, 0.05)},
		{"base_model.model.transformer.h.0.attn.c_attn.lora_magnitude_vector", safetensors.F32, []int64{3 * d}, mag(3 * d)},
		{"base_model.model.transformer.h.0.attn.c_proj.lora_A.weight", safetensors.F32, []int64{4, d}, randVals(rng, 4*d, 0.1)},
		{"base_model.model.transformer.h.0.attn.c_proj.lora_B.weight", safetensors.F32, []int64{d, 4}, randVals(rng, d*4, 0.05)},
		{"base_model.model.transformer.h.0.attn.c_proj.lora_B.bias", safetensors.F32, []int64{d}, randVals(rng, d, 0.05)},
		{"base_model.model.transformer.h.0.attn.c_proj.lora_magnitude_vector", safetensors.F32, []int64{d}, mag(d)},
	})
	// c_proj has no base bias: lora_bias cannot be merged there.
	_, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: filepath.Join(dir, "bad")}, nil)
	if err == nil || !strings.Contains(err.Error(), "c_proj.bias") {
		t.Fatalf("lora_B.bias without a base bias: err = %v", err)
	}
	// Give c_proj a bias and merge for real.
	bt["transformer.h.0.attn.c_proj.bias"] = tensor{"transformer.h.0.attn.c_proj.bias", safetensors.F32, []int64{d}, randVals(rng, d, 0.05)}
	list = append(list, bt["transformer.h.0.attn.c_proj.bias"])
	writeST(t, filepath.Join(base, "model.safetensors"), list)
	baseVal := func(name string) ntensor {
		x := bt[name]
		v := make([]float64, len(x.vals))
		for i, f := range x.vals {
			v[i] = float64(f)
		}
		return ntensor{vals: v, shape: x.shape, dtype: "F32"}
	}
	nads := []naiveAdapter{{dir: ad}}
	want := naive(t, baseVal, "", nads, identity)
	out := filepath.Join(dir, "out")
	res, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 4 || len(res.Report.Tensors) != 4 {
		t.Fatalf("changed %d tensors, report %d; want 4", len(want), len(res.Report.Tensors))
	}
	checkOutput(t, out, base, want)
	checkWrap(t, base, nads, want)
}
