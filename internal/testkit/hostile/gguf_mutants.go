package hostile

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// builder collects the mutants of one base.
type builder struct {
	b   *Base
	out []Mutant
	// valid is the expectation of a still-valid model of this base (serve refuses the MTP base).
	valid Expect
}

// edit adds a mutant made by changing the decoded model.
func (g *builder) edit(cat, what string, e Expect, f func(m *model)) {
	base := g.b.model
	g.out = append(g.out, Mutant{Name: g.b.Name + "/" + cat + "/" + what, Category: cat, Expect: e,
		gguf: func() []byte {
			m := base.clone()
			f(m)
			return m.encode()
		}})
}

// bytes adds a mutant made by changing the file's bytes.
func (g *builder) bytes(cat, what string, e Expect, f func(data []byte) []byte) {
	data := g.b.gguf
	g.out = append(g.out, Mutant{Name: g.b.Name + "/" + cat + "/" + what, Category: cat, Expect: e,
		gguf: func() []byte { return f(slices.Clone(data)) }})
}

// pick is the base's valid expectation when ok, else the refusal.
func (g *builder) pick(ok bool) Expect {
	if ok {
		return g.valid
	}
	return ggufRefused
}

func ggufMutants(b *Base) []Mutant {
	g := &builder{b: b, valid: ggufValid}
	if b.MTP {
		g.valid = ggufServeRefused
	}
	g.edit("control", "unchanged", g.valid, func(*model) {})
	switch b.Name {
	case "qwen3-f16", "qwen35-f16":
		// The container does not depend on the architecture: two bases are enough.
		g.header()
		g.metadata()
	}
	if b.Quant != 0 || b.MTP {
		// A variant of another base: what its difference (quantized blocks, the MTP layer) changes.
		g.variant()
		return g.out
	}
	g.hparams()
	g.shapes()
	g.data()
	g.templates()
	g.vocab()
	return g.out
}

// variant is the reduced set for a base that differs from another only by its tensor types or its MTP layer:
// the checks that depend on that difference.
func (g *builder) variant() {
	r := ggufRefused
	base := g.b.model
	p := base.arch() + "."
	g.edit("hparams", "attention.head_count 3", r, func(m *model) { m.set(p+"attention.head_count", gguf.Uint32(3)) })
	g.edit("hparams", "attention.head_count_kv 0", r, func(m *model) { m.set(p+"attention.head_count_kv", gguf.Uint32(0)) })
	g.edit("hparams", "block_count +1", r, func(m *model) { m.set(p+"block_count", gguf.Uint32(g.u32(base, p+"block_count")+1)) })
	g.edit("hparams", "rope.freq_base NaN", r, func(m *model) { m.set(p+"rope.freq_base", gguf.Float32(float32(math.NaN()))) })
	if g.b.MTP {
		n := g.u32(base, p+"block_count")
		g.edit("hparams", "nextn_predict_layers 0", r, func(m *model) { m.set(p+"nextn_predict_layers", gguf.Uint32(0)) })
		g.edit("hparams", "nextn_predict_layers 2", r, func(m *model) { m.set(p+"nextn_predict_layers", gguf.Uint32(2)) })
		g.edit("hparams", "nextn_predict_layers = block_count", r, func(m *model) { m.set(p+"nextn_predict_layers", gguf.Uint32(n)) })
		last := fmt.Sprintf("blk.%d.", n-1)
		for _, name := range []string{last + "nextn.eh_proj.weight", last + "nextn.enorm.weight", last + "attn_q.weight"} {
			if base.tensorIndex(name) >= 0 {
				g.edit("shapes", "drop "+name, r, func(m *model) { i := m.tensorIndex(name); m.tensors = slices.Delete(m.tensors, i, i+1) })
			}
		}
		if t := base.tensor(last + "nextn.eh_proj.weight"); t != nil {
			g.edit("shapes", last+"nextn.eh_proj.weight transposed", r, func(m *model) {
				t := m.tensor(last + "nextn.eh_proj.weight")
				t.shape[0], t.shape[1] = t.shape[1], t.shape[0]
			})
		}
	}
	for _, name := range []string{"token_embd.weight", "blk.0.ffn_up.weight", "blk.0.attn_k.weight"} {
		if t := base.tensor(name); t != nil {
			g.edit("shapes", name+" transposed", r, func(m *model) { t := m.tensor(name); t.shape[0], t.shape[1] = t.shape[1], t.shape[0] })
			g.edit("shapes", name+" ne0+32", r, func(m *model) { m.tensor(name).shape[0] += 32 })
			g.edit("shapes", name+" as F16", g.valid, func(m *model) { t := m.tensor(name); t.typ, t.data = uint32(gguf.TypeF16), nil })
			g.edit("shapes", name+" as Q4_K (row not whole blocks)", r, func(m *model) { t := m.tensor(name); t.typ, t.data = uint32(gguf.TypeQ4_K), nil })
		}
	}
	g.data()
	syntax := ggufTemplateSyntax
	if g.b.MTP {
		syntax = ggufServeRefused
	}
	g.edit("templates", "syntax error", syntax, func(m *model) { m.set("tokenizer.chat_template", gguf.String("{% for %}")) })
	g.edit("vocab", "40 tokens more than embedding rows", r, func(m *model) {
		v, _ := m.get("tokenizer.ggml.tokens")
		toks := slices.Clone(v.V.(gguf.Array).Values.([]string))
		tv, _ := m.get("tokenizer.ggml.token_type")
		typs := slices.Clone(tv.V.(gguf.Array).Values.([]int32))
		for i := range 40 {
			toks, typs = append(toks, fmt.Sprintf("extra%d", i)), append(typs, 1)
		}
		m.set("tokenizer.ggml.tokens", gguf.Strings(toks))
		m.set("tokenizer.ggml.token_type", gguf.Int32s(typs))
	})
}

