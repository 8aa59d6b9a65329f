package imatrix

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/reference"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/runtime/goengine"
)

// refStats accumulates, from the reference forward pass, what an importance matrix should hold: per GGUF
// weight name and matrix, the sums of squared inputs (float64) and the token counts.
type refStats struct {
	sums   map[string][][]float64
	counts map[string][]int64
}

// hfToGGUF maps a Hugging Face weight name of the Qwen family to the GGUF weight and the matrix (expert) it
// is, following convert_hf_to_gguf's names (written out here, independently of package convert).
var (
	hfLayer  = regexp.MustCompile(`^model\.(?:language_model\.)?layers\.(\d+)\.(.+)\.weight$`)
	hfExpert = regexp.MustCompile(`^mlp\.experts\.(\d+)\.(gate|up|down)_proj$`)
	hfNames  = map[string]string{
		"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
		"self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
		"mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp",
		"linear_attn.in_proj_qkv": "attn_qkv", "linear_attn.in_proj_z": "attn_gate",
		"linear_attn.in_proj_b": "ssm_beta", "linear_attn.in_proj_a": "ssm_alpha",
		"linear_attn.out_proj":        "ssm_out",
		"mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
		"mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
	}
)

func hfToGGUF(t *testing.T, hf string) (name string, expert int) {
	if hf == "lm_head.weight" {
		return "output.weight", 0
	}
	m := hfLayer.FindStringSubmatch(hf)
	if m == nil {
		t.Fatalf("unexpected reference weight %q", hf)
	}
	if e := hfExpert.FindStringSubmatch(m[2]); e != nil {
		ex, _ := strconv.Atoi(e[1])
		return fmt.Sprintf("blk.%s.ffn_%s_exps.weight", m[1], e[2]), ex
	}
	g, ok := hfNames[m[2]]
	if !ok {
		t.Fatalf("unexpected reference weight %q", hf)
	}
	return fmt.Sprintf("blk.%s.%s.weight", m[1], g), 0
}

// referenceStats runs the reference model over tokens and accumulates the importance statistics.
// vReorder maps the reference's ssm_out input columns to the GGUF's (Qwen3.5 stores the V heads of the linear
// attention in a different order: GGUF column j is HF column (k·r + v)·hd + w for j = (v·kh + k)·hd + w).
func referenceStats(t *testing.T, dir string, tokens []int32, kh, r, hd int) refStats {
	m, err := reference.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := refStats{sums: map[string][][]float64{}, counts: map[string][]int64{}}
	m.ObserveLinears(func(hf string, x []float32) {
		name, ex := hfToGGUF(t, hf)
		if strings.HasSuffix(name, ".ssm_out.weight") && kh > 0 {
			g := make([]float32, len(x))
			for j := range g {
				b, w := j/hd, j%hd
				v, k := b/kh, b%kh
				g[j] = x[(k*r+v)*hd+w]
			}
			x = g
		}
		for len(st.sums[name]) <= ex {
			st.sums[name] = append(st.sums[name], make([]float64, len(x)))
			st.counts[name] = append(st.counts[name], 0)
		}
		s := st.sums[name][ex]
		for j, v := range x {
			s[j] += float64(v) * float64(v)
		}
		st.counts[name][ex]++
	})
	ids := make([]int, len(tokens))
	for i, id := range tokens {
		ids[i] = int(id)
	}
	m.Forward(ids)
	return st
}

