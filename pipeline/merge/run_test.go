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

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/hashcache"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// countingReporter records progress.
type countingReporter struct {
	mu     sync.Mutex
	total  map[string]int64
	added  int64
	notes  []string
	ended  []string
	errors int
}

func (r *countingReporter) Begin(step string, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total == nil {
		r.total = map[string]int64{}
	}
	r.total[step] = total
}
func (r *countingReporter) Add(n int64) { r.mu.Lock(); r.added += n; r.mu.Unlock() }
func (r *countingReporter) End(step string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, step)
	if err != nil {
		r.errors++
	}
}
func (r *countingReporter) Note(_ pipeline.Level, msg string) {
	r.mu.Lock()
	r.notes = append(r.notes, msg)
	r.mu.Unlock()
}

func TestRunOutputFolder(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen35")
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 1, TargetModules: []string{"q_proj"}})
	// The training run saved its own chat template next to the adapter: it wins over the base's.
	os.WriteFile(filepath.Join(ad, "chat_template.jinja"), []byte("{{ trained }}"), 0o644)
	out := filepath.Join(dir, "out")
	rep := &countingReporter{}
	res, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out, MaxShardBytes: 2 << 20}, rep)
	if err != nil {
		t.Fatal(err)
	}
	if rep.total["merge"] != res.Bytes || rep.added != res.Bytes || rep.errors != 0 {
		t.Errorf("progress: total %d, added %d, errors %d; tensor bytes %d", rep.total["merge"], rep.added, rep.errors, res.Bytes)
	}
	if _, err := os.Stat(filepath.Join(out, safetensors.IndexFileName)); err != nil {
		t.Error("sharded output has no index")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "chat_template.jinja")); string(b) != "{{ trained }}" {
		t.Errorf("chat template %q, want the adapter's", b)
	}
	for _, a := range res.Artifacts {
		n, sum, err := hashFile(a.Path)
		if err != nil || n != a.Size || sum != a.SHA256 {
			t.Errorf("artifact %s: size %d sha %s, file has %d %s (%v)", a.Path, a.Size, a.SHA256, n, sum, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left %s", e.Name())
		}
	}

	// A second run replaces the earlier merge; a folder that is not a merge is refused.
	if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad, Weight: 0.5}}, Out: out}, nil); err != nil {
		t.Fatalf("re-run into an earlier merge: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, safetensors.IndexFileName)); err == nil {
		t.Error("stale index from the first run survived")
	}
	foreign := filepath.Join(dir, "foreign")
	os.MkdirAll(foreign, 0o755)
	os.WriteFile(filepath.Join(foreign, "keep.txt"), []byte("x"), 0o644)
	if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: foreign}, nil); err == nil {
		t.Error("merge overwrote a folder that is not an earlier merge")
	}
	if _, err := os.Stat(filepath.Join(foreign, "keep.txt")); err != nil {
		t.Error("foreign folder damaged")
	}
}

func hashFile(p string) (int64, string, error) {
	return fsxHash(p)
}

func TestCancelLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen3")
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 1})
	ctx, cancel := context.WithCancel(context.Background())
	rep := &cancelAfter{n: 1 << 20, cancel: cancel}
	_, err := Run(ctx, Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: filepath.Join(dir, "out")}, rep)
	if err == nil {
		t.Fatal("cancelled merge succeeded")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "base" && e.Name() != "a" {
			t.Errorf("left %s", e.Name())
		}
	}
}

// cancelAfter cancels once n bytes of progress were reported.
type cancelAfter struct {
	mu     sync.Mutex
	n      int64
	cancel func()
}

func (c *cancelAfter) Begin(string, int64)         {}
func (c *cancelAfter) End(string, error)           {}
func (c *cancelAfter) Note(pipeline.Level, string) {}
func (c *cancelAfter) Add(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
}