// header damages the fixed header and the container's counts and lengths.
func (g *builder) header() {
	r := ggufRefused
	g.bytes("header", "empty file", r, func([]byte) []byte { return nil })
	g.bytes("header", "3 bytes", r, func(d []byte) []byte { return d[:3] })
	g.bytes("header", "magic GGUX", r, func(d []byte) []byte { d[3] = 'X'; return d })
	g.bytes("header", "magic lower case", r, func(d []byte) []byte { copy(d, "gguf"); return d })
	for _, v := range []uint32{0, 1, 4, 0x03000000, math.MaxUint32} {
		g.bytes("header", fmt.Sprintf("version %#x", v), r, func(d []byte) []byte { binary.LittleEndian.PutUint32(d[4:], v); return d })
	}
	// GGUF v2 has the v3 layout (64-bit counts); every reader still takes it.
	g.bytes("header", "version 2", g.valid, func(d []byte) []byte { binary.LittleEndian.PutUint32(d[4:], 2); return d })
	nt, nkv := binary.LittleEndian.Uint64(g.b.gguf[8:]), binary.LittleEndian.Uint64(g.b.gguf[16:])
	for _, c := range []struct {
		what string
		off  int
		v    uint64
	}{
		{"tensor count +1", 8, nt + 1}, {"tensor count -1", 8, nt - 1}, {"tensor count 0", 8, 0},
		{"tensor count 2^40", 8, 1 << 40}, {"tensor count 2^64-1", 8, math.MaxUint64},
		{"metadata count +1", 16, nkv + 1}, {"metadata count -1", 16, nkv - 1}, {"metadata count 0", 16, 0},
		{"metadata count 2^40", 16, 1 << 40}, {"metadata count 2^64-1", 16, math.MaxUint64},
	} {
		g.bytes("header", c.what, r, func(d []byte) []byte { binary.LittleEndian.PutUint64(d[c.off:], c.v); return d })
	}
	n := len(g.b.gguf)
	for _, cut := range []int{8, 24, 25, 200, n / 4, n / 2, n - 33, n - 1} {
		g.bytes("header", fmt.Sprintf("truncated to %d of %d bytes", cut, n), r, func(d []byte) []byte { return d[:cut] })
	}
	g.bytes("header", "trailing garbage", g.valid, func(d []byte) []byte { return append(d, make([]byte, 1000)...) })
	// The first key's length, then the first value's type tag.
	g.bytes("header", "first key length 2^40", r, func(d []byte) []byte { binary.LittleEndian.PutUint64(d[24:], 1<<40); return d })
	keyLen := int(binary.LittleEndian.Uint64(g.b.gguf[24:]))
	g.bytes("header", "first value type 99", r, func(d []byte) []byte { binary.LittleEndian.PutUint32(d[32+keyLen:], 99); return d })
}