// TestStatisticsMatchReference is the acceptance check of the collection: for tiny qwen3, qwen3moe, qwen35 and qwen35moe
// models, the sums of squares the engine hook collects for every weight equal those of the independent f32
// reference forward pass within 1e-4 relative, and the token counts are exact (per expert for qwen3moe).
func TestStatisticsMatchReference(t *testing.T) {
	if testing.Short() {
		t.Skip("converts and runs tiny models")
	}
	for _, preset := range []string{"qwen3", "qwen3moe", "qwen35", "qwen35moe"} {
		t.Run(preset, func(t *testing.T) {
			spec, _ := tinymodel.Preset(preset)
			spec.MTPLayers, spec.Vision = 0, false
			dir := t.TempDir()
			ckpt := filepath.Join(dir, "hf")
			if err := tinymodel.Generate(ckpt, spec); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "f32.gguf")
			if _, err := convert.Run(context.Background(), convert.Options{Model: ckpt, Out: path, OutType: convert.OutF32}, pipeline.Discard); err != nil {
				t.Fatal(err)
			}
			e, err := goengine.Load(context.Background(), goengine.Options{Path: path, Threads: 1, ContextLength: 256, BatchSize: 64, KVCacheType: "f32"})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			toks, err := e.Tokenize(context.Background(), "The bank flagged the payment because the account is new, the amount is large "+
				"and the beneficiary changed twice in one week. Risk level: high. 12, 345 and 6789 appear in invoices.", true)
			if err != nil {
				t.Fatal(err)
			}
			if len(toks) < 40 {
				t.Fatalf("only %d tokens", len(toks))
			}
			c := NewCollector()
			c.ProcessOutput = true
			err = e.Observe(context.Background(), toks, goengine.ObserveOptions{Want: c.Wants, Batch: 64, // two passes of at least 16 tokens
				Matmul: func(m goengine.Matmul) error { return c.Observe(Matmul(m)) }})
			if err != nil {
				t.Fatal(err)
			}
			kh, r, hd := 0, 0, 0
			if spec.Arch == tinymodel.Qwen35 || spec.Arch == tinymodel.Qwen35MoE {
				kh, r, hd = spec.LinearNumKeyHeads, spec.LinearNumValueHeads/spec.LinearNumKeyHeads, spec.LinearValueHeadDim
			}
			want := referenceStats(t, ckpt, toks, kh, r, hd)
			got := c.Matrix(nil, 0, 0, false)
			compareStats(t, got, want, len(toks))
		})
	}
}

func compareStats(t *testing.T, got *Matrix, want refStats, tokens int) {
	t.Helper()
	var names []string
	for n := range want.sums {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(got.Entries) != len(names) {
		var g []string
		for _, e := range got.Entries {
			g = append(g, e.Name)
		}
		t.Fatalf("collected %d weights %v\nreference %d %v", len(g), g, len(names), names)
	}
	worst, worstName := 0.0, ""
	for _, name := range names {
		e := got.Entry(name)
		if e == nil {
			t.Errorf("%s: not collected", name)
			continue
		}
		ws, wc := want.sums[name], want.counts[name]
		experts := strings.Contains(name, "_exps.")
		if experts {
			for len(ws) < e.Matrices() { // experts no token chose
				ws = append(ws, make([]float64, e.Cols))
				wc = append(wc, 0)
			}
		}
		if e.Matrices() != len(ws) || e.Cols != len(ws[0]) {
			t.Errorf("%s: %d matrices of %d columns, reference %d of %d", name, e.Matrices(), e.Cols, len(ws), len(ws[0]))
			continue
		}
		for mat := range ws {
			if !experts && wc[mat] != int64(tokens) {
				t.Errorf("%s: reference saw %d tokens, not %d", name, wc[mat], tokens)
			}
			if int64(e.Counts[mat]) != wc[mat] {
				t.Errorf("%s matrix %d: count %v, reference %d", name, mat, e.Counts[mat], wc[mat])
			}
			for j, w := range ws[mat] {
				g := float64(e.Sums[mat*e.Cols+j])
				rel := math.Abs(g-w) / math.Max(math.Abs(w), 1e-30)
				if rel > worst {
					worst, worstName = rel, fmt.Sprintf("%s[%d][%d] %g vs %g", name, mat, j, g, w)
				}
				if rel > 1e-4 {
					t.Errorf("%s matrix %d column %d: sum %g, reference %g (%.2g relative)", name, mat, j, g, w, rel)
					break
				}
			}
		}
	}
	t.Logf("%d weights, %d tokens; worst relative difference %.3g (%s)", len(names), tokens, worst, worstName)
}