// TestEnsureWeightTying: a modules_to_save embedding trained with ensure_weight_tying stays tied.
func TestEnsureWeightTying(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen3")
	base := genBase(t, filepath.Join(dir, "base"), spec)
	rng := rand.New(rand.NewPCG(3, 3))
	cfg := loraConfig(4, 8, []string{"q_proj"})
	cfg["modules_to_save"] = []string{"embed_tokens"}
	cfg["ensure_weight_tying"] = true
	ts := []tensor{
		{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", safetensors.F32, []int64{4, 256}, randVals(rng, 1024, 0.05)},
		{"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", safetensors.F32, []int64{512, 4}, randVals(rng, 2048, 0.05)},
		{"base_model.model.model.embed_tokens.modules_to_save.weight", safetensors.F32, []int64{768, 256}, randVals(rng, 768*256, 0.1)},
	}
	ad := writeAdapter(t, filepath.Join(dir, "a"), cfg, ts)
	want := naive(t, tinyBase(t, spec), "model.embed_tokens.weight", []naiveAdapter{{dir: ad}}, identity)
	out := filepath.Join(dir, "out")
	res, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Untied {
		t.Error("untied despite ensure_weight_tying")
	}
	checkOutput(t, out, base, want)
	// Without ensure_weight_tying the head keeps the base embedding and the model is untied.
	delete(cfg, "ensure_weight_tying")
	writeJSON(t, filepath.Join(ad, AdapterConfigName), cfg)
	res, err = Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Untied {
		t.Error("changed embedding of a tied base did not untie")
	}
	e := tinyBase(t, spec)("model.embed_tokens.weight")
	want["lm_head.weight"] = &e
	checkOutput(t, out, base, want)
}

// TestWrapUntiedConfig: the fused path sees lm_head.weight and can fix the config itself.
func TestWrapUntiedConfig(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen3")
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 5, TargetModules: []string{"embed_tokens"}})
	ck, err := checkpoint.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	a, err := OpenAdapter(ad, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	src, rep, err := Wrap(context.Background(), ck, ck.Config, []Adapter{a})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Untied {
		t.Fatal("embedding LoRA on a tied base: not untied")
	}
	found := false
	for _, ti := range src.Tensors() {
		found = found || ti.Name == "lm_head.weight"
	}
	if !found {
		t.Error("untied source lacks lm_head.weight")
	}
	head, err := src.ReadRows(context.Background(), "lm_head.weight", 3, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	emb, _ := ck.ReadRows(context.Background(), "model.embed_tokens.weight", 3, 2, nil)
	for i := range head {
		if head[i] != emb[i] {
			t.Fatal("untied head is not the base embedding")
		}
	}
	cfg := UntiedConfig(ck.Config)
	if tieFlag(cfg) || !tieFlag(ck.Config) {
		t.Error("UntiedConfig did not untie (or changed its input)")
	}
}

func fsxHash(p string) (int64, string, error) { return fsx.HashFile(p) }

// TestHashInputHFCache: a file of the Hugging Face cache (symlink to blobs/<sha256>) is not re-read; any other
// file is hashed.
func TestHashInputHFCache(t *testing.T) {
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs")
	os.MkdirAll(blobs, 0o755)
	name := strings.Repeat("ab", 32)
	os.WriteFile(filepath.Join(blobs, name), []byte("not what the name says"), 0o644)
	snap := filepath.Join(dir, "snapshots")
	os.MkdirAll(snap, 0o755)
	os.Symlink(filepath.Join(blobs, name), filepath.Join(snap, "model.safetensors"))
	n, sum, err := hashInput(context.Background(), filepath.Join(snap, "model.safetensors"), nil)
	if err != nil || sum != name || n != 22 {
		t.Errorf("cache file: %d %s %v", n, sum, err)
	}
	os.WriteFile(filepath.Join(snap, "plain.json"), []byte("x"), 0o644)
	if _, sum, _ := hashInput(context.Background(), filepath.Join(snap, "plain.json"), nil); sum != "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881" {
		t.Errorf("plain file hash %s", sum)
	}
}

// TestTieFlagWithHead: a base that stores lm_head.weight but says tie_word_embeddings=true would be re-tied on
// load; a merge that changes the head must untie the config.
func TestTieFlagWithHead(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen2")
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ck, err := checkpoint.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ck.Config
	ck.Close()
	cfg["tie_word_embeddings"] = true
	writeJSON(t, filepath.Join(base, "config.json"), cfg)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 6, TargetModules: []string{"q_proj"}, ModulesToSave: []string{"lm_head"}})
	out := filepath.Join(dir, "out")
	res, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Untied {
		t.Error("not untied")
	}
	checkConfig(t, out, true)
	// Reading a whole changed tensor in one call (sub-blocks inside) equals reading it row by row.
	ck2, _ := checkpoint.Open(base)
	defer ck2.Close()
	a, _ := OpenAdapter(ad, 1)
	defer a.Close()
	src, _, err := Wrap(context.Background(), ck2, ck2.Config, []Adapter{a})
	if err != nil {
		t.Fatal(err)
	}
	const name = "model.layers.1.self_attn.q_proj.weight"
	src.blockBytes = 4 * 256 * 10 // ten rows per sub-block
	all, err := src.ReadRows(context.Background(), name, 0, 256, nil)
	if err != nil {
		t.Fatal(err)
	}
	for r := int64(0); r < 256; r += 37 {
		row, err := src.ReadRows(context.Background(), name, r, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := range row {
			if row[j] != all[r*256+int64(j)] {
				t.Fatalf("row %d differs between whole and row reads", r)
			}
		}
	}
}

