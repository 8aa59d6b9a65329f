package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/golden"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// mixesPath is the in-repo copy of the llama-quantize type choices recorded at llama.cpp 34af94cd.
const mixesPath = "../kquant/testdata/ggml-golden/mixes/llama-quantize-type-choices.json"

type mixLayout struct {
	Metadata map[string]any      `json:"metadata"`
	TensorNE map[string][]uint64 `json:"tensor_ne"`
	FTypes   map[string]struct {
		Types               map[string]string `json:"types"`
		FileType            uint32            `json:"file_type"`
		QuantizationVersion uint32            `json:"quantization_version"`
	} `json:"ftypes"`
	OutputOrder []string `json:"output_tensor_order"`
}

func loadMixes(t *testing.T) map[string]mixLayout {
	t.Helper()
	raw, err := os.ReadFile(mixesPath)
	if err != nil {
		t.Fatalf("golden mixes: %v", err)
	}
	var doc struct {
		Commit  string               `json:"llama_cpp_commit"`
		Layouts map[string]mixLayout `json:"layouts"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("golden mixes: %v", err)
	}
	if doc.Commit != "34af94cd9ab277632e27caeec2d41de2fd091b31" || len(doc.Layouts) != 5 {
		t.Fatalf("golden mixes: commit %s, %d layouts; want 34af94cd…, 5", doc.Commit, len(doc.Layouts))
	}
	return doc.Layouts
}

// inputType is what the converter writes: F32 for 1-D tensors, ssm_conv1d and the MoE router, F16 for the
// other matrices (the golden layouts were F16 files, general.file_type = 1).
func inputType(name string, shape []uint64) gguf.Type {
	if nDims(shape) < 2 || strings.Contains(name, "ssm_conv1d") || strings.Contains(name, "ffn_gate_inp") {
		return gguf.TypeF32
	}
	return gguf.TypeF16
}

func descs(ne map[string][]uint64, rng *rand.Rand) []TensorDesc {
	out := make([]TensorDesc, 0, len(ne))
	for name, shape := range ne {
		out = append(out, TensorDesc{Name: name, Type: inputType(name, shape), Shape: shape})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestGoldenMixes reproduces every tensor type, the tensor order and the two metadata values llama-quantize
// wrote for every layout and file type of the golden file.
func TestGoldenMixes(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	cases, tensors := 0, 0
	for lname, lay := range loadMixes(t) {
		arch, _ := lay.Metadata["general.architecture"].(string)
		info, err := ModelInfoFromMetadata(arch, lay.Metadata)
		if err != nil {
			t.Fatalf("%s: %v", lname, err)
		}
		if len(lay.FTypes) != 16 {
			t.Fatalf("%s: %d file types, want 16", lname, len(lay.FTypes))
		}
		for fname, want := range lay.FTypes {
			ft, err := gguf.ParseFileType(fname)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Make(arch, info, descs(lay.TensorNE, rng), ft, Overrides{})
			if err != nil {
				t.Fatalf("%s %s: %v", lname, fname, err)
			}
			cases++
			order := make([]string, len(p.Entries))
			bad := 0
			for i, e := range p.Entries {
				order[i] = e.Name
				tensors++
				if got := e.To.String(); got != want.Types[e.Name] {
					bad++
					if bad <= 5 {
						t.Errorf("%s %s: %s = %s, llama-quantize %s", lname, fname, e.Name, got, want.Types[e.Name])
					}
				}
				if e.Fallback != "" {
					t.Errorf("%s %s: %s fell back (%s); the golden shapes never do", lname, fname, e.Name, e.Fallback)
				}
			}
			if len(p.Entries) != len(want.Types) || bad > 0 {
				t.Errorf("%s %s: %d mismatches over %d tensors (golden %d)", lname, fname, bad, len(p.Entries),
					len(want.Types))
			}
			if !reflect.DeepEqual(order, lay.OutputOrder) {
				t.Errorf("%s %s: tensor order differs from llama-quantize's", lname, fname)
			}
			kv := p.MetadataKVs()
			wantKV := []KV{{"general.quantization_version", want.QuantizationVersion}, {"general.file_type", want.FileType}}
			if !reflect.DeepEqual(kv, wantKV) {
				t.Errorf("%s %s: metadata %v, want %v", lname, fname, kv, wantKV)
			}
		}
	}
	if cases != 80 {
		t.Errorf("checked %d layout×file-type cases, want 80", cases)
	}
	t.Logf("%d cases, %d tensor choices identical to llama-quantize", cases, tensors)
}

// layout builds a synthetic Qwen tensor list with the shapes convert_hf_to_gguf writes.
type layout struct {
	arch                      string
	layers, mtp               int // decoder layers, extra MTP (nextn) layers
	hidden, ffn, vocab        uint64
	heads, kv, headDim        uint64
	experts, ffnExp           uint64 // MoE: expert count and expert ffn width
	tied, bias, shared        bool   // no output.weight; attention biases (qwen2); shared expert (qwen35moe)
	interval                  int    // qwen35: full attention every interval-th layer
	ssmK, ssmGroups, ssmHeads uint64 // qwen35 linear attention
}

func (l layout) info() ModelInfo {
	return ModelInfo{BlockCount: l.layers + l.mtp, HeadCount: int(l.heads), HeadCountKV: int(l.kv),
		ExpertCount: int(l.experts)}
}

func (l layout) tensors() []TensorDesc {
	var out []TensorDesc
	add := func(name string, shape ...uint64) {
		out = append(out, TensorDesc{Name: name, Type: inputType(name, shape), Shape: shape})
	}
	add("token_embd.weight", l.hidden, l.vocab)
	add("output_norm.weight", l.hidden)
	if !l.tied {
		add("output.weight", l.hidden, l.vocab)
	}
	q, kv := l.heads*l.headDim, l.kv*l.headDim
	for i := 0; i < l.layers+l.mtp; i++ {
		b := fmt.Sprintf("blk.%d.", i)
		add(b+"attn_norm.weight", l.hidden)
		full := l.interval == 0 || (i+1)%l.interval == 0 || i >= l.layers
		switch {
		case full && l.interval > 0: // qwen35 gated attention: q and gate interleaved
			add(b+"attn_q.weight", l.hidden, 2*q)
		case full:
			add(b+"attn_q.weight", l.hidden, q)
		}
		if full {
			add(b+"attn_k.weight", l.hidden, kv)
			add(b+"attn_v.weight", l.hidden, kv)
			add(b+"attn_output.weight", q, l.hidden)
			if l.bias {
				add(b+"attn_q.bias", q)
				add(b+"attn_k.bias", kv)
				add(b+"attn_v.bias", kv)
			} else {
				add(b+"attn_q_norm.weight", l.headDim)
				add(b+"attn_k_norm.weight", l.headDim)
			}
		} else {
			conv := 2*l.ssmK*l.ssmGroups + l.ssmK*l.ssmHeads
			add(b+"attn_qkv.weight", l.hidden, conv)
			add(b+"attn_gate.weight", l.hidden, l.ssmK*l.ssmHeads)
			add(b+"ssm_conv1d.weight", 4, conv)
			add(b+"ssm_dt.bias", l.ssmHeads)
			add(b+"ssm_a", l.ssmHeads)
			add(b+"ssm_beta.weight", l.hidden, l.ssmHeads)
			add(b+"ssm_alpha.weight", l.hidden, l.ssmHeads)
			add(b+"ssm_norm.weight", l.ssmK)
			add(b+"ssm_out.weight", l.ssmK*l.ssmHeads, l.hidden)
		}
		if l.interval > 0 {
			add(b+"post_attention_norm.weight", l.hidden)
		} else {
			add(b+"ffn_norm.weight", l.hidden)
		}
		if l.experts > 0 {
			add(b+"ffn_gate_inp.weight", l.hidden, l.experts)
			add(b+"ffn_gate_exps.weight", l.hidden, l.ffnExp, l.experts)
			add(b+"ffn_up_exps.weight", l.hidden, l.ffnExp, l.experts)
			add(b+"ffn_down_exps.weight", l.ffnExp, l.hidden, l.experts)
			if l.shared {
				add(b+"ffn_gate_inp_shexp.weight", l.hidden)
				add(b+"ffn_gate_shexp.weight", l.hidden, l.ffn)
				add(b+"ffn_up_shexp.weight", l.hidden, l.ffn)
				add(b+"ffn_down_shexp.weight", l.ffn, l.hidden)
			}
		} else {
			add(b+"ffn_gate.weight", l.hidden, l.ffn)
			add(b+"ffn_up.weight", l.hidden, l.ffn)
			add(b+"ffn_down.weight", l.ffn, l.hidden)
		}
		if i >= l.layers {
			add(b+"nextn.eh_proj.weight", 2*l.hidden, l.hidden)
			add(b+"nextn.enorm.weight", l.hidden)
			add(b+"nextn.hnorm.weight", l.hidden)
			add(b+"nextn.shared_head_norm.weight", l.hidden)
		}
	}
	return out
}

// qwen25half is Qwen2.5-0.5B: hidden 896 (not a multiple of 256), ffn 4864 (= 19·256), 14/2 heads, tied.
var qwen25half = layout{arch: "qwen2", layers: 24, hidden: 896, ffn: 4864, vocab: 151936, heads: 14, kv: 2,
	headDim: 64, tied: true, bias: true}

var qwen3small = layout{arch: "qwen3", layers: 8, hidden: 256, ffn: 512, vocab: 512, heads: 4, kv: 2,
	headDim: 64, tied: true}

var qwen3moe = layout{arch: "qwen3moe", layers: 8, hidden: 256, ffn: 512, vocab: 512, heads: 4, kv: 2,
	headDim: 64, experts: 128, ffnExp: 256}

var qwen35moe = layout{arch: "qwen35moe", layers: 8, mtp: 1, hidden: 256, ffn: 512, vocab: 512, heads: 4,
	kv: 1, headDim: 128, experts: 16, ffnExp: 256, shared: true, tied: true, interval: 4, ssmK: 128,
	ssmGroups: 2, ssmHeads: 4}

func mustPlan(t *testing.T, l layout, ft gguf.FileType, ov Overrides) Plan {
	t.Helper()
	p, err := Make(l.arch, l.info(), l.tensors(), ft, ov)
	if err != nil {
		t.Fatalf("%s %s: %v", l.arch, ft, err)
	}
	return p
}

func byName(p Plan) map[string]Entry {
	m := make(map[string]Entry, len(p.Entries))
	for _, e := range p.Entries {
		m[e.Name] = e
	}
	return m
}

// check compares the plan's type for every tensor with want(name) and reports the first differences.
func check(t *testing.T, p Plan, want func(name string, layer int) gguf.Type) {
	t.Helper()
	bad := 0
	for _, e := range p.Entries {
		layer, _, _ := blockNumber(e.Name)
		if w := want(e.Name, layer); e.To != w {
			if bad++; bad <= 8 {
				t.Errorf("%s %s: got %s, want %s (fallback %q, note %q)", p.FileType, e.Name, e.To, w, e.Fallback, e.Note)
			}
		}
	}
}

func kept(name string) bool {
	return strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, ".bias") ||
		strings.HasSuffix(name, "ssm_a") || strings.Contains(name, "ssm_conv1d") ||
		strings.Contains(name, "ffn_gate_inp") || name == "output_norm.weight"
}

// inSet reports whether i is one of set.
func inSet(i int, set ...int) bool {
	for _, x := range set {
		if x == i {
			return true
		}
	}
	return false
}

// TestFallback896 checks Qwen2.5-0.5B, whose 896-wide rows fit no 256-block type (reference §3.5).
func TestFallback896(t *testing.T) {
	more := []int{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23}
	wide := func(name string) bool { // tensors whose row is the 896 hidden size
		return !strings.Contains(name, "ffn_down") && !kept(name)
	}

	p := mustPlan(t, qwen25half, gguf.FileTypeQ4_K_M, Overrides{})
	check(t, p, func(name string, layer int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "token_embd.weight": // output rule: 896 % 256 != 0 -> Q8_0 directly
			return gguf.TypeQ8_0
		case strings.Contains(name, "attn_v") && inSet(layer, more...): // Q6_K -> Q8_0
			return gguf.TypeQ8_0
		case strings.Contains(name, "ffn_down") && inSet(layer, more...):
			return gguf.TypeQ6_K
		case strings.Contains(name, "ffn_down"):
			return gguf.TypeQ4_K
		}
		return gguf.TypeQ5_0 // Q4_K -> Q5_0
	})
	if p.NFallback != 24*6 {
		t.Errorf("Q4_K_M: n_fallback %d, want %d (q, k, v, o, gate, up per layer; token_embd not counted)", p.NFallback, 24*6)
	}
	m := byName(p)
	if e := m["token_embd.weight"]; e.Bytes != 151936*896/32*34 || e.Fallback != "" {
		t.Errorf("token_embd: %d bytes, fallback %q; want %d, none", e.Bytes, e.Fallback, 151936*896/32*34)
	}
	if e := m["blk.3.attn_q.weight"]; e.Bytes != 896*896/32*22 || !strings.Contains(e.Fallback, "Q4_K") {
		t.Errorf("blk.3.attn_q: %d bytes, fallback %q; want %d, from Q4_K", e.Bytes, e.Fallback, 896*896/32*22)
	}

	// Q4_0: every row fits Q4_0, but the tied embedding's Q6_K falls back to Q8_0 and is counted.
	p = mustPlan(t, qwen25half, gguf.FileTypeQ4_0, Overrides{})
	check(t, p, func(name string, _ int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "token_embd.weight":
			return gguf.TypeQ8_0
		}
		return gguf.TypeQ4_0
	})
	if p.NFallback != 1 {
		t.Errorf("Q4_0: n_fallback %d, want 1", p.NFallback)
	}

	// IQ4_XS with GQA 7: attn_v Q5_K -> Q5_1, wide IQ4_XS -> IQ4_NL, first 3 ffn_down Q5_K.
	p = mustPlan(t, qwen25half, gguf.FileTypeIQ4_XS, Overrides{})
	check(t, p, func(name string, layer int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "token_embd.weight":
			return gguf.TypeQ8_0
		case strings.Contains(name, "attn_v"):
			return gguf.TypeQ5_1
		case strings.Contains(name, "ffn_down") && layer < 3:
			return gguf.TypeQ5_K
		case wide(name):
			return gguf.TypeIQ4_NL
		}
		return gguf.TypeIQ4_XS
	})

	// Q2_K: attn_v Q4_K (GQA >= 4) -> Q5_0, attn_output Q3_K -> Q4_0, ffn_down Q3_K fits.
	p = mustPlan(t, qwen25half, gguf.FileTypeQ2_K, Overrides{})
	check(t, p, func(name string, _ int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "token_embd.weight":
			return gguf.TypeQ8_0
		case strings.Contains(name, "attn_v"):
			return gguf.TypeQ5_0
		case strings.Contains(name, "ffn_down"):
			return gguf.TypeQ3_K
		}
		return gguf.TypeQ4_0
	})

	// A row that is not even a multiple of 32 ends in F16; a 32-block base type has no fallback at all.
	odd := []TensorDesc{{Name: "token_embd.weight", Type: gguf.TypeF16, Shape: []uint64{256, 64}},
		{Name: "blk.0.attn_gate.weight", Type: gguf.TypeF16, Shape: []uint64{100, 64}}}
	info := ModelInfo{BlockCount: 1, HeadCount: 4, HeadCountKV: 4}
	p, err := Make("qwen35", info, odd, gguf.FileTypeQ4_K_M, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if e := byName(p)["blk.0.attn_gate.weight"]; e.To != gguf.TypeF16 || e.Bytes != 100*64*2 {
		t.Errorf("100-wide row: %s %d bytes, want F16 12800", e.To, e.Bytes)
	}
	_, err = Make("qwen35", info, odd, gguf.FileTypeQ4_0, Overrides{})
	if err == nil || !strings.Contains(err.Error(), "no fallback") || !strings.Contains(err.Error(), "attn_gate") {
		t.Errorf("Q4_0 on a 100-wide row: err %v, want a no-fallback error naming the tensor", err)
	}
}

// TestMoE checks 3-D expert tensors: the router stays F32, ffn_down layers come from the name (so an expert
// and a shared-expert ffn_down in one layer get the same rule), the MTP layer counts in n_layer_all, and the
// n_expert == 8 bumps.
func TestMoE(t *testing.T) {
	more8 := []int{0, 3, 6, 7} // use_more_bits(i, 8)
	p := mustPlan(t, qwen3moe, gguf.FileTypeQ4_K_M, Overrides{})
	check(t, p, func(name string, layer int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "output.weight":
			return gguf.TypeQ6_K
		case (strings.Contains(name, "attn_v") || strings.Contains(name, "ffn_down")) && inSet(layer, more8...):
			return gguf.TypeQ6_K
		}
		return gguf.TypeQ4_K
	})
	e := byName(p)["blk.2.ffn_down_exps.weight"]
	if want := int64(256 * 256 / 256 * 144 * 128); e.Bytes != want || len(e.Shape) != 3 {
		t.Errorf("ffn_down_exps: %d bytes, shape %v; want %d, 3-D", e.Bytes, e.Shape, want)
	}
	if e := byName(p)["blk.0.ffn_gate_inp.weight"]; e.Convert() || e.Note == "" {
		t.Errorf("router: %s -> %s (%q), want kept", e.From, e.To, e.Note)
	}

	// qwen35moe, 8 layers + 1 MTP layer (block_count 9): layers 0,3,6,7 by use_more_bits(i, 9) → n/8 = 1,
	// 7n/8 = 7; the attn_v-like counter runs over 6 attn_qkv + 3 attn_v.
	p = mustPlan(t, qwen35moe, gguf.FileTypeQ4_K_M, Overrides{})
	check(t, p, func(name string, layer int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "token_embd.weight":
			return gguf.TypeQ6_K
		case strings.Contains(name, "ffn_down") && inSet(layer, 0, 3, 6, 7, 8):
			return gguf.TypeQ6_K
		case (strings.Contains(name, "attn_v") || strings.Contains(name, "attn_qkv")) && inSet(layer, 0, 3, 6, 7, 8):
			return gguf.TypeQ6_K
		}
		return gguf.TypeQ4_K
	})
	if e := byName(p)["blk.8.nextn.eh_proj.weight"]; e.To != gguf.TypeQ4_K {
		t.Errorf("nextn.eh_proj: %s, want Q4_K", e.To)
	}

	// Without counting the MTP layer, blk.8's experts would be outside [0, n_layer): an error upstream too.
	l := qwen35moe
	info := l.info()
	info.BlockCount = l.layers
	if _, err := Make(l.arch, info, l.tensors(), gguf.FileTypeQ4_K_M, Overrides{}); err == nil ||
		!strings.Contains(err.Error(), "blk.8.ffn_down_exps") {
		t.Errorf("layer 8 of 8: err %v, want an out-of-range error naming blk.8.ffn_down_exps", err)
	}

	// Eight experts (Mixtral rule): attn_v and attn_k Q8_0, attn_output Q5_K.
	l = qwen3moe
	l.experts = 8
	p = mustPlan(t, l, gguf.FileTypeQ4_K_M, Overrides{})
	check(t, p, func(name string, layer int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "output.weight":
			return gguf.TypeQ6_K
		case strings.Contains(name, "attn_v") || strings.Contains(name, "attn_k."):
			return gguf.TypeQ8_0
		case strings.Contains(name, "attn_output"):
			return gguf.TypeQ5_K
		case strings.Contains(name, "ffn_down") && inSet(layer, more8...):
			return gguf.TypeQ6_K
		}
		return gguf.TypeQ4_K
	})

	// With experts the layer must come from the name.
	odd := append(qwen3moe.tensors(), TensorDesc{Name: "ffn_up_exps.weight", Type: gguf.TypeF16,
		Shape: []uint64{256, 256, 128}})
	if _, err := Make("qwen3moe", qwen3moe.info(), odd, gguf.FileTypeQ4_K_M, Overrides{}); err == nil ||
		!strings.Contains(err.Error(), "failed to determine the layer") {
		t.Errorf("expert tensor outside a block: err %v", err)
	}
	dense := ModelInfo{BlockCount: 8, HeadCount: 4, HeadCountKV: 2}
	if _, err := Make("qwen3", dense, odd, gguf.FileTypeQ4_K_M, Overrides{}); err != nil {
		t.Errorf("dense model uses the counter, want no error: %v", err)
	}
}

// TestQwen35SharedCounter checks that qwen35's attn_qkv and attn_v share one counter in layer order and
// that the golden 24-layer Q6_K layer list of reference §3.7 holds with an MTP layer appended (n_layer_all 25).
func TestQwen35SharedCounter(t *testing.T) {
	l := layout{arch: "qwen35", layers: 24, mtp: 1, hidden: 256, ffn: 512, vocab: 512, heads: 4, kv: 1,
		headDim: 128, tied: true, interval: 4, ssmK: 128, ssmGroups: 2, ssmHeads: 4}
	p := mustPlan(t, l, gguf.FileTypeQ4_K_M, Overrides{})
	more := []int{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23, 24}
	check(t, p, func(name string, layer int) gguf.Type {
		switch {
		case kept(name):
			return gguf.TypeF32
		case name == "token_embd.weight":
			return gguf.TypeQ6_K
		case (strings.Contains(name, "attn_v") || strings.Contains(name, "attn_qkv") ||
			strings.Contains(name, "ffn_down")) && inSet(layer, more...):
			return gguf.TypeQ6_K
		}
		return gguf.TypeQ4_K
	})
}

// TestQwen2_70B checks LLM_TYPE_70B (qwen2 with 80 layers, Qwen2.5-72B): Q3_K/Q4_K attn_v become Q5_K.
func TestQwen2_70B(t *testing.T) {
	l := layout{arch: "qwen2", layers: 80, hidden: 256, ffn: 512, vocab: 512, heads: 8, kv: 1, headDim: 32, bias: true}
	for _, c := range []struct {
		arch string
		ft   gguf.FileType
		want func(layer int) gguf.Type
	}{
		{"qwen2", gguf.FileTypeQ4_K_M, func(i int) gguf.Type {
			if useMoreBits(i, 80) {
				return gguf.TypeQ6_K
			}
			return gguf.TypeQ5_K
		}},
		{"qwen2", gguf.FileTypeQ2_K, func(int) gguf.Type { return gguf.TypeQ5_K }},
		{"qwen3", gguf.FileTypeQ2_K, func(int) gguf.Type { return gguf.TypeQ4_K }}, // GQA 8, no 70B type
		{"qwen2", gguf.FileTypeQ5_K_S, func(int) gguf.Type { return gguf.TypeQ5_K }},
	} {
		l.arch = c.arch
		p := mustPlan(t, l, c.ft, Overrides{})
		n := 0
		for _, e := range p.Entries {
			if layer, _, _ := blockNumber(e.Name); strings.HasSuffix(e.Name, "attn_v.weight") {
				n++
				if e.To != c.want(layer) {
					t.Errorf("%s %s %s: %s, want %s", c.arch, c.ft, e.Name, e.To, c.want(layer))
				}
			}
		}
		if n != 80 {
			t.Fatalf("%d attn_v tensors", n)
		}
	}
}

func typ(t gguf.Type) *gguf.Type { return &t }

func rules(t *testing.T, args ...string) []TensorTypeRule {
	t.Helper()
	var out []TensorTypeRule
	for _, a := range args {
		r, err := ParseTensorTypeRule(a)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestRequantize(t *testing.T) {
	l := qwen3small
	ts := l.tensors()
	for i := range ts {
		if ts[i].Type == gguf.TypeF16 {
			ts[i].Type = gguf.TypeQ8_0
		}
	}
	_, err := Make(l.arch, l.info(), ts, gguf.FileTypeQ4_K_M, Overrides{})
	var re *RequantizeError
	if !errors.As(err, &re) || re.From != gguf.TypeQ8_0 || !strings.Contains(err.Error(), "--allow-requantize") {
		t.Fatalf("Q8_0 input: err %v, want *RequantizeError", err)
	}
	p, err := Make(l.arch, l.info(), ts, gguf.FileTypeQ4_K_M, Overrides{AllowRequantize: true})
	if err != nil || !p.Requantize {
		t.Fatalf("allowed: requantize %v, %v", p.Requantize, err)
	}
	// Same type out as in is a copy, not a re-quantization.
	if p, err := Make(l.arch, l.info(), ts, gguf.FileTypeQ8_0, Overrides{}); err != nil || p.Requantize || p.Converted != 0 {
		t.Errorf("Q8_0 -> Q8_0: converted %d, requantize %v, %v", p.Converted, p.Requantize, err)
	}
	// Input types the kernels cannot read are refused even when allowed.
	ts[3].Type = gguf.TypeMXFP4
	var ue *UnsupportedError
	if _, err := Make(l.arch, l.info(), ts, gguf.FileTypeQ4_K_M, Overrides{AllowRequantize: true}); !errors.As(err, &ue) {
		t.Errorf("MXFP4 input: %v, want *UnsupportedError", err)
	}
}

// TestFloatFileTypes checks the trivial plans: every quantizable tensor gets the float type, others are copied.
func TestFloatFileTypes(t *testing.T) {
	for _, c := range []struct {
		ft   gguf.FileType
		want gguf.Type
		kv   uint32
	}{{gguf.FileTypeF16, gguf.TypeF16, 1}, {gguf.FileTypeBF16, gguf.TypeBF16, 32}, {gguf.FileTypeAllF32, gguf.TypeF32, 0}} {
		p := mustPlan(t, qwen35moe, c.ft, Overrides{})
		check(t, p, func(name string, _ int) gguf.Type {
			if kept(name) {
				return gguf.TypeF32
			}
			return c.want
		})
		if kv := p.MetadataKVs(); kv[0] != (KV{"general.quantization_version", 2}) || kv[1] != (KV{"general.file_type", c.kv}) {
			t.Errorf("%s: metadata %v", c.ft, kv)
		}
		if p.NFallback != 0 || p.BitsPerWeight() <= 0 {
			t.Errorf("%s: n_fallback %d, bpw %v", c.ft, p.NFallback, p.BitsPerWeight())
		}
	}
}

func TestOrderAndInputChecks(t *testing.T) {
	f16 := func(name string, shape ...uint64) TensorDesc {
		return TensorDesc{Name: name, Type: gguf.TypeF16, Shape: shape}
	}
	info := ModelInfo{BlockCount: 12, HeadCount: 2, HeadCountKV: 2}
	in := []TensorDesc{f16("blk.10.ffn_up.weight", 32, 4), f16("blk.9.ffn_up.weight", 32, 4),
		f16("token_embd.weight", 32, 4), f16("blk.2.attn_q.weight", 32, 4), f16("blk.2.attn_k.weight", 32, 4),
		f16("output_norm.weight", 32), f16("blk.x.weight", 32, 4), f16("abcde", 32, 4), f16("blk.1.flat.weight", 32, 1)}
	p, err := Make("qwen3", info, in, gguf.FileTypeQ8_0, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range p.Entries {
		order = append(order, e.Name)
	}
	want := []string{"abcde", "blk.x.weight", "output_norm.weight", "token_embd.weight", "blk.1.flat.weight",
		"blk.2.attn_k.weight", "blk.2.attn_q.weight", "blk.9.ffn_up.weight", "blk.10.ffn_up.weight"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("order %v\nwant  %v", order, want)
	}
	m := byName(p)
	// A 5-byte name passes upstream's "ends in weight" test (rfind == size-6 wraps to npos); [32,1] is 1-D.
	if m["abcde"].To != gguf.TypeQ8_0 || m["blk.1.flat.weight"].To != gguf.TypeF16 {
		t.Errorf("abcde %s, blk.1.flat %s; want Q8_0, F16", m["abcde"].To, m["blk.1.flat.weight"].To)
	}

	for _, c := range []struct {
		name string
		ts   []TensorDesc
		want string
	}{
		{"duplicate", []TensorDesc{f16("a.weight", 32, 2), f16("a.weight", 32, 2)}, "appears twice"},
		{"5-D", []TensorDesc{f16("a.weight", 32, 2, 1, 1, 1)}, "5 dimensions"},
		{"empty dim", []TensorDesc{f16("a.weight", 32, 0)}, "empty dimension"},
		{"overflow", []TensorDesc{f16("a.weight", 1<<32, 1<<32)}, "overflows"},
		{"unknown type", []TensorDesc{{Name: "a.weight", Type: 99, Shape: []uint64{32, 2}}}, "type(99)"},
		{"partial block", []TensorDesc{{Name: "a.weight", Type: gguf.TypeQ4_K, Shape: []uint64{32, 2}}}, "block size"},
		{"huge block number", []TensorDesc{f16("blk.99999999999.a.weight", 32, 2)}, "block number out of range"},
	} {
		if _, err := Make("qwen3", info, c.ts, gguf.FileTypeQ8_0, Overrides{}); err == nil ||
			!strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
	var ue *UnsupportedError
	if _, err := Make("llama", info, nil, gguf.FileTypeQ8_0, Overrides{}); !errors.As(err, &ue) ||
		!strings.Contains(err.Error(), "qwen35moe") {
		t.Errorf("llama: %v", err)
	}
	if _, err := Make("qwen3", info, nil, gguf.FileType(38), Overrides{}); !errors.As(err, &ue) {
		t.Errorf("MXFP4_MOE file type: %v", err)
	}
	if _, err := Make("qwen3", ModelInfo{BlockCount: 513}, nil, gguf.FileTypeQ8_0, Overrides{}); err == nil {
		t.Error("block_count 513 accepted")
	}

	for _, c := range []struct {
		in    string
		n     int
		found bool
	}{{"blk.5", 5, true}, {"blk.12.attn", 12, true}, {"blk. 7.x", 7, true}, {"blk.+3.x", 3, true},
		{"blk.-2.x", -2, true}, {"blk.x", 0, false}, {"blk.", 0, false}, {"output.weight", 0, false}} {
		n, found, err := blockNumber(c.in)
		if n != c.n || found != c.found || err != nil {
			t.Errorf("blockNumber(%q) = %d, %v, %v", c.in, n, found, err)
		}
	}
}

func TestModelInfoFromMetadata(t *testing.T) {
	m, err := ModelInfoFromMetadata("qwen35moe", map[string]any{"qwen35moe.block_count": uint32(41),
		"qwen35moe.attention.head_count": int32(16), "qwen35moe.attention.head_count_kv": []any{uint32(2), uint32(2)},
		"qwen35moe.expert_count": uint64(256)})
	if err != nil || m != (ModelInfo{BlockCount: 41, HeadCount: 16, HeadCountKV: 2, ExpertCount: 256}) {
		t.Errorf("got %+v, %v", m, err)
	}
	m, err = ModelInfoFromMetadata("qwen3", map[string]any{"qwen3.block_count": 28.0, "qwen3.attention.head_count": 8})
	if err != nil || m != (ModelInfo{BlockCount: 28, HeadCount: 8, HeadCountKV: 8}) {
		t.Errorf("kv defaults to heads: %+v, %v", m, err)
	}
	for _, kv := range []map[string]any{{}, {"qwen3.block_count": "28"}, {"qwen3.block_count": 2.5},
		{"qwen3.block_count": -1}, {"qwen3.block_count": 28, "qwen3.expert_count": []uint32{}}} {
		if _, err := ModelInfoFromMetadata("qwen3", kv); err == nil {
			t.Errorf("%v accepted", kv)
		}
	}
}

// TestPlanGoldens compares whole plans (types, sizes, fallbacks, notes, totals) with testdata/plans; rewrite
// them with -update after a deliberate change.
func TestPlanGoldens(t *testing.T) {
	for _, c := range []struct {
		file string
		l    layout
		ft   gguf.FileType
		ov   Overrides
	}{
		{"qwen2.5-0.5b-Q4_K_M.txt", qwen25half, gguf.FileTypeQ4_K_M, Overrides{}},
		{"qwen2.5-0.5b-IQ4_XS.txt", qwen25half, gguf.FileTypeIQ4_XS, Overrides{}},
		{"qwen3moe-8L-Q3_K_M.txt", qwen3moe, gguf.FileTypeQ3_K_M, Overrides{}},
		{"qwen35moe-8L-mtp-Q4_K_M.txt", qwen35moe, gguf.FileTypeQ4_K_M, Overrides{}},
		{"qwen35moe-8L-mtp-Q5_K_S-overrides.txt", qwen35moe, gguf.FileTypeQ5_K_S,
			Overrides{TokenEmbdType: typ(gguf.TypeQ8_0), TensorTypes: rules(t, "_exps=q4_k", "attn_qkv=q6_k")}},
	} {
		got := mustPlan(t, c.l, c.ft, c.ov).Text()
		golden.Check(t, filepath.Join("testdata", "plans", c.file), []byte(got))
	}
}

// FuzzMakePlan feeds hostile names, shapes and types: Make must not panic, and every plan it returns must
// size its tensors consistently.
func FuzzMakePlan(f *testing.F) {
	f.Add("blk.0.attn_v.weight", uint64(896), uint64(128), uint64(1), uint8(1), uint8(15), true)
	f.Add("blk.3.ffn_down_exps.weight", uint64(512), uint64(256), uint64(8), uint8(1), uint8(12), false)
	f.Add("token_embd.weight", uint64(100), uint64(7), uint64(1), uint8(0), uint8(2), true)
	f.Add("blk.2.ffn_down.weight", uint64(768), uint64(64), uint64(1), uint8(1), uint8(19), true) // IQ2_XXS
	f.Add("blk.1.attn_q.weight", uint64(256), uint64(64), uint64(1), uint8(1), uint8(23), false)  // IQ3_XXS
	f.Fuzz(func(t *testing.T, name string, d0, d1, d2 uint64, typ, ft uint8, experts bool) {
		info := ModelInfo{BlockCount: 4, HeadCount: 8, HeadCountKV: 2}
		if experts {
			info.ExpertCount = 8
		}
		ts := []TensorDesc{{Name: name, Type: gguf.Type(typ % 40), Shape: []uint64{d0, d1, d2}},
			{Name: "blk.1.attn_v.weight", Type: gguf.TypeF16, Shape: []uint64{256, 64}}}
		p, err := Make("qwen3moe", info, ts, gguf.FileType(ft%38), Overrides{HasImatrix: experts})
		if err != nil {
			return
		}
		for _, e := range p.Entries {
			rows := int64(1)
			for _, d := range e.Shape[1:] {
				rows *= int64(d)
			}
			rb, err := e.To.RowBytes(int64(e.Shape[0]))
			if err != nil || e.Bytes != rb*rows {
				t.Fatalf("%s: %s %v: %d bytes (%v)", e.Name, e.To, e.Shape, e.Bytes, err)
			}
		}
	})
}
