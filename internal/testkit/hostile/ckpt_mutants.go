package hostile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// stFile is a safetensors file taken apart: tensors in data order.
type stFile struct {
	meta    map[string]string
	tensors []stTensor
}

type stTensor struct {
	name  string
	dtype string
	shape []int64
	data  []byte
}

func readST(path string) (*stFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("hostile: %s: short", path)
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("hostile: %s: header length", path)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		return nil, err
	}
	data := b[8+n:]
	f := &stFile{}
	for name, raw := range hdr {
		if name == "__metadata__" {
			json.Unmarshal(raw, &f.meta)
			continue
		}
		var t struct {
			DType   string   `json:"dtype"`
			Shape   []int64  `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, err
		}
		f.tensors = append(f.tensors, stTensor{name: name, dtype: t.DType, shape: t.Shape, data: data[t.Offsets[0]:t.Offsets[1]]})
	}
	sort.Slice(f.tensors, func(i, j int) bool { return f.tensors[i].name < f.tensors[j].name })
	return f, nil
}

// encode writes the file with contiguous data in tensor order; header edits, when set, change the JSON header
// after the offsets are computed.
func (f *stFile) encode(edit func(hdr map[string]any)) []byte {
	hdr := map[string]any{}
	if f.meta != nil {
		hdr["__metadata__"] = f.meta
	}
	var off int64
	var data bytes.Buffer
	for _, t := range f.tensors {
		hdr[t.name] = map[string]any{"dtype": t.dtype, "shape": t.shape, "data_offsets": []int64{off, off + int64(len(t.data))}}
		data.Write(t.data)
		off += int64(len(t.data))
	}
	if edit != nil {
		edit(hdr)
	}
	h, _ := json.Marshal(hdr)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(out, h...)
	return append(out, data.Bytes()...)
}

func (f *stFile) tensor(name string) *stTensor {
	for i := range f.tensors {
		if f.tensors[i].name == name {
			return &f.tensors[i]
		}
	}
	return nil
}

func (f *stFile) clone() *stFile {
	c := &stFile{meta: f.meta, tensors: make([]stTensor, len(f.tensors))}
	copy(c.tensors, f.tensors)
	for i := range c.tensors {
		c.tensors[i].shape = append([]int64(nil), f.tensors[i].shape...)
	}
	return c
}

// copyDir copies the regular files of a checkpoint folder.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ckptBuilder collects the checkpoint mutants of one base.
type ckptBuilder struct {
	b   *Base
	st  *stFile
	out []Mutant
	// text says whether config fields live in text_config (Qwen3.5).
	text bool
}

// folder adds a mutant: the base checkpoint copied, then f applied to the copy.
func (c *ckptBuilder) folder(cat, what string, e Expect, f func(dir string) error) {
	src := c.b.Checkpoint
	c.out = append(c.out, Mutant{Name: c.b.Name + "-ckpt/" + cat + "/" + what, Category: cat, Expect: e,
		ckpt: func(dir string) error {
			if err := copyDir(src, dir); err != nil {
				return err
			}
			return f(dir)
		}})
}

// config adds a config.json edit.
func (c *ckptBuilder) config(what string, e Expect, edit func(cfg, text map[string]any)) {
	c.folder("config", what, e, func(dir string) error {
		p := filepath.Join(dir, "config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var cfg map[string]any
		if err := json.Unmarshal(b, &cfg); err != nil {
			return err
		}
		text := cfg
		if t, ok := cfg["text_config"].(map[string]any); ok {
			text = t
		}
		edit(cfg, text)
		b, _ = json.MarshalIndent(cfg, "", "  ")
		return os.WriteFile(p, b, 0o644)
	})
}

// weights adds a model.safetensors edit.
func (c *ckptBuilder) weights(what string, e Expect, edit func(f *stFile) []byte) {
	st := c.st
	c.folder("safetensors", what, e, func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "model.safetensors"), edit(st.clone()), 0o644)
	})
}

// replace adds a mutant whose file name is replaced by something else (a FIFO, a folder, junk bytes, ...).
func (c *ckptBuilder) replace(cat, name, what string, e Expect, make func(path string) error) {
	c.folder(cat, what, e, func(dir string) error {
		p := filepath.Join(dir, name)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		return make(p)
	})
}

func checkpointMutants(b *Base) []Mutant {
	st, err := readST(filepath.Join(b.Checkpoint, "model.safetensors"))
	if err != nil {
		// The bases are single-file checkpoints written by tinymodel; anything else is a bug here.
		panic(fmt.Sprintf("hostile: base checkpoint %s: %v", b.Name, err))
	}
	c := &ckptBuilder{b: b, st: st, text: b.Arch == "qwen35" || b.Arch == "qwen35moe"}
	c.folder("control", "unchanged", ckptValid, func(string) error { return nil })
	c.configs()
	c.tokenizers()
	c.safetensors()
	c.nonRegular()
	return c.out
}

func (c *ckptBuilder) configs() {
	inv := ckptInvalid
	set := func(what string, e Expect, key string, v any) {
		c.config(what, e, func(_, text map[string]any) {
			// Qwen3.5 keeps its rotary parameters in rope_parameters, which win over the flat keys.
			if rp, ok := text["rope_parameters"].(map[string]any); ok && (key == "rope_theta" || key == "partial_rotary_factor") {
				rp[key] = v
				return
			}
			text[key] = v
		})
	}
	set("num_key_value_heads 0", inv, "num_key_value_heads", 0)
	set("num_key_value_heads 3", inv, "num_key_value_heads", 3)
	set("num_key_value_heads -1", inv, "num_key_value_heads", -1)
	set("num_attention_heads 3", inv, "num_attention_heads", 3)
	set("num_attention_heads 0", inv, "num_attention_heads", 0)
	set("hidden_size 65", inv, "hidden_size", 65)
	set("hidden_size 2^40", inv, "hidden_size", int64(1)<<40)
	set("num_hidden_layers 0", inv, "num_hidden_layers", 0)
	set("num_hidden_layers 1", inv, "num_hidden_layers", 1)
	set("num_hidden_layers 9", inv, "num_hidden_layers", 9)
	set("num_hidden_layers 1e9", inv, "num_hidden_layers", 1e9)
	set("head_dim 0", inv, "head_dim", 0)
	set("head_dim 17", inv, "head_dim", 17)
	set("intermediate_size 129", inv, "intermediate_size", 129)
	set("rms_norm_eps -1", inv, "rms_norm_eps", -1)
	set("rms_norm_eps string", inv, "rms_norm_eps", "NaN")
	set("rope_theta 0", inv, "rope_theta", 0)
	set("rope_theta -1", inv, "rope_theta", -1)
	set("rope_theta 1e39 (float32 +Inf)", inv, "rope_theta", 1e39)
	set("max_position_embeddings 0", inv, "max_position_embeddings", 0)
	set("num_key_value_heads as string", inv, "num_key_value_heads", "2")
	c.config("architectures unknown", inv, func(cfg, _ map[string]any) { cfg["architectures"] = []any{"LlamaForCausalLM"} })
	c.config("architectures missing", inv, func(cfg, _ map[string]any) { delete(cfg, "architectures") })
	if c.text {
		set("linear_num_value_heads 3", inv, "linear_num_value_heads", 3)
		set("linear_key_head_dim 15", inv, "linear_key_head_dim", 15)
		set("linear_conv_kernel_dim 1", inv, "linear_conv_kernel_dim", 1)
		set("full_attention_interval 1", inv, "full_attention_interval", 1)
		set("full_attention_interval 0", inv, "full_attention_interval", 0)
		set("partial_rotary_factor 0.3 (odd rotary dims)", inv, "partial_rotary_factor", 0.3)
		c.config("mrope_section out of range", inv, func(_, text map[string]any) {
			rp, _ := text["rope_parameters"].(map[string]any)
			if rp == nil {
				rp = map[string]any{}
				text["rope_parameters"] = rp
			}
			rp["mrope_section"] = []any{100, 0, 0}
		})
	}
	mal := ckptMalformed
	raw := func(what string, e Expect, data []byte) {
		c.folder("config", what, e, func(dir string) error { return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644) })
	}
	raw("not JSON", mal, []byte("{not json"))
	raw("a JSON array", mal, []byte("[]"))
	raw("empty", mal, nil)
	raw("17 MB", mal, append(append([]byte(`{"x": "`), bytes.Repeat([]byte("a"), 17<<20)...), []byte(`"}`)...))
	c.folder("config", "missing", mal, func(dir string) error { return os.Remove(filepath.Join(dir, "config.json")) })
}

func (c *ckptBuilder) tokenizers() {
	inv := ckptInvalid
	raw := func(what string, data []byte) {
		c.folder("tokenizer", what, inv, func(dir string) error { return os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644) })
	}
	raw("not JSON", []byte("{"))
	raw("empty vocabulary", []byte(`{"model": {"type": "BPE", "vocab": {}, "merges": []}, "added_tokens": []}`))
	c.folder("tokenizer", "missing", inv, func(dir string) error { return os.Remove(filepath.Join(dir, "tokenizer.json")) })
	c.folder("tokenizer", "added token past the embedding", inv, func(dir string) error {
		p := filepath.Join(dir, "tokenizer.json")
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var tj map[string]any
		if err := json.Unmarshal(b, &tj); err != nil {
			return err
		}
		added, _ := tj["added_tokens"].([]any)
		tj["added_tokens"] = append(added, map[string]any{"id": 100000, "content": "<|hostile|>", "special": true})
		b, _ = json.Marshal(tj)
		return os.WriteFile(p, b, 0o644)
	})
}

func (c *ckptBuilder) safetensors() {
	inv, mal := ckptInvalid, ckptMalformed
	names := make([]string, len(c.st.tensors))
	for i, t := range c.st.tensors {
		names[i] = t.name
	}
	find := func(part string) string {
		for _, n := range names {
			if strings.Contains(n, part) {
				return n
			}
		}
		return ""
	}
	kproj, qproj, norm := find("layers.0.self_attn.k_proj.weight"), find("layers.0.self_attn.q_proj.weight"), find("layers.0.input_layernorm.weight")
	if kproj == "" {
		kproj = find("layers.3.self_attn.k_proj.weight")
		qproj = find("layers.3.self_attn.q_proj.weight")
	}
	up := find("layers.0.mlp.up_proj.weight")
	c.weights("re-encoded unchanged", ckptValid, func(f *stFile) []byte { return f.encode(nil) })
	if kproj != "" {
		c.weights(kproj+" transposed", inv, func(f *stFile) []byte {
			t := f.tensor(kproj)
			t.shape[0], t.shape[1] = t.shape[1], t.shape[0]
			return f.encode(nil)
		})
		c.weights(qproj+" dropped", inv, func(f *stFile) []byte {
			for i := range f.tensors {
				if f.tensors[i].name == qproj {
					f.tensors = append(f.tensors[:i], f.tensors[i+1:]...)
					break
				}
			}
			return f.encode(nil)
		})
	}
	c.weights("extra unknown tensor", inv, func(f *stFile) []byte {
		t := f.tensors[0]
		t.name = "model.layers.0.hostile.weight"
		f.tensors = append(f.tensors, t)
		return f.encode(nil)
	})
	c.weights("extra layer past num_hidden_layers", inv, func(f *stFile) []byte {
		t := *f.tensor(norm)
		t.name = strings.Replace(norm, "layers.0.", "layers.40.", 1)
		f.tensors = append(f.tensors, t)
		return f.encode(nil)
	})
	c.weights("dtype F8_E4M3", inv, func(f *stFile) []byte {
		t := f.tensor(up)
		t.dtype, t.data = "F8_E4M3", t.data[:len(t.data)/4]
		return f.encode(nil)
	})
	c.weights("dtype I64", inv, func(f *stFile) []byte {
		t := f.tensor(up)
		t.dtype, t.data = "I64", append(append([]byte(nil), t.data...), t.data...)
		return f.encode(nil)
	})
	nan := func(name string, all bool) func(f *stFile) []byte {
		return func(f *stFile) []byte {
			t := f.tensor(name)
			d := append([]byte(nil), t.data...)
			for i := 0; i+4 <= len(d); i += 4 {
				binary.LittleEndian.PutUint32(d[i:], math.Float32bits(float32(math.NaN())))
				if !all {
					break
				}
			}
			t.data = d
			return f.encode(nil)
		}
	}
	c.weights("NaN in "+up, ckptBadWeights, nan(up, false))
	c.weights("NaN in "+norm, ckptBadWeights, nan(norm, true))
	c.weights("shape product mismatch", mal, func(f *stFile) []byte {
		return f.encode(func(h map[string]any) { h[up].(map[string]any)["shape"] = []int64{3, 5} })
	})
	c.weights("offsets overlapping", mal, func(f *stFile) []byte {
		return f.encode(func(h map[string]any) {
			e := h[norm].(map[string]any)
			o := e["data_offsets"].([]int64)
			e["data_offsets"] = []int64{0, o[1] - o[0]}
		})
	})
	c.weights("offsets past the end", mal, func(f *stFile) []byte {
		return f.encode(func(h map[string]any) { h[up].(map[string]any)["data_offsets"] = []int64{0, 1 << 40} })
	})
	c.weights("negative shape", mal, func(f *stFile) []byte {
		return f.encode(func(h map[string]any) { h[up].(map[string]any)["shape"] = []int64{-1, 1} })
	})
	c.weights("header length past the end", mal, func(f *stFile) []byte {
		b := f.encode(nil)
		binary.LittleEndian.PutUint64(b, uint64(len(b)))
		return b
	})
	c.weights("header length 2^63", mal, func(f *stFile) []byte {
		b := f.encode(nil)
		binary.LittleEndian.PutUint64(b, 1<<63)
		return b
	})
	c.weights("header not JSON", mal, func(f *stFile) []byte {
		b := f.encode(nil)
		copy(b[8:], "{{{{")
		return b
	})
	c.weights("truncated", mal, func(f *stFile) []byte { b := f.encode(nil); return b[:len(b)-100] })
	c.weights("7 bytes", mal, func(f *stFile) []byte { return f.encode(nil)[:7] })
	c.weights("empty", mal, func(*stFile) []byte { return nil })
	c.folder("safetensors", "index pointing outside the folder", mal, func(dir string) error {
		wm := map[string]string{}
		for _, n := range names {
			wm[n] = "../outside.safetensors"
		}
		b, _ := json.Marshal(map[string]any{"weight_map": wm})
		return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644)
	})
	c.folder("safetensors", "index naming a missing shard", mal, func(dir string) error {
		wm := map[string]string{}
		for _, n := range names {
			wm[n] = "model-00001-of-00002.safetensors"
		}
		b, _ := json.Marshal(map[string]any{"weight_map": wm})
		return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644)
	})
}

// nonRegular puts things that are not files where files are expected.
func (c *ckptBuilder) nonRegular() {
	fifo := mkfifo
	folder := func(p string) error { return os.Mkdir(p, 0o755) }
	device := func(p string) error { return os.Symlink(os.DevNull, p) }
	mal, inv := ckptMalformed, ckptInvalid
	c.replace("non-regular", "model.safetensors", "model.safetensors is a FIFO", mal, fifo)
	c.replace("non-regular", "model.safetensors", "model.safetensors is a folder", mal, folder)
	c.replace("non-regular", "model.safetensors", "model.safetensors is /dev/null", mal, device)
	c.replace("non-regular", "config.json", "config.json is a FIFO", mal, fifo)
	c.replace("non-regular", "config.json", "config.json is a folder", mal, folder)
	// inspect does not read the tokenizer.
	c.replace("non-regular", "tokenizer.json", "tokenizer.json is a FIFO", inv, fifo)
	c.replace("non-regular", "tokenizer.json", "tokenizer.json is /dev/zero", inv, func(p string) error { return os.Symlink("/dev/zero", p) })
}
