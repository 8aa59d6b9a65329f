package tinymodel

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// dirHashes returns sha256 of every file in dir.
func dirHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, f)
		f.Close()
		out[e.Name()] = hex.EncodeToString(h.Sum(nil))
	}
	return out
}

func TestDeterministic(t *testing.T) {
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			a, b := t.TempDir(), t.TempDir()
			if err := Generate(a, p); err != nil {
				t.Fatal(err)
			}
			if err := Generate(b, p); err != nil {
				t.Fatal(err)
			}
			ha, hb := dirHashes(t, a), dirHashes(t, b)
			if !reflect.DeepEqual(ha, hb) {
				t.Fatalf("same spec, different files:\n%v\n%v", ha, hb)
			}
			// Regenerating into the same directory gives the same files and
			// leaves no temporary files behind.
			if err := Generate(a, p); err != nil {
				t.Fatal(err)
			}
			if h := dirHashes(t, a); !reflect.DeepEqual(h, ha) {
				t.Fatalf("regenerated files differ: %v", h)
			}
			// A different seed changes the weights but not the tokenizer.
			p2 := p
			p2.Seed++
			c := t.TempDir()
			if err := Generate(c, p2); err != nil {
				t.Fatal(err)
			}
			hc := dirHashes(t, c)
			if hc["tokenizer.json"] != ha["tokenizer.json"] {
				t.Error("seed changed the tokenizer")
			}
			for name, sum := range hc {
				if strings.HasSuffix(name, ".safetensors") && ha[name] == sum {
					t.Errorf("seed did not change %s", name)
				}
			}
		})
	}
}

// A fixed digest of one preset guards against accidental changes to the
// generator, which would silently change every downstream golden.
func TestGoldenDigest(t *testing.T) {
	p, _ := Preset("qwen2")
	dir := t.TempDir()
	if err := Generate(dir, p); err != nil {
		t.Fatal(err)
	}
	h := dirHashes(t, dir)
	const want = "d2712629cbf3356dd842bb9aa74375e6e5a3f80626d00b55b4fcb204d618db27"
	if got := h["model.safetensors"]; got != want {
		t.Errorf("qwen2 model.safetensors sha256 = %s, want %s (if the change is intended, update the constant and every golden derived from the tiny models)", got, want)
	}
}

// readSafetensorsHeader parses a file's header (independently of the
// writer's code) and returns name -> (dtype, shape, offsets).
type stEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

func readHeader(t *testing.T, path string) (map[string]stEntry, int64, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	if n%8 != 0 {
		t.Errorf("%s: header length %d not a multiple of 8", path, n)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]stEntry{}
	for k, v := range raw {
		if k == "__metadata__" {
			continue
		}
		var e stEntry
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatal(err)
		}
		out[k] = e
	}
	return out, int64(8 + n), data
}

func TestWeightsMatchSpec(t *testing.T) {
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			dir := t.TempDir()
			p.DType = BF16
			if err := Generate(dir, p); err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
			all := map[string]stEntry{}
			where := map[string]string{}
			for _, f := range files {
				hdr, start, data := readHeader(t, f)
				var covered int64
				for name, e := range hdr {
					all[name] = e
					where[name] = filepath.Base(f)
					covered += e.Offsets[1] - e.Offsets[0]
					if name == "model.embed_tokens.weight" || name == "model.language_model.embed_tokens.weight" {
						want, shape, err := p.TensorValues(name)
						if err != nil {
							t.Fatal(err)
						}
						if !reflect.DeepEqual(shape, e.Shape) {
							t.Errorf("%s shape %v, TensorValues %v", name, e.Shape, shape)
						}
						body := data[start+e.Offsets[0]:]
						for i := 0; i < 1000; i++ {
							got := math.Float32frombits(uint32(binary.LittleEndian.Uint16(body[2*i:])) << 16)
							if got != want[i] {
								t.Fatalf("%s[%d] = %v, TensorValues %v", name, i, got, want[i])
							}
						}
					}
				}
				if covered != int64(len(data))-start {
					t.Errorf("%s: tensors cover %d of %d data bytes", f, covered, int64(len(data))-start)
				}
			}
			names, _ := p.TensorNames()
			var got []string
			for n := range all {
				got = append(got, n)
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, names) {
				t.Fatalf("tensors %v\nwant %v", got, names)
			}
			if p.MaxShardBytes > 0 {
				if len(files) < 2 {
					t.Errorf("sharded preset wrote %d files", len(files))
				}
				var idx struct {
					Metadata  map[string]int64  `json:"metadata"`
					WeightMap map[string]string `json:"weight_map"`
				}
				b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &idx); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(idx.WeightMap, where) {
					t.Error("index weight_map does not match the shards")
				}
			}
			checkArchTensors(t, p, all)
		})
	}
}

