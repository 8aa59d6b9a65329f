package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// TestShardOrder checks upstream's processing order on a sharded checkpoint: shard files in name order,
// tensors by name within a shard; stacked experts sit where their last expert tensor was.
func TestShardOrder(t *testing.T) {
	for _, name := range []string{"qwen35", "qwen35moe"} {
		spec, _ := tinymodel.Preset(name)
		spec.MaxShardBytes = 1 << 20
		dir := generate(t, spec)
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range idx.WeightMap {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool {
			a, b := names[i], names[j]
			if idx.WeightMap[a] != idx.WeightMap[b] {
				return idx.WeightMap[a] < idx.WeightMap[b]
			}
			return a < b
		})
		pos := map[string]int{}
		byName := 0
		for i, n := range names {
			pos[n] = i
			if i > 0 && n < names[i-1] {
				byName++
			}
		}
		if byName == 0 {
			t.Logf("%s: shards do not break name order; the test only checks name order", name)
		}
		m, err := Load(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		last := -1
		for _, tt := range m.Tensors {
			p := -1
			for _, s := range tt.Sources {
				p = max(p, pos[s])
			}
			if p < last {
				t.Errorf("%s: %s (from %v) written after a tensor from later in shard order", name, tt.Name, tt.Sources)
			}
			last = p
		}
		m.Close()
	}
}

// TestReadWindows reads every tensor of the qwen35 and qwen35moe presets in random row windows and compares
// them with one whole read, so segment and reorder-block boundaries inside a read are covered.
func TestReadWindows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{"qwen35", "qwen35moe"} {
		spec, _ := tinymodel.Preset(name)
		m, err := Load(generate(t, spec), Options{KeepMTP: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.Tensors {
			tt := &m.Tensors[i]
			whole, err := tt.ReadRows(t.Context(), 0, tt.Rows(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []float32
			buf := make([]float32, 0, 64)
			for r := int64(0); r < tt.Rows(); {
				n := min(tt.Rows()-r, 1+rng.Int64N(5))
				part, err := tt.ReadRows(t.Context(), r, n, buf)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, part...)
				r += n
			}
			if !equalF32(got, whole) {
				t.Errorf("%s %s: windowed read differs", name, tt.Name)
			}
		}
		if _, err := m.Tensors[0].ReadRows(t.Context(), m.Tensors[0].Rows(), 1, nil); err == nil {
			t.Error("read past the last row accepted")
		}
		m.Close()
	}
}

// TestBlockSizeInvariance writes a preset with one row per block and with the default block size: the files
// must be identical.
func TestBlockSizeInvariance(t *testing.T) {
	spec, _ := tinymodel.Preset("qwen35moe")
	dir := generate(t, spec)
	write := func(block int64) []byte {
		out := filepath.Join(t.TempDir(), "o.gguf")
		if _, err := Run(t.Context(), Options{Model: dir, Out: out, OutType: OutBF16, BlockElems: block}, pipeline.Discard); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := write(0)
	if b := write(1); !bytes.Equal(a, b) {
		t.Error("output depends on the block size")
	}
}

// writeShards writes a sharded safetensors checkpoint into dir: shards[i] holds the named tensors (BF16, shape
// from shapes, element j = j + 0.5).
func writeShards(t *testing.T, dir string, shards [][]string, shapes map[string][]int64) {
	t.Helper()
	var plan [][]safetensors.WriteInfo
	var files []string
	var total int64
	for i, names := range shards {
		var infos []safetensors.WriteInfo
		for _, n := range names {
			infos = append(infos, safetensors.WriteInfo{Name: n, DType: safetensors.BF16, Shape: shapes[n]})
			total += infos[len(infos)-1].Size()
		}
		file := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		w, err := safetensors.Create(filepath.Join(dir, file), infos, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			n := int64(1)
			for _, d := range in.Shape {
				n *= d
			}
			if err := w.WriteFloat32(in.Name, seq(int(n), func(j int) float32 { return float32(j) + 0.5 })); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, infos)
		files = append(files, file)
	}
	if err := safetensors.WriteIndex(dir, plan, files, total); err != nil {
		t.Fatal(err)
	}
}

func TestShardOrderReal(t *testing.T) {
	dir := modelDir(t, qwen2Cfg(), qwen2Regex)
	shapes := map[string][]int64{
		"model.norm.weight": {2}, "model.layers.0.input_layernorm.weight": {2},
		"model.embed_tokens.weight": {8, 2}, "lm_head.weight": {8, 2},
	}
	writeShards(t, dir, [][]string{{"model.norm.weight", "model.layers.0.input_layernorm.weight"},
		{"model.embed_tokens.weight", "lm_head.weight"}}, shapes)
	m, err := Load(dir, Options{partial: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := []string{"blk.0.attn_norm.weight", "output_norm.weight", "output.weight", "token_embd.weight"}
	if got := tensorNames(m); !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if got := readAll(t, m, "token_embd.weight"); !equalF32(got, seq(16, func(j int) float32 { return float32(j) + 0.5 })) {
		t.Errorf("token_embd = %v", got)
	}
	if m.OutType != OutBF16 {
		t.Errorf("outtype %s", m.OutType)
	}
}

// TestArtifactHash checks the artifact's size and sha256 against the file on disk for a model whose
// tensors are larger than the writer's buffer.
func TestArtifactHash(t *testing.T) {
	spec, _ := tinymodel.Preset("qwen3")
	spec.Name, spec.VocabSize = "qwen3-wide", 8192 // 8 MiB embedding
	dir := generate(t, spec)
	out := filepath.Join(t.TempDir(), "o.gguf")
	rec := &recorder{}
	res, err := Run(t.Context(), Options{Model: dir, Out: out, OutType: OutF32}, rec)
	if err != nil {
		t.Fatal(err)
	}
	size, sum, err := fsx.HashFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if a := res.Artifacts[0]; a.Size != size || a.SHA256 != sum {
		t.Errorf("artifact %d %s, file %d %s", a.Size, a.SHA256, size, sum)
	}
	if rec.begins != 1 || rec.ends != 1 || rec.err != nil || rec.added != rec.total {
		t.Errorf("reporter: %+v", rec)
	}
}

type recorder struct {
	begins, ends int
	total, added int64
	err          error
	notes        []string
}

func (r *recorder) Begin(_ string, total int64)       { r.begins++; r.total = total }
func (r *recorder) Add(n int64)                       { r.added += n }
func (r *recorder) End(_ string, err error)           { r.ends++; r.err = err }
func (r *recorder) Note(_ pipeline.Level, msg string) { r.notes = append(r.notes, msg) }

// TestBadCheckpointFiles converts real generated checkpoints with damaged files: one-line errors naming the
// file, nothing written.
func TestBadCheckpointFiles(t *testing.T) {
	spec, _ := tinymodel.Preset("qwen2")
	for _, tc := range []struct {
		name   string
		damage func(dir string) error
		want   string
	}{
		{"truncated safetensors", func(dir string) error {
			p := filepath.Join(dir, "model.safetensors")
			st, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.Truncate(p, st.Size()/2)
		}, "model.safetensors"},
		{"no weights", func(dir string) error { return os.Remove(filepath.Join(dir, "model.safetensors")) }, "model.safetensors"},
		{"no config", func(dir string) error { return os.Remove(filepath.Join(dir, "config.json")) }, "config.json"},
		{"bad tokenizer", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "Unigram"}}`), 0o644)
		}, "tokenizer.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := generate(t, spec)
			if err := tc.damage(dir); err != nil {
				t.Fatal(err)
			}
			outDir := t.TempDir()
			_, err := Run(t.Context(), Options{Model: dir, Out: filepath.Join(outDir, "o.gguf")}, pipeline.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q does not name %s on one line", msg, tc.want)
			}
			if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
				t.Errorf("left behind %v", ents)
			}
		})
	}
}