// metadata damages individual key/value entries (the container level).
func (g *builder) metadata() {
	r := ggufRefused
	g.edit("metadata", "unknown value type", r, func(m *model) { m.setRaw("general.name", rawValue(99, u64le(0))) })
	g.edit("metadata", "string length past the end", r, func(m *model) { m.setRaw("general.name", rawValue(8, u64le(1<<62))) })
	g.edit("metadata", "array of unknown element type", r, func(m *model) { m.setRaw("general.hostile", rawValue(9, u32le(77), u64le(1), u32le(1))) })
	g.edit("metadata", "array count 2^60", r, func(m *model) { m.setRaw("general.hostile", rawValue(9, u32le(4), u64le(1<<60))) })
	g.edit("metadata", "array of strings count 2^61", r, func(m *model) { m.setRaw("general.hostile", rawValue(9, u32le(8), u64le(1<<61))) })
	g.edit("metadata", "bool 2", r, func(m *model) { m.setRaw("general.hostile", rawValue(7, []byte{2})) })
	g.edit("metadata", "nested arrays", r, func(m *model) {
		m.set("general.hostile", gguf.Arrays([]gguf.Array{{Elem: gguf.ValueUint32, Values: []uint32{1, 2}}}))
	})
	g.edit("metadata", "arrays nested 10 deep", r, func(m *model) {
		raw := u32le(9) // the value's type: an array
		for range 9 {
			raw = append(append(raw, u32le(9)...), u64le(1)...) // of one array ...
		}
		raw = append(append(raw, u32le(4)...), u64le(0)...) // ... of no uint32
		m.setRaw("general.hostile", raw)
	})
	g.edit("metadata", "duplicate key", r, func(m *model) { m.kvs = append(m.kvs, kv{key: "general.name", val: gguf.String("again")}) })
	g.edit("metadata", "empty key", r, func(m *model) { m.kvs = append(m.kvs, kv{key: "", val: gguf.String("x")}) })
	g.edit("metadata", "key not UTF-8", g.valid, func(m *model) { m.set("general.\xff\xfe", gguf.String("x")) })
	g.edit("metadata", "2000 extra keys", g.valid, func(m *model) {
		for i := range 2000 {
			m.set(fmt.Sprintf("hostile.k%d", i), gguf.Uint32(uint32(i)))
		}
	})
	g.edit("metadata", "4 MB string", g.valid, func(m *model) { m.set("general.description", gguf.String(strings.Repeat("x", 4<<20))) })
	// general.name names quantize's default output file: these must not (the model stays valid).
	for _, c := range []struct{ what, name string }{{"path traversal", "../../escape"}, {"NUL", "a\x00b"}, {"300 bytes", strings.Repeat("n", 300)}} {
		g.edit("metadata", "general.name "+c.what, g.valid, func(m *model) { m.set("general.name", gguf.String(c.name)) })
	}
	g.edit("metadata", "alignment 64", g.valid, func(m *model) { m.set("general.alignment", gguf.Uint32(64)) })
	g.edit("metadata", "alignment 1", g.valid, func(m *model) { m.set("general.alignment", gguf.Uint32(1)) })
	g.edit("metadata", "alignment 0", r, func(m *model) { m.set("general.alignment", gguf.Uint32(0)) })
	g.edit("metadata", "alignment 48", r, func(m *model) { m.set("general.alignment", gguf.Uint32(48)) })
	g.edit("metadata", "alignment uint64", r, func(m *model) { m.set("general.alignment", gguf.Uint64(32)) })
	g.edit("metadata", "architecture missing", r, func(m *model) { m.del("general.architecture") })
	g.edit("metadata", "architecture llama", r, func(m *model) { m.set("general.architecture", gguf.String("llama")) })
	g.edit("metadata", "architecture qwen3next", r, func(m *model) { m.set("general.architecture", gguf.String("qwen3next")) })
	g.edit("metadata", "architecture empty", r, func(m *model) { m.set("general.architecture", gguf.String("")) })
	g.edit("metadata", "architecture uint32", r, func(m *model) { m.set("general.architecture", gguf.Uint32(2)) })
}

// hparam kinds: how a value of the key may change and stay valid.
type hkind int

const (
	hShape hkind = iota // tensor shapes follow from it: any other value is refused
	hFree               // any value ≥ 1 is valid (context_length; feed_forward_length of MoE models)
	hBase               // rope.freq_base: finite and > 0
	hEps                // RMS epsilon: finite and ≥ 0
	hUsed               // expert_used_count: 1..expert_count
	hSkip               // not mutated here (handled by a specific case)
)