// checkArchTensors spot-checks names and shapes that converters rely on.
func checkArchTensors(t *testing.T, p Spec, all map[string]stEntry) {
	t.Helper()
	want := map[string][]int64{}
	switch p.Arch {
	case Qwen2:
		want["model.layers.0.self_attn.q_proj.bias"] = []int64{256}
		want["model.layers.1.self_attn.k_proj.weight"] = []int64{128, 256}
	case Qwen3:
		want["model.layers.0.self_attn.q_proj.weight"] = []int64{512, 256}
		want["model.layers.0.self_attn.o_proj.weight"] = []int64{256, 512}
		want["model.layers.1.self_attn.q_norm.weight"] = []int64{128}
	case Qwen3MoE:
		want["model.layers.0.mlp.gate.weight"] = []int64{4, 256}
		want["model.layers.1.mlp.experts.3.down_proj.weight"] = []int64{256, 256}
	case Qwen35, Qwen35MoE:
		lp := "model.language_model.layers."
		want[lp+"0.linear_attn.in_proj_qkv.weight"] = []int64{512, 256}
		want[lp+"1.linear_attn.in_proj_z.weight"] = []int64{256, 256}
		want[lp+"2.linear_attn.in_proj_b.weight"] = []int64{4, 256}
		want[lp+"2.linear_attn.in_proj_a.weight"] = []int64{4, 256}
		want[lp+"0.linear_attn.conv1d.weight"] = []int64{512, 1, 4}
		want[lp+"0.linear_attn.A_log"] = []int64{4}
		want[lp+"0.linear_attn.dt_bias"] = []int64{4}
		want[lp+"0.linear_attn.norm.weight"] = []int64{64}
		want[lp+"0.linear_attn.out_proj.weight"] = []int64{256, 256}
		want[lp+"3.self_attn.q_proj.weight"] = []int64{512, 256}
		want[lp+"3.self_attn.q_norm.weight"] = []int64{64}
		want["mtp.fc.weight"] = []int64{256, 512}
		want["mtp.layers.0.self_attn.q_proj.weight"] = []int64{512, 256}
		want["model.visual.patch_embed.proj.weight"] = []int64{32, 3, 2, 4, 4}
		want["lm_head.weight"] = []int64{768, 256}
		if p.Arch == Qwen35MoE {
			want[lp+"0.mlp.experts.gate_up_proj"] = []int64{4, 512, 256}
			want[lp+"0.mlp.experts.down_proj"] = []int64{4, 256, 256}
			want[lp+"3.mlp.shared_expert_gate.weight"] = []int64{1, 256}
		}
		if _, ok := all[lp+"3.linear_attn.A_log"]; ok {
			t.Error("full-attention layer 3 has linear-attention tensors")
		}
	}
	_, hasHead := all["lm_head.weight"]
	if hasHead == p.TiedEmbeddings {
		t.Errorf("tied=%v but lm_head present=%v", p.TiedEmbeddings, hasHead)
	}
	for name, shape := range want {
		e, ok := all[name]
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if !reflect.DeepEqual(e.Shape, shape) {
			t.Errorf("%s shape %v, want %v", name, e.Shape, shape)
		}
	}
}