// TestWrapEqualsWrittenCheckpoint: every tensor read through Wrap (the fused convert/quantize path) equals the
// same tensor read back from the checkpoint Run wrote, bit for bit, so fused and two-step pipelines agree.
func TestWrapEqualsWrittenCheckpoint(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen35")
	spec.DType = tinymodel.BF16
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 8, DoRA: true, RSLoRA: true,
		TargetModules: []string{"in_proj_qkv", "o_proj", "gate_proj"}, DType: tinymodel.BF16})
	ad2 := genAdapter(t, filepath.Join(dir, "b"), spec, tinymodel.AdapterSpec{Seed: 9, TargetModules: []string{"embed_tokens", "o_proj"}})
	out := filepath.Join(dir, "out")
	if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}, {Path: ad2, Weight: 0.7}}, Out: out}, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	a, err := OpenAdapter(ad, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenAdapter(ad2, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	src, _, err := Wrap(context.Background(), ck, ck.Config, []Adapter{a, b})
	if err != nil {
		t.Fatal(err)
	}
	merged, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer merged.Close()
	if len(merged.Tensors()) != len(src.Tensors()) {
		t.Fatalf("written %d tensors, Wrap exposes %d", len(merged.Tensors()), len(src.Tensors()))
	}
	changed := 0
	for i, ti := range src.Tensors() {
		if mt := merged.Tensors()[i]; mt.Name != ti.Name || mt.DType != ti.DType {
			t.Fatalf("tensor %d: written %s %s, Wrap %s %s", i, mt.Name, mt.DType, ti.Name, ti.DType)
		}
		x, err := src.ReadRows(context.Background(), ti.Name, 0, ti.Rows(), nil)
		if err != nil {
			t.Fatal(err)
		}
		y, err := merged.ReadRows(context.Background(), ti.Name, 0, ti.Rows(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := range x {
			if math.Float32bits(x[j]) != math.Float32bits(y[j]) {
				t.Fatalf("%s[%d]: Wrap %v, written %v", ti.Name, j, x[j], y[j])
			}
		}
		if src.Changed(ti.Name) {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("nothing changed")
	}
}

// TestHashCache: with Options.HashCache a base merged before is not read again for the provenance hashes
// (the record then carries the cached values), and a base file that changed is hashed again.
func TestHashCache(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen3")
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 1, TargetModules: []string{"q_proj"}})
	cache := filepath.Join(dir, "hashes")
	files := func(out string) map[string]FileHash {
		t.Helper()
		hc := hashcache.Open(cache)
		hc.RacyMargin = 0 // the base was just written; see hashcache.Put
		if _, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: out, hashCache: hc}, nil); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, ProvenanceName))
		if err != nil {
			t.Fatal(err)
		}
		var p provenance
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		m := map[string]FileHash{}
		for _, f := range p.Base.Files {
			m[f.Name] = f
		}
		return m
	}
	first := files(filepath.Join(dir, "out1"))
	for name, f := range first {
		if n, sum, err := hashFile(filepath.Join(base, name)); err != nil || n != f.Size || sum != f.SHA256 {
			t.Fatalf("%s: provenance %d %s, file %d %s (%v)", name, f.Size, f.SHA256, n, sum, err)
		}
	}
	ents, _ := os.ReadDir(cache)
	if len(ents) != len(first) {
		t.Fatalf("cache holds %d entries for %d base files", len(ents), len(first))
	}

	// Plant a recognisable value in every entry: a second merge that reports it took the hash from the cache.
	const planted = "0000000000000000000000000000000000000000000000000000000000000000"
	for _, e := range ents {
		p := filepath.Join(cache, e.Name())
		b, _ := os.ReadFile(p)
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.UseNumber() // nanosecond times do not survive float64
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		m["sha256"] = planted
		b, _ = json.Marshal(m)
		os.WriteFile(p, b, 0o644)
	}
	for name, f := range files(filepath.Join(dir, "out2")) {
		if f.SHA256 != planted {
			t.Errorf("%s: second merge hashed the file again (%s) instead of using the cache", name, f.SHA256)
		}
	}

	// Rewriting a base file with the same bytes changes its identity: it is hashed again, the others not.
	cfg := filepath.Join(base, "config.json")
	b, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	third := files(filepath.Join(dir, "out3"))
	for name, f := range third {
		if want := map[bool]string{true: first[name].SHA256, false: planted}[name == "config.json"]; f.SHA256 != want {
			t.Errorf("%s after rewriting config.json: %s, want %s", name, f.SHA256, want)
		}
	}
}
