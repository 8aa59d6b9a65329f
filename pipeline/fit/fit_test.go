package fit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

func known(t *testing.T, name string) Shape {
	t.Helper()
	cands, err := Known()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cands {
		if c.Name == name {
			return c.Shape
		}
	}
	t.Fatalf("no known model %s", name)
	return Shape{}
}

func q4km(t *testing.T, name string) Shape {
	t.Helper()
	q, _, err := known(t, name).Quantize(gguf.FileTypeQ4_K_M)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func profile(t *testing.T, name string) Profile {
	t.Helper()
	p, err := Builtin().Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func estimate(t *testing.T, s Shape, o Options) Breakdown {
	t.Helper()
	b, err := EstimateShape(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const gB = 1e9

// The published field figures of Qwen3.5 on phones (issue 7): the 9B Q4_K_M file is ~5.7 GB and fits a 16 GB
// phone with under 1 GB to spare at a moderate context; the 4B runs on 8 GB phones; the 0.8B leaves room for
// about 4 parallel chats on 8 GB.
func TestQwen35FieldFigures(t *testing.T) {
	nine, four, small := q4km(t, "Qwen/Qwen3.5-9B"), q4km(t, "Qwen/Qwen3.5-4B"), q4km(t, "Qwen/Qwen3.5-0.8B")
	p8, p16 := profile(t, "8gb"), profile(t, "16gb")

	w, _ := nine.WeightBytes()
	if w < 5.4*gB || w > 5.8*gB {
		t.Errorf("9B Q4_K_M weights %.2f GB, want ~5.7 GB (5.29-5.41 GB published files, §3 of peers.md)", float64(w)/gB)
	}
	for _, ctx := range []int{8192, 16384} {
		v := Check(estimate(t, nine, Options{Ctx: ctx}), p16)
		t.Logf("9B Q4_K_M on 16gb at ctx %d: needs %.2f GB of %.2f, headroom %.2f GB (%s)", ctx,
			float64(v.Needed)/gB, float64(v.Usable)/gB, float64(v.Headroom)/gB, v.Status)
		if !v.Fits {
			t.Errorf("9B at ctx %d does not fit 16gb: %+v", ctx, v)
		}
		if ctx == 16384 && v.Headroom >= 1e9 {
			t.Errorf("9B at ctx 16384 leaves %.2f GB, want under 1 GB", float64(v.Headroom)/gB)
		}
	}
	if v := Check(estimate(t, nine, Options{Ctx: 8192}), p8); v.Fits {
		t.Errorf("9B Q4_K_M must not fit an 8 GB phone: %+v", v)
	}

	v4 := Check(estimate(t, four, Options{Ctx: 8192}), p8)
	t.Logf("4B Q4_K_M on 8gb at ctx 8192: needs %.2f GB of %.2f, headroom %.2f GB (%s)",
		float64(v4.Needed)/gB, float64(v4.Usable)/gB, float64(v4.Headroom)/gB, v4.Status)
	if !v4.Fits {
		t.Errorf("4B at ctx 8192 does not fit 8gb: %+v", v4)
	}

	n, err := MaxParallel(small, Options{Ctx: 32768}, p8)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("0.8B Q4_K_M on 8gb: %d parallel chats of 32K context", n)
	if n < 4 || n > 6 {
		t.Errorf("0.8B on 8gb: %d slots of 32K, want about 4", n)
	}
}

// Only the full-attention layers of Qwen3.5 have a KV cache; the others keep a fixed state per sequence.
func TestHybridAccounting(t *testing.T) {
	s := known(t, "Qwen/Qwen3.5-0.8B") // 24 layers, 6 full attention (2 KV heads × 256), 18 delta-net
	b := estimate(t, s, Options{Ctx: 1000, Parallel: 3, KVType: "f16"})
	if b.AttentionLayers != 6 || b.RecurrentLayers != 18 {
		t.Fatalf("layers: %d attention, %d recurrent; want 6, 18", b.AttentionLayers, b.RecurrentLayers)
	}
	if b.KVCells != 3072 { // 3000 padded to 256
		t.Errorf("cells %d, want 3072", b.KVCells)
	}
	if want := int64(6 * 2 * 2 * 256 * 2); b.KVBytesPerCell != want {
		t.Errorf("KV bytes per cell %d, want %d", b.KVBytesPerCell, want)
	}
	if b.KVCache != b.KVCells*b.KVBytesPerCell {
		t.Errorf("KV cache %d != cells × bytes per cell", b.KVCache)
	}
	// conv: (4-1) × (2048 + 2·16·128) F32; delta: 128 × 128 per value head × 16 heads, F32
	perLayer := int64(4 * (3*(2048+2*16*128) + 128*128*16))
	if b.StateBytes != 18*perLayer || b.Recurrent != 3*18*perLayer {
		t.Errorf("state per slot %d, recurrent %d; want %d, %d", b.StateBytes, b.Recurrent, 18*perLayer, 3*18*perLayer)
	}
	if b.Checkpoints != 2*b.Recurrent {
		t.Errorf("llama.cpp checkpoints %d, want 2 per slot = %d", b.Checkpoints, 2*b.Recurrent)
	}
	g := estimate(t, s, Options{Ctx: 1000, Parallel: 3, Engine: GoEngine})
	if g.Checkpoints != 24*g.Recurrent {
		t.Errorf("goengine checkpoints %d, want 24 per slot = %d", g.Checkpoints, 24*g.Recurrent)
	}

	// The Ollama layout marks recurrent layers with 0 KV heads instead of full_attention_interval.
	o := s
	o.KV = map[string]any{}
	for k, v := range s.KV {
		o.KV[k] = v
	}
	delete(o.KV, "qwen35.full_attention_interval")
	hkv := make([]uint32, 24)
	for i := range hkv {
		if (i+1)%4 == 0 {
			hkv[i] = 2
		}
	}
	o.KV["qwen35.attention.head_count_kv"] = hkv
	if ob := estimate(t, o, Options{Ctx: 1000, Parallel: 3}); ob.KVCache != b.KVCache || ob.Recurrent != b.Recurrent {
		t.Errorf("Ollama layout: kv %d recurrent %d, want %d %d", ob.KVCache, ob.Recurrent, b.KVCache, b.Recurrent)
	}

	// q8_0 K/V: 34 bytes per 32 values instead of 64.
	q := estimate(t, s, Options{Ctx: 1000, Parallel: 3, KVType: "q8_0"})
	if q.KVCache*64 != b.KVCache*34 {
		t.Errorf("q8_0 KV %d, want %d × 34/64", q.KVCache, b.KVCache)
	}
	// A dense model has a KV cache in every layer and no state.
	d, err := ShapeFromConfig([]byte(qwen3Config))
	if err != nil {
		t.Fatal(err)
	}
	db := estimate(t, d, Options{Ctx: 256})
	if db.AttentionLayers != 28 || db.RecurrentLayers != 0 || db.Recurrent != 0 || db.Checkpoints != 0 {
		t.Errorf("qwen3: %d attention, %d recurrent layers, state %d", db.AttentionLayers, db.RecurrentLayers, db.Recurrent)
	}
	if want := int64(28 * 2 * 8 * 128 * 2); db.KVBytesPerCell != want {
		t.Errorf("qwen3 KV bytes per cell %d, want %d", db.KVBytesPerCell, want)
	}
}

const qwen3Config = `{"architectures":["Qwen3ForCausalLM"],"vocab_size":151936,"hidden_size":1024,
"intermediate_size":3072,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,
"max_position_embeddings":40960,"tie_word_embeddings":true}`

// Qwen3-30B-A3B's shape (48 layers, 128 experts, 8 used, expert n_ff 768).
const qwen3MoEConfig = `{"architectures":["Qwen3MoeForCausalLM"],"vocab_size":151936,"hidden_size":2048,
"intermediate_size":6144,"num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,
"max_position_embeddings":40960,"num_experts":128,"num_experts_per_tok":8,"moe_intermediate_size":768,
"tie_word_embeddings":false}`

// A MoE keeps every expert resident (the active-parameter estimate is llmfit#230's error); only decode reads
// fewer bytes.
func TestMoEAccounting(t *testing.T) {
	s, err := ShapeFromConfig([]byte(qwen3MoEConfig))
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := s.Quantize(gguf.FileTypeQ4_K_M)
	if err != nil {
		t.Fatal(err)
	}
	b := estimate(t, q, Options{Ctx: 4096})
	var exps, all int64
	for _, tn := range q.Tensors {
		n, err := tensorBytes(tn)
		if err != nil {
			t.Fatal(err)
		}
		all += n
		if strings.Contains(tn.Name, "_exps.") {
			exps += n
		}
	}
	if b.Weights != all {
		t.Errorf("weights %d, want every tensor %d", b.Weights, all)
	}
	if want := all - exps + exps/128*8; b.ActiveWeights != want {
		t.Errorf("active weights %d, want %d", b.ActiveWeights, want)
	}
	if b.Weights < 17*gB || b.Weights > 19.5*gB {
		t.Errorf("Qwen3-30B-A3B Q4_K_M weights %.2f GB, want ~18.6 GB (published files)", float64(b.Weights)/gB)
	}
	if b.AttentionLayers != 48 || b.KVBytesPerCell != 48*2*4*128*2 {
		t.Errorf("MoE KV: %d layers, %d bytes per cell", b.AttentionLayers, b.KVBytesPerCell)
	}
	// Compute for the MoE feed-forward: the used experts' intermediates, not all 128 experts'.
	if b.Compute > 2*gB {
		t.Errorf("MoE compute %d looks like it counted every expert", b.Compute)
	}
}

// A small hybrid: 8 layers (full attention at 3 and 7), untied.
const qwen35Small = `{"architectures":["Qwen3_5ForCausalLM"],"vocab_size":1000,"hidden_size":256,"intermediate_size":512,
"num_hidden_layers":8,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"max_position_embeddings":4096,
"linear_conv_kernel_dim":4,"linear_key_head_dim":32,"linear_value_head_dim":32,"linear_num_key_heads":2,
"linear_num_value_heads":4,"tie_word_embeddings":false}`

func TestEstimateFromGGUF(t *testing.T) {
	s, err := ShapeFromConfig([]byte(qwen35Small))
	if err != nil {
		t.Fatal(err)
	}
	path := writeShape(t, t.TempDir(), s)
	f, err := gguf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := Estimate(f, Options{Ctx: 4096, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := estimate(t, s, Options{Ctx: 4096, Parallel: 2})
	if got.AttentionLayers != 2 || got.RecurrentLayers != 6 {
		t.Errorf("layers %d attention, %d recurrent; want 2, 6", got.AttentionLayers, got.RecurrentLayers)
	}
	if got.Weights != f.DataSize() || got.Weights != want.Weights || got.KVCache != want.KVCache ||
		got.Recurrent != want.Recurrent || got.Compute != want.Compute {
		t.Errorf("from GGUF %+v\nfrom config %+v", got, want)
	}
}

// writeShape writes a GGUF with s's metadata and tensor infos and zero tensor data.
func writeShape(t testing.TB, dir string, s Shape) string {
	t.Helper()
	path := filepath.Join(dir, "model.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	encodeShape(t, f, s)
	return path
}

func encodeShape(t testing.TB, out io.Writer, s Shape) {
	t.Helper()
	w := gguf.NewWriter()
	if err := w.SetKV("general.architecture", gguf.String(s.Arch)); err != nil {
		t.Fatal(err)
	}
	for k, v := range s.KV {
		if u, ok := v.(uint32); ok {
			if err := w.SetKV(k, gguf.Uint32(u)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tn := range s.Tensors {
		if err := w.AddTensor(tn.Name, tn.Type, tn.Shape); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteHeader(out); err != nil {
		t.Fatal(err)
	}
	for {
		ti, ok := w.NextTensor()
		if !ok {
			break
		}
		if err := w.WriteTensor(ti.Name, make([]byte, ti.Size())); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestMaxima(t *testing.T) {
	s, p := q4km(t, "Qwen/Qwen3.5-4B"), profile(t, "12gb")
	o := Options{Parallel: 2}
	mc, err := MaxContext(s, o, p)
	if err != nil || mc == 0 || mc%256 != 0 {
		t.Fatalf("MaxContext = %d, %v", mc, err)
	}
	at := func(ctx, par int) int64 { return estimate(t, s, Options{Ctx: ctx, Parallel: par}).Total }
	if at(mc, 2) > p.UsableBytes || at(mc+256, 2) <= p.UsableBytes {
		t.Errorf("MaxContext %d is not the boundary: %d at it, %d one step above, budget %d", mc, at(mc, 2), at(mc+256, 2), p.UsableBytes)
	}
	mp, err := MaxParallel(s, Options{Ctx: 8192}, p)
	if err != nil || mp == 0 {
		t.Fatalf("MaxParallel = %d, %v", mp, err)
	}
	if at(8192, mp) > p.UsableBytes || at(8192, mp+1) <= p.UsableBytes {
		t.Errorf("MaxParallel %d is not the boundary", mp)
	}
	tiny, err := ShapeFromConfig([]byte(strings.Replace(qwen35Small, `"max_position_embeddings":4096`, `"max_position_embeddings":128`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if mc, err := MaxContext(tiny, Options{}, p); mc != 128 || err != nil {
		t.Errorf("training context 128: MaxContext %d, %v", mc, err)
	}
	if mc, _ := MaxContext(q4km(t, "Qwen/Qwen3.5-9B"), Options{}, profile(t, "6gb")); mc != 0 {
		t.Errorf("9B on 6gb: MaxContext %d, want 0", mc)
	}
}

func TestSuggest(t *testing.T) {
	cands, err := Known()
	if err != nil {
		t.Fatal(err)
	}
	// 9B in BF16 on a 16 GB phone: a smaller file type of the same model fits.
	bf16 := known(t, "Qwen/Qwen3.5-9B")
	p16 := profile(t, "16gb")
	sg, err := Suggest(bf16, Options{Ctx: 8192}, p16, cands)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("9B BF16 on 16gb: %s; ladder %+v", sg.Message, sg.Ladder)
	if sg.FileType == "" || sg.Headroom < 0 {
		t.Fatalf("no file type suggested: %+v", sg)
	}
	for _, r := range sg.Ladder { // the suggestion is the first rung that fits
		if r.FileType == sg.FileType {
			break
		}
		if r.Fits {
			t.Errorf("%s fits but %s was suggested", r.FileType, sg.FileType)
		}
	}
	// 9B Q4_K_M on a 6 GB phone: no file type of the 9B fits; the largest smaller model does.
	sg, err = Suggest(q4km(t, "Qwen/Qwen3.5-9B"), Options{Ctx: 8192}, profile(t, "6gb"), cands)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("9B Q4_K_M on 6gb: %s", sg.Message)
	if sg.FileType != "" || sg.Model != "Qwen/Qwen3.5-0.8B" || sg.ModelType != "Q4_K_M" {
		t.Errorf("want a smaller model, got %+v", sg)
	}
}

func TestProfiles(t *testing.T) {
	ps := Builtin()
	if got := strings.Join(ps.Names(), ","); got != "6gb,8gb,12gb,16gb,24gb" {
		t.Errorf("built-in profiles %s", got)
	}
	want := map[string]int64{"6gb": 5400000000, "8gb": 7200000000, "12gb": 10800000000, "16gb": 14400000000, "24gb": 21600000000}
	for _, p := range ps {
		if p.MinRamTotalBytes() != want[p.Name] {
			t.Errorf("%s: minRamTotalBytes %d, want %d", p.Name, p.MinRamTotalBytes(), want[p.Name])
		}
		// Every phone of the tier passes the filter, and no phone of the tier below does.
		if p.MemTotalBytes < p.MinRamTotalBytes() {
			t.Errorf("%s: typical MemTotal %d below its own filter", p.Name, p.MemTotalBytes)
		}
	}
	for i := 1; i < len(ps); i++ {
		if ps[i-1].MemTotalBytes >= ps[i].MinRamTotalBytes() {
			t.Errorf("%s phones pass the %s filter", ps[i-1].Name, ps[i].Name)
		}
	}
	if p, err := ps.Lookup("16GB"); err != nil || p.Name != "16gb" {
		t.Errorf("Lookup(16GB) = %v, %v", p.Name, err)
	}
	if p, err := ps.Lookup("8"); err != nil || p.Name != "8gb" {
		t.Errorf("Lookup(8) = %v, %v", p.Name, err)
	}

	_, err := ps.Lookup("3gb")
	var ue *UnknownProfileError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "6gb, 8gb, 12gb, 16gb, 24gb") {
		t.Errorf("unknown profile error %v does not list the known ones", err)
	}

	dir := t.TempDir()
	user := filepath.Join(dir, "p.json")
	os.WriteFile(user, []byte(`{"profiles":[{"name":"16GB","ram_gb":16,"usable_bytes":9000000000},
		{"name":"pixel-7a","ram_gb":8,"usable_bytes":3500000000,"big_cores":2}]}`), 0o644)
	merged, err := LoadProfiles(user)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := merged.Lookup("16gb"); p.UsableBytes != 9e9 {
		t.Errorf("user 16gb not merged: %+v", p)
	}
	if p, err := merged.Lookup("pixel-7a"); err != nil || p.BigCores != 2 {
		t.Errorf("user profile not added: %+v %v", p, err)
	}
	if len(merged) != 6 || merged[0].Name != "6gb" || merged[1].Name != "pixel-7a" {
		t.Errorf("merged order %v", merged.Names())
	}
	for _, bad := range []string{`{"profiles":[{"name":"a","ram_gb":8,"usable_bytes":4e9},{"name":"A","ram_gb":8,"usable_bytes":4e9}]}`,
		`{"profiles":[{"name":"a","ram_gb":8,"usable_bytes":9e9}]}`, `{"profiles":[{"ram_gb":8,"usable_bytes":1}]}`, `[`} {
		if _, err := ParseProfiles([]byte(bad)); err == nil {
			t.Errorf("ParseProfiles(%s) accepted", bad)
		}
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	data, err := knownFS.ReadFile("known/qwen3.5-9b.json")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cfg, data, 0o644)
	ctx := context.Background()

	r, err := Run(ctx, Options{Config: cfg, Phone: "16gb", Ctx: 8192, All: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Verdict.Fits || r.FileType != "Q4_K_M" || r.Headroom != r.Verdict.Headroom || r.MaxCtx < 8192 ||
		r.MaxParallel < 1 || r.Suggestion != nil || len(r.Table) != 5 {
		t.Errorf("16gb result: %+v", r)
	}
	for _, row := range r.Table {
		if fits := row.Profile == "16gb" || row.Profile == "24gb"; row.Fits != fits {
			t.Errorf("table row %s fits=%v", row.Profile, row.Fits)
		}
	}
	js, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(js), `"headroom_bytes"`) || !strings.Contains(string(js), `"kv_cache"`) {
		t.Errorf("JSON %s, %v", js, err)
	}

	r, err = Run(ctx, Options{Config: cfg, Phone: "8gb", Ctx: 8192}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict.Fits || r.Suggestion == nil || r.Suggestion.Message == "" {
		t.Errorf("8gb: %+v", r)
	}

	_, err = Run(ctx, Options{Config: cfg, Phone: "3gb"}, nil)
	if err == nil || !strings.Contains(err.Error(), "known: 6gb, 8gb, 12gb, 16gb, 24gb") {
		t.Errorf("unknown phone: %v", err)
	}

	notGGUF := filepath.Join(dir, "model.safetensors")
	os.WriteFile(notGGUF, []byte(`{"__metadata__":{}}`+strings.Repeat(" ", 64)), 0o644)
	_, err = Run(ctx, Options{Model: notGGUF}, nil)
	var fe *gguf.FormatError
	if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), "is not a GGUF model") ||
		!strings.Contains(err.Error(), notGGUF) {
		t.Errorf("non-GGUF input: %v", err)
	}
	if _, err := Run(ctx, Options{}, nil); err == nil {
		t.Error("Run without a model accepted")
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Ctx: -1}, {Parallel: 1000}, {KVType: "q5_1"}, {Engine: "vllm"}, {FlashAttention: "yes"}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := EstimateShape(known(t, "Qwen/Qwen3.5-0.8B"), Options{KVType: "q4_0", Ctx: 512}); err != nil {
		t.Errorf("q4_0 KV: %v", err)
	}
	if _, err := EstimateShape(Shape{Name: "x", Arch: "qwen3", KV: map[string]any{}}, Options{}); err == nil {
		t.Error("shape without metadata accepted")
	}
}

// llama.cpp's compute buffers as measured by gpustack/gguf-parser-go (testdata/llamacpp_compute_buffer_sweep.json,
// full offload, ctx 4096, ubatch 512, flash attention): the estimate must stay within 15 %.
func TestComputeMatchesLlamaCpp(t *testing.T) {
	for _, c := range []struct {
		name, config string
		mib          float64
	}{
		{"Qwen3-4B", `{"architectures":["Qwen3ForCausalLM"],"vocab_size":151936,"hidden_size":2560,"intermediate_size":9728,
			"num_hidden_layers":36,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"tie_word_embeddings":true}`, 79.09},
		{"Qwen2.5-3B", `{"architectures":["Qwen2ForCausalLM"],"vocab_size":151936,"hidden_size":2048,"intermediate_size":11008,
			"num_hidden_layers":36,"num_attention_heads":16,"num_key_value_heads":2,"tie_word_embeddings":true}`, 80.59},
		{"Qwen3-30B-A3B", qwen3MoEConfig, 88.09},
	} {
		s, err := ShapeFromConfig([]byte(c.config))
		if err != nil {
			t.Fatal(err)
		}
		b := estimate(t, s, Options{Ctx: 4096, UBatch: 512})
		got := float64(b.Compute) / (1 << 20)
		t.Logf("%s: compute %.1f MiB, llama.cpp measured %.1f MiB", c.name, got, c.mib)
		if got < c.mib*0.85 || got > c.mib*1.15 {
			t.Errorf("%s: compute %.1f MiB, measured %.1f MiB", c.name, got, c.mib)
		}
	}
}

// TestGoEngineBuffers pins the goengine accounting issue 13 item 6 found missing (fit was 0.54–0.67 of serve's
// peak for a tiny model at ctx 4096): without flash attention the scores are held twice (F32 in the graph, an
// F16 copy in ggml-cpu's work buffer for the product with V), every pass's mask (ubatch × cells float32) is
// resident twice outside the graph (its Go slice and C copy), and the repack scratch copy of the largest matrix
// counts where it exceeds a pass's buffers.
func TestGoEngineBuffers(t *testing.T) {
	s, err := ShapeFromConfig([]byte(qwen3Config)) // 16 heads, tied Q4_K_M embedding after quantize
	if err != nil {
		t.Fatal(err)
	}
	s, _, err = s.Quantize(gguf.FileTypeQ4_K_M)
	if err != nil {
		t.Fatal(err)
	}
	ctx, T, H := 8192, 512, 16
	off := estimate(t, s, Options{Engine: GoEngine, Ctx: ctx, UBatch: T, FlashAttention: "off"})
	on := estimate(t, s, Options{Engine: GoEngine, Ctx: ctx, UBatch: T, FlashAttention: "on"})
	if scores := int64(ctx * T * H * (4 + 2)); off.Compute-on.Compute < scores*9/10 {
		t.Errorf("non-flash compute %d is only %d above flash; the F32 scores and their F16 copy are %d", off.Compute, off.Compute-on.Compute, scores)
	}
	// The pass's mask twice (the Go slice and its C copy) and the pass's other Go memory; no headroom is
	// assumed, since the engine returns both heaps to the system between prompt passes.
	mask := int64(T) * int64(ctx) * 4
	if want := 2*mask + goEnginePassBytes; off.Inputs != want || on.Inputs != want {
		t.Errorf("inputs %d / %d, want %d", off.Inputs, on.Inputs, want)
	}
	// After Q4_K_M the tied embedding (the goengine's output.weight) is Q6_K, tagged in place: the largest
	// repacked matrix is a Q4_K projection, smaller than a pass's buffers at this context.
	if off.Repack != 0 {
		t.Errorf("repack %d for a Q4_K_M 0.6B model", off.Repack)
	}
	// A Q4_0 tied embedding is repacked through a 87.5 MB scratch copy at load, which the pass buffers at 256
	// cells do not cover: the load-time peak counts beyond them.
	q4 := s
	q4.Tensors = slices.Clone(s.Tensors)
	for i := range q4.Tensors {
		if q4.Tensors[i].Name == "token_embd.weight" {
			q4.Tensors[i].Type = gguf.TypeQ4_0
		}
	}
	small := estimate(t, q4, Options{Engine: GoEngine, Ctx: 256, UBatch: 256})
	if scratch := RepackScratch(q4); scratch != 151936*1024*18/32 || small.Repack != scratch-small.Compute-small.Inputs {
		t.Errorf("repack %d at 256 cells, scratch %d, pass buffers %d", small.Repack, scratch, small.Compute+small.Inputs)
	}
	if big := estimate(t, q4, Options{Engine: GoEngine, Ctx: ctx, UBatch: T, FlashAttention: "off"}); big.Repack != 0 {
		t.Errorf("repack %d at %d cells: the pass buffers (%d) exceed the scratch copy", big.Repack, ctx, big.Compute+big.Inputs)
	}
	if l := estimate(t, s, Options{Ctx: ctx, UBatch: T}); l.Inputs != 0 || l.Repack != 0 {
		t.Errorf("llama.cpp: inputs %d, repack %d (its mask is a graph input)", l.Inputs, l.Repack)
	}
}

// TestFlashAttentionDefaults: "auto" is what each runtime does by default — llama.cpp on, phonellm serve off
// (issue 13 item 8: the goengine's flash attention halves its prompt speed, so neither serve nor fit picks it).
func TestFlashAttentionDefaults(t *testing.T) {
	s, err := ShapeFromConfig([]byte(qwen3Config))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		engine Engine
		fa     string
		want   bool
	}{{LlamaCpp, "", true}, {LlamaCpp, "auto", true}, {LlamaCpp, "off", false}, {GoEngine, "", false},
		{GoEngine, "auto", false}, {GoEngine, "on", true}} {
		if b := estimate(t, s, Options{Engine: c.engine, FlashAttention: c.fa}); b.FlashAttention != c.want {
			t.Errorf("%s, flash attention %q: counted %v, want %v", c.engine, c.fa, b.FlashAttention, c.want)
		}
	}
}

// TestDecodeBound: the bandwidth bound on decoding is given only where the weights read per token bound it
// (issue 13: "decode at most ~26915 tokens/s" for the 2 MB demo model), and says what it is based on.
func TestDecodeBound(t *testing.T) {
	p := profile(t, "16gb")
	tiny := Check(Breakdown{ActiveWeights: 2 << 20}, p)
	if tiny.MaxTokensPerSec != 0 || tiny.BytesPerToken != 2<<20 || tiny.BandwidthGBps != p.BandwidthGBps {
		t.Errorf("2 MiB of weights: %+v", tiny)
	}
	big := Check(Breakdown{ActiveWeights: 5 << 30}, p)
	if want := p.BandwidthGBps * 1e9 / float64(5<<30); big.MaxTokensPerSec != want || want > 100 {
		t.Errorf("5 GiB of weights: %.1f tokens/s, want %.1f", big.MaxTokensPerSec, want)
	}
}