func TestValueRanges(t *testing.T) {
	p, _ := Preset("qwen35")
	check := func(name string, lo, hi, meanLo, meanHi float64) {
		v, _, err := p.TensorValues(name)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, x := range v {
			if float64(x) < lo || float64(x) > hi {
				t.Fatalf("%s value %v outside [%v, %v]", name, x, lo, hi)
			}
			sum += float64(x)
		}
		if m := sum / float64(len(v)); m < meanLo || m > meanHi {
			t.Errorf("%s mean %v outside [%v, %v]", name, m, meanLo, meanHi)
		}
	}
	lp := "model.language_model."
	check(lp+"norm.weight", -0.2, 0.2, -0.02, 0.02)                                // zero-centred
	check(lp+"layers.0.linear_attn.norm.weight", 0.8, 1.2, 0.98, 1.02)             // plain weight
	check(lp+"layers.0.linear_attn.A_log", math.Log(0.02), math.Log(2), -3.9, 0.7) // log U(0.02, 2)
	check(lp+"layers.3.self_attn.q_proj.weight", -0.15, 0.15, -0.002, 0.002)       // N(0, 0.04²)
	q, _ := Preset("qwen3")
	v, _, _ := q.TensorValues("model.layers.0.input_layernorm.weight")
	var sum float64
	for _, x := range v {
		sum += float64(x)
	}
	if m := sum / float64(len(v)); m < 0.98 || m > 1.02 {
		t.Errorf("qwen3 norm mean %v, want about 1", m)
	}
	// The normal-ish generator has unit variance.
	r := &rng{s: 1}
	var s1, s2 float64
	const n = 200000
	for range n {
		x := r.normal()
		s1 += x
		s2 += x * x
	}
	if mean, vr := s1/n, s2/n-(s1/n)*(s1/n); math.Abs(mean) > 0.01 || math.Abs(vr-1) > 0.02 {
		t.Errorf("normal(): mean %v variance %v", mean, vr)
	}
}

func TestSpecValidation(t *testing.T) {
	bad := []Spec{
		{Arch: "llama"},
		{Arch: Qwen3, NumHeads: 3, NumKVHeads: 2},
		{Arch: Qwen3, VocabSize: 500, TokenizerSize: 700},
		{Arch: Qwen3, TokenizerSize: 100},
		{Arch: Qwen3, TokenizerSize: 5000, VocabSize: 6000},
		{Arch: Qwen35, MRoPESection: []int{11, 11, 10}},
		{Arch: Qwen35, LinearNumValueHeads: 3},
		{Arch: Qwen3MoE, NumExpertsPerTok: 9},
		{Arch: Qwen3, DType: "F8_E4M3"},
	}
	for _, s := range bad {
		if _, err := s.Normalize(); err == nil {
			t.Errorf("spec %+v accepted", s)
		}
		if err := Generate(t.TempDir(), s); err == nil {
			t.Errorf("Generate accepted %+v", s)
		}
	}
	// Overrides on top of defaults.
	s, err := Spec{Arch: Qwen3, NumLayers: 3, VocabSize: 1000}.Normalize()
	if err != nil || s.HiddenSize != 256 || s.NumLayers != 3 || s.TokenizerSize != 700 {
		t.Errorf("normalize: %+v %v", s, err)
	}
	b := Qwen3BenchSpec()
	n, err := b.NumParams()
	if err != nil || n < 550e6 || n > 650e6 {
		t.Errorf("bench spec: %d params, %v", n, err)
	}
}

func TestMixedDTypeQwen35(t *testing.T) {
	p, _ := Preset("qwen35")
	p.DType = BF16
	dir := t.TempDir()
	if err := Generate(dir, p); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	counts := map[string]int{}
	for _, f := range files {
		hdr, _, _ := readHeader(t, f)
		for name, e := range hdr {
			counts[e.DType]++
			keep := strings.HasSuffix(name, "linear_attn.A_log") || strings.HasSuffix(name, "linear_attn.norm.weight")
			if keep != (e.DType == F32) {
				t.Errorf("%s stored as %s", name, e.DType)
			}
			if dt, _ := p.TensorDType(name); dt != e.DType {
				t.Errorf("TensorDType(%s) = %s, file has %s", name, dt, e.DType)
			}
		}
	}
	if counts[F32] != 6 || counts[BF16] == 0 {
		t.Errorf("dtype counts %v, want 6 F32 (3 linear layers x 2)", counts)
	}
}