// hparamKinds classifies the hyper-parameters the bases carry (keys without the architecture prefix).
func (g *builder) hparamKind(suffix string) (hkind, bool) {
	moe := strings.HasSuffix(g.b.Arch, "moe")
	switch suffix {
	case "block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
		"attention.key_length", "attention.value_length", "expert_count", "expert_feed_forward_length",
		"expert_shared_feed_forward_length", "ssm.conv_kernel", "ssm.state_size", "ssm.group_count",
		"ssm.time_step_rank", "ssm.inner_size":
		return hShape, true
	case "feed_forward_length":
		if moe {
			return hFree, true
		}
		return hShape, true
	case "context_length":
		return hFree, true
	case "rope.freq_base":
		return hBase, true
	case "attention.layer_norm_rms_epsilon":
		return hEps, true
	case "expert_used_count":
		return hUsed, true
	case "rope.dimension_count", "full_attention_interval", "nextn_predict_layers", "rope.dimension_sections":
		return hSkip, true
	}
	return 0, false
}

func (g *builder) u32(m *model, key string) uint32 {
	v, _ := m.get(key)
	x, _ := v.V.(uint32)
	return x
}

// hparams changes the architecture's hyper-parameters: values, types, presence.
func (g *builder) hparams() {
	base := g.b.model
	arch := base.arch()
	p := arch + "."
	r := ggufRefused
	for _, e := range base.kvs {
		suffix, ok := strings.CutPrefix(e.key, p)
		if !ok {
			continue
		}
		kind, known := g.hparamKind(suffix)
		if !known || kind == hSkip {
			continue
		}
		key := e.key
		set := func(what string, ex Expect, v gguf.Value) {
			g.edit("hparams", suffix+" "+what, ex, func(m *model) { m.set(key, v) })
		}
		switch e.val.Type {
		case gguf.ValueUint32:
			v := e.val.V.(uint32)
			seen := map[uint32]bool{v: true}
			values := []uint32{0, 1, v + 1, 2 * v, math.MaxUint32}
			if kind == hShape {
				values = []uint32{0, v + 1, math.MaxUint32} // every other value is refused alike
				if suffix == "attention.head_count" {
					values = append(values, 3) // issue 14: GGML_ASSERT in ggml_reshape
				}
			}
			for _, x := range values {
				if seen[x] {
					continue
				}
				seen[x] = true
				ok := false
				switch kind {
				case hFree:
					ok = x >= 1 && (suffix == "context_length" || x <= 1<<24) // widths are capped at 2^24
				case hUsed:
					ok = x >= 1 && x <= g.u32(base, p+"expert_count")
				}
				set(fmt.Sprint(x), g.pick(ok), gguf.Uint32(x))
			}
			// Engines read these keys with their exact GGUF type; any other type reads as absent.
			set("-1 as int32", r, gguf.Int32(-1))
			set("as string", r, gguf.String(fmt.Sprint(v)))
			if kind != hShape || suffix == "attention.head_count" {
				set("as uint64", r, gguf.Uint64(uint64(v)))
				set("as float32", r, gguf.Float32(float32(v)))
				set("as uint32 array", r, gguf.Uint32s([]uint32{v}))
			}
		case gguf.ValueFloat32:
			v := e.val.V.(float32)
			for _, c := range []struct {
				what string
				x    float32
			}{{"0", 0}, {"-1", -1}, {"0.5", 0.5}, {"1e38", 1e38}, {"denormal", 1e-45},
				{"NaN", float32(math.NaN())}, {"+Inf", float32(math.Inf(1))}, {"-Inf", float32(math.Inf(-1))}} {
				if c.x == v {
					continue
				}
				finite := !math.IsNaN(float64(c.x)) && !math.IsInf(float64(c.x), 0)
				ok := finite && ((kind == hBase && c.x > 1) || (kind == hEps && c.x >= 0))
				set(c.what, g.pick(ok), gguf.Float32(c.x))
			}
			set("as float64", r, gguf.Float64(float64(v)))
			set("as string", r, gguf.String(fmt.Sprint(v)))
		}
		// An absent key: the engines' defaults (key/value head size = embedding_length / head_count) happen to
		// match the bases for the head sizes; everything else is required.
		missingOK := false
		switch suffix {
		case "attention.key_length", "attention.value_length":
			missingOK = g.u32(base, p+"embedding_length")/g.u32(base, p+"attention.head_count") == g.u32(base, p+"attention.key_length")
		case "expert_feed_forward_length":
			// llama.cpp falls back to feed_forward_length / expert_used_count.
			ff, used := g.u32(base, p+"feed_forward_length"), g.u32(base, p+"expert_used_count")
			missingOK = used > 0 && ff/used == e.val.V.(uint32) && ff/used > 0
		case "expert_shared_feed_forward_length":
			missingOK = g.u32(base, p+"feed_forward_length") == e.val.V.(uint32)
		case "feed_forward_length":
			missingOK = kind == hFree && base.kvIndex(p+"expert_feed_forward_length") >= 0
		}
		g.edit("hparams", suffix+" missing", g.pick(missingOK), func(m *model) { m.del(key) })
	}

	dense := !strings.HasSuffix(arch, "moe")
	hybrid := arch == "qwen35" || arch == "qwen35moe"
	if dense {
		g.edit("hparams", "expert_count 4 on a dense model", r, func(m *model) {
			m.set(p+"expert_count", gguf.Uint32(4))
			m.set(p+"expert_used_count", gguf.Uint32(2))
		})
	}
	// An embedding model: llama.cpp runs it, the built-in engine does not.
	g.edit("hparams", "pooling_type 1", ggufServeRefused, func(m *model) { m.set(p+"pooling_type", gguf.Uint32(1)) })
	g.edit("hparams", "vision.block_count 1", r, func(m *model) { m.set(p+"vision.block_count", gguf.Uint32(1)) })
	g.edit("hparams", "rope yarn x4", g.valid, func(m *model) {
		m.set(p+"rope.scaling.type", gguf.String("yarn"))
		m.set(p+"rope.scaling.factor", gguf.Float32(4))
		m.set(p+"rope.scaling.original_context_length", gguf.Uint32(4096))
	})
	g.edit("hparams", "rope yarn x0.5", r, func(m *model) {
		m.set(p+"rope.scaling.type", gguf.String("yarn"))
		m.set(p+"rope.scaling.factor", gguf.Float32(0.5))
	})
	g.edit("hparams", "rope linear x2", g.valid, func(m *model) {
		m.set(p+"rope.scaling.type", gguf.String("linear"))
		m.set(p+"rope.scaling.factor", gguf.Float32(2))
	})
	g.edit("hparams", "rope scaling type bogus", r, func(m *model) { m.set(p+"rope.scaling.type", gguf.String("bogus")) })
	g.edit("hparams", "rope scaling factor 0", r, func(m *model) { m.set(p+"rope.scaling.factor", gguf.Float32(0)) })
	g.edit("hparams", "rope scaling factor NaN", r, func(m *model) { m.set(p+"rope.scaling.factor", gguf.Float32(float32(math.NaN()))) })
	g.edit("hparams", "rope original context 2^31", r, func(m *model) { m.set(p+"rope.scaling.original_context_length", gguf.Uint32(1<<31)) })

	hd := g.u32(base, p+"attention.key_length")
	if hd == 0 {
		hd = g.u32(base, p+"embedding_length") / g.u32(base, p+"attention.head_count")
	}
	if !hybrid {
		g.edit("hparams", "rope.dimension_count = head size", g.valid, func(m *model) { m.set(p+"rope.dimension_count", gguf.Uint32(hd)) })
		g.edit("hparams", "rope.dimension_count half the head", r, func(m *model) { m.set(p+"rope.dimension_count", gguf.Uint32(hd/2)) })
		g.edit("hparams", "nextn_predict_layers 1", r, func(m *model) { m.set(p+"nextn_predict_layers", gguf.Uint32(1)) })
		return
	}

	// Qwen3.5: rotary dimensions and sections (8 rotary dims in sections 2+1+1 pairs), the layer pattern, MTP.
	for _, c := range []struct {
		v  uint32
		ok bool
	}{{hd, true}, {4, false}, {6, false}, {7, false}, {hd + 2, false}, {0, false}} {
		g.edit("hparams", fmt.Sprintf("rope.dimension_count %d", c.v), g.pick(c.ok), func(m *model) { m.set(p+"rope.dimension_count", gguf.Uint32(c.v)) })
	}
	g.edit("hparams", "rope.dimension_count missing", g.valid, func(m *model) { m.del(p + "rope.dimension_count") })
	for _, c := range []struct {
		v  []int32
		ok bool
	}{{[]int32{4, 0, 0, 0}, true}, {[]int32{2, 2, 0, 0}, true}, {[]int32{2, 1, 1}, true}, {[]int32{0, 0, 0, 4}, false},
		{[]int32{0, 0, 0, 0}, false}, {[]int32{-1, 3, 1, 1}, false}, {[]int32{100, 0, 0, 0}, false},
		{[]int32{2, 1, 1, 0, 0}, false}, {[]int32{2}, false}} {
		g.edit("hparams", fmt.Sprintf("rope.dimension_sections %v", c.v), g.pick(c.ok), func(m *model) { m.set(p+"rope.dimension_sections", gguf.Int32s(c.v)) })
	}
	g.edit("hparams", "rope.dimension_sections uint32", r, func(m *model) { m.set(p+"rope.dimension_sections", gguf.Uint32s([]uint32{2, 1, 1, 0})) })
	g.edit("hparams", "rope.dimension_sections missing", r, func(m *model) { m.del(p + "rope.dimension_sections") })
	g.edit("hparams", "mrope_sections hostile", r, func(m *model) { m.set(p+"mrope_sections", gguf.Int32s([]int32{5, -5, 0, 0})) })
	g.edit("hparams", "attention.scale 0.1", g.valid, func(m *model) { m.set(p+"attention.scale", gguf.Float32(0.1)) })
	g.edit("hparams", "attention.scale -1", r, func(m *model) { m.set(p+"attention.scale", gguf.Float32(-1)) })
	g.edit("hparams", "attention.scale NaN", r, func(m *model) { m.set(p+"attention.scale", gguf.Float32(float32(math.NaN()))) })

	n := g.u32(base, p+"block_count")
	interval := g.u32(base, p+"full_attention_interval")
	kvh := g.u32(base, p+"attention.head_count_kv")
	for _, v := range []uint32{0, 1, 2, 3, interval + 1, 99} {
		if v == interval {
			continue
		}
		g.edit("hparams", fmt.Sprintf("full_attention_interval %d", v), r, func(m *model) { m.set(p+"full_attention_interval", gguf.Uint32(v)) })
	}
	// Absent, the engines default to 4, which the 4-layer bases use.
	g.edit("hparams", "full_attention_interval missing", g.pick(interval == 4 && n >= 4), func(m *model) { m.del(p + "full_attention_interval") })
	trunk := n
	if g.b.MTP {
		trunk = n - g.u32(base, p+"nextn_predict_layers")
	}
	perLayer := func(fill func(i uint32) uint32) []uint32 {
		v := make([]uint32, n)
		for i := range v {
			v[i] = fill(uint32(i))
		}
		return v
	}
	ollama := perLayer(func(i uint32) uint32 { // Ollama's layout: 0 on recurrent layers
		if i < trunk && (i+1)%interval != 0 {
			return 0
		}
		return kvh
	})
	g.edit("hparams", "head_count_kv per layer (Ollama layout)", g.valid, func(m *model) { m.set(p+"attention.head_count_kv", gguf.Uint32s(ollama)) })
	i32 := make([]int32, len(ollama))
	for i, v := range ollama {
		i32[i] = int32(v)
	}
	g.edit("hparams", "head_count_kv per layer int32", g.valid, func(m *model) { m.set(p+"attention.head_count_kv", gguf.Int32s(i32)) })
	g.edit("hparams", "head_count_kv per layer all equal", g.valid, func(m *model) {
		m.set(p+"attention.head_count_kv", gguf.Uint32s(perLayer(func(uint32) uint32 { return kvh })))
	})
	g.edit("hparams", "head_count_kv per layer all 0", r, func(m *model) {
		m.set(p+"attention.head_count_kv", gguf.Uint32s(perLayer(func(uint32) uint32 { return 0 })))
	})
	g.edit("hparams", "head_count_kv per layer against the interval", r, func(m *model) {
		m.set(p+"attention.head_count_kv", gguf.Uint32s(perLayer(func(i uint32) uint32 {
			if i == 0 {
				return kvh
			}
			return 0
		})))
	})
	g.edit("hparams", "head_count_kv per layer short", r, func(m *model) { m.set(p+"attention.head_count_kv", gguf.Uint32s(ollama[1:])) })
	if g.b.MTP {
		g.edit("hparams", "nextn_predict_layers 0", r, func(m *model) { m.set(p+"nextn_predict_layers", gguf.Uint32(0)) })
		g.edit("hparams", "nextn_predict_layers 2", r, func(m *model) { m.set(p+"nextn_predict_layers", gguf.Uint32(2)) })
		g.edit("hparams", "nextn_predict_layers = block_count", r, func(m *model) { m.set(p+"nextn_predict_layers", gguf.Uint32(n)) })
	} else {
		g.edit("hparams", "nextn_predict_layers 1 without its tensors", r, func(m *model) { m.set(p+"nextn_predict_layers", gguf.Uint32(1)) })
	}
}

// shapes changes tensor infos: shapes, types, offsets, names; drops and adds tensors.
func (g *builder) shapes() {
	r := ggufRefused
	base := g.b.model
	// One tensor of every kind the base has, in the base's order.
	picked := map[string]bool{}
	var mats, vecs []tensor
	for _, t := range base.tensors {
		kind := kindOf(t.name)
		if picked[kind] {
			continue
		}
		picked[kind] = true
		if len(t.shape) == 1 || (len(t.shape) == 2 && t.shape[1] == 1) {
			vecs = append(vecs, t)
		} else {
			mats = append(mats, t)
		}
	}
	// Every kind of matrix: transposed and off by a little (the graph's shape checks, per tensor).
	for _, t := range mats {
		name := t.name
		with := func(what string, e Expect, f func(t *tensor)) {
			g.edit("shapes", name+" "+what, e, func(m *model) { f(m.tensor(name)) })
		}
		if t.shape[0] != t.shape[1] {
			with("transposed", r, func(t *tensor) { t.shape[0], t.shape[1] = t.shape[1], t.shape[0] })
		}
		with("ne0+32", r, func(t *tensor) { t.shape[0] += 32 })
		with("ne1-1", r, func(t *tensor) { t.shape[1]-- })
	}
	// Dimensions and types, on a few tensors (the container's checks do not depend on the kind).
	for i, name := range []string{"token_embd.weight", "blk.0.ffn_up.weight", "blk.0.ffn_up_exps.weight", "blk.0.ssm_conv1d.weight"} {
		t := base.tensor(name)
		if t == nil {
			continue
		}
		with := func(what string, e Expect, f func(t *tensor)) {
			g.edit("shapes", name+" "+what, e, func(m *model) { f(m.tensor(name)) })
		}
		if i < 2 {
			with("ne1 0", r, func(t *tensor) { t.shape[1] = 0 })
			with("trailing dim 1", g.valid, func(t *tensor) { t.shape = append(t.shape, 1) })
			with("leading dim 1", r, func(t *tensor) { t.shape = append([]uint64{1}, t.shape...) })
			with("5 dims", r, func(t *tensor) { t.shape = append(t.shape, 1, 1, 1)[:5] })
			with("0 dims", r, func(t *tensor) { t.shape = nil })
			with("dims overflow", r, func(t *tensor) { t.shape = []uint64{1 << 62, 1 << 62} })
			with("dims 2^31 x 2^31", r, func(t *tensor) { t.shape = []uint64{1 << 31, 1 << 31} })
			with("ndims 9 written", r, func(t *tensor) { v := uint32(9); t.ndims = &v })
		}
		typ := func(what string, to gguf.Type, e Expect) {
			if strings.HasSuffix(name, "ssm_conv1d.weight") {
				e = r // ggml_ssm_conv takes F32 only
			}
			with("as "+what, e, func(t *tensor) { t.typ, t.data = uint32(to), nil })
		}
		if t.typ != uint32(gguf.TypeF16) {
			typ("F16", gguf.TypeF16, g.valid)
		}
		if t.shape[0]%32 == 0 {
			typ("Q8_0", gguf.TypeQ8_0, g.valid)
			typ("IQ4_NL", gguf.TypeIQ4_NL, g.valid)
			typ("Q8_1", gguf.TypeQ8_1, r)
		}
		typ("Q4_K (row not whole blocks)", gguf.TypeQ4_K, r)
		typ("TQ1_0", gguf.TypeTQ1_0, r)
		typ("I32", gguf.TypeI32, r)
		typ("F64", gguf.TypeF64, r)
		with("type id 4 (removed)", r, func(t *tensor) { t.typ = 4 })
		with("type id 99", r, func(t *tensor) { t.typ = 99 })
	}
	for i, t := range vecs {
		name := t.name
		with := func(what string, e Expect, f func(t *tensor)) {
			g.edit("shapes", name+" "+what, e, func(m *model) { f(m.tensor(name)) })
		}
		with("+1", r, func(t *tensor) { t.shape[0]++ })
		with("as F16", r, func(t *tensor) { t.typ, t.data = uint32(gguf.TypeF16), nil })
		if i == 0 {
			with("as [n 2]", r, func(t *tensor) { t.shape = []uint64{t.shape[0], 2} })
		}
	}

	// Offsets: llama.cpp requires each to be the running sum of the padded sizes.
	if len(base.tensors) > 2 {
		second := base.tensors[1].name
		g.edit("shapes", "second offset 0 (overlapping)", r, func(m *model) {
			off := uint64(0)
			m.tensor(second).offset = &off
		})
		g.edit("shapes", "offset past the end", r, func(m *model) {
			off := uint64(1 << 40)
			m.tensor(second).offset = &off
		})
		g.edit("shapes", "offset misaligned", r, func(m *model) {
			// The first tensor's data is 3 bytes longer than its shape says, so every later offset is off.
			t := &m.tensors[0]
			t.data = append(slices.Clone(t.data), 1, 2, 3)
			t.noFixup = true
		})
	}

	// Missing and extra tensors.
	arch := base.arch()
	n := g.u32(base, arch+".block_count")
	for _, name := range []string{"token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight",
		"blk.0.ffn_down.weight", "blk.0.ffn_down_exps.weight", "blk.0.ssm_a", "blk.0.attn_qkv.weight",
		fmt.Sprintf("blk.%d.attn_q.weight", n-1), fmt.Sprintf("blk.%d.attn_k_norm.weight", n-1)} {
		if base.tensorIndex(name) < 0 {
			continue
		}
		g.edit("shapes", "drop "+name, r, func(m *model) { i := m.tensorIndex(name); m.tensors = slices.Delete(m.tensors, i, i+1) })
	}
	if i := base.tensorIndex("output.weight"); i >= 0 {
		// Without an output matrix the engines tie it to the embedding: still a valid model.
		g.edit("shapes", "drop output.weight (tied)", g.valid, func(m *model) {
			i := m.tensorIndex("output.weight")
			m.tensors = slices.Delete(m.tensors, i, i+1)
		})
	} else {
		g.edit("shapes", "add output.weight (untied)", g.valid, func(m *model) {
			te := *m.tensor("token_embd.weight")
			te.name = "output.weight"
			m.tensors = append(m.tensors, te)
		})
	}
	extra := func(what, name string, e Expect) {
		g.edit("shapes", what, e, func(m *model) {
			t := m.tensors[len(m.tensors)-1]
			t.name = name
			m.tensors = append(m.tensors, t)
		})
	}
	extra("extra layer past block_count", fmt.Sprintf("blk.%d.attn_norm.weight", n), r)
	extra("extra layer 2^40", "blk.1099511627776.attn_norm.weight", r)
	extra("extra unknown tensor", "blk.0.hostile.weight", r)
	extra("extra top-level tensor", "hostile.weight", r)
	extra("vision tensor", "v.blk.0.attn_q.weight", r)
	extra("duplicate name", base.tensors[0].name, r)
	rename := func(what, to string) {
		g.edit("shapes", what, r, func(m *model) { m.tensors[len(m.tensors)-1].name = to })
	}
	rename("name 64 bytes", strings.Repeat("n", 64))
	rename("name not UTF-8", "blk.0.ffn_up.\xff\xfe")
	rename("name with NUL", "blk.0.ffn_up\x00.weight")
	rename("name with escape", "blk.0.ffn_up.\x1b[2J")
	rename("empty name", "")
	if n >= 2 {
		// Layers 0 and 1 swapped: a different model, still a valid one (both layers of the same kind).
		g.edit("shapes", "layers 0 and 1 swapped", g.valid, func(m *model) {
			for i := range m.tensors {
				name := m.tensors[i].name
				switch {
				case strings.HasPrefix(name, "blk.0."):
					m.tensors[i].name = "blk.1." + name[len("blk.0."):]
				case strings.HasPrefix(name, "blk.1."):
					m.tensors[i].name = "blk.0." + name[len("blk.1."):]
				}
			}
		})
	}
	if base.tensorIndex("blk.0.ssm_dt.bias") >= 0 {
		g.edit("shapes", "ssm_dt without .bias (Ollama layout)", g.valid, func(m *model) {
			for i := range m.tensors {
				if n, ok := strings.CutSuffix(m.tensors[i].name, ".ssm_dt.bias"); ok {
					m.tensors[i].name = n + ".ssm_dt"
				}
			}
		})
		g.edit("shapes", "ssm_dt and ssm_dt.bias", r, func(m *model) {
			t := *m.tensor("blk.0.ssm_dt.bias")
			t.name = "blk.0.ssm_dt"
			m.tensors = append(m.tensors, t)
		})
	}
}

// kindOf is a tensor name without its layer number ("blk.N.ffn_up.weight" → "ffn_up.weight").
func kindOf(name string) string {
	if rest, ok := strings.CutPrefix(name, "blk."); ok {
		if i := strings.IndexByte(rest, '.'); i > 0 {
			return rest[i+1:]
		}
	}
	return name
}
