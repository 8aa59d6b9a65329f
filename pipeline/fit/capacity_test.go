package fit

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// toyShape is a one-layer qwen3 model of 1,000 wide with 10 heads of 100 (all KV heads) and a 2,000-wide FFN:
// W = 4·1000·1000 (q, k, v, o) + 3·1000·2000 (gate, up, down) = 10,000,000 weights a token goes through,
// d = 10 heads × 100 = 1,000.
func toyShape() Shape {
	t := func(name string, shape ...uint64) plan.TensorDesc {
		return plan.TensorDesc{Name: name, Type: gguf.TypeF16, Shape: shape}
	}
	return Shape{Name: "toy", Arch: "qwen3", KV: map[string]any{
		"general.architecture": "qwen3", "qwen3.block_count": uint32(1), "qwen3.embedding_length": uint32(1000),
		"qwen3.attention.head_count": uint32(10), "qwen3.attention.head_count_kv": uint32(10),
		"qwen3.attention.key_length": uint32(100), "qwen3.attention.value_length": uint32(100),
		"qwen3.feed_forward_length": uint32(2000), "qwen3.context_length": uint32(8192),
	}, Tensors: []plan.TensorDesc{
		t("token_embd.weight", 1000, 500), t("output_norm.weight", 1000),
		t("blk.0.attn_norm.weight", 1000), t("blk.0.attn_q.weight", 1000, 1000), t("blk.0.attn_k.weight", 1000, 1000),
		t("blk.0.attn_v.weight", 1000, 1000), t("blk.0.attn_output.weight", 1000, 1000),
		t("blk.0.ffn_gate.weight", 1000, 2000), t("blk.0.ffn_up.weight", 1000, 2000), t("blk.0.ffn_down.weight", 2000, 1000),
	}}
}

func TestWorkOf(t *testing.T) {
	w, err := workOf(toyShape())
	if err != nil {
		t.Fatal(err)
	}
	if w.weights != 1e7 || w.attnDim != 1000 {
		t.Fatalf("%+v, want W 1e7 and d 1000", w)
	}
	// 1,000 tokens from position 0: 2·1e7·1000 + 2·1000·999·1000 = 2e10 + 1.998e9.
	if f := w.flops(0, 1000); !near(f, 2.1998e10) {
		t.Fatalf("flops(0, 1000) = %v", f)
	}
	// The last 100 of them: 2·1e7·100 + 2·1000·(900+999)·100 = 2e9 + 3.798e8.
	if f := w.flops(900, 1000); !near(f, 2.3798e9) {
		t.Fatalf("flops(900, 1000) = %v", f)
	}
	// Qwen3.5-9B: its full-attention layers (1 in 4) alone carry attention.
	cands, _ := Known()
	for _, c := range cands {
		if c.Name != "Qwen/Qwen3.5-9B" {
			continue
		}
		w, err := workOf(c.Shape)
		if err != nil {
			t.Fatal(err)
		}
		if w.weights < 6.5e9 || w.weights > 7.5e9 || w.attnDim != 8*16*256 {
			t.Errorf("9B: %+v, want ~7 G weights per token and d = 8 layers × 16 heads × 256", w)
		}
	}
}

// TestPlanCapacityHandComputed checks every figure against hand arithmetic. The profile's anchor is the
// Qwen3.5-0.8B model with a prompt time chosen so that the phone's rate is exactly 1e11 FLOP/s; the toy model
// (W = 1e7, d = 1000) reviews 1,000-token prompts of which 900 are shared, 8 tokens out; generation reads 1e9
// bytes of weights plus 1,000 bytes of KV per prompt token (1.001e9 per token) at 30-60 % of 10 GB/s.
//
//	miss prompt:  2.1998e10 / 1e11 = 0.21998 s;  tokens/s 1000 / 0.21998 = 4545.87
//	hit prompt:   2.3798e9  / 1e11 = 0.023798 s
//	decode:       3e9 / 1.001e9 = 2.997003 tok/s .. 6e9 / 1.001e9 = 5.994006; 8 tokens: 2.669333 .. 1.334667 s
//	miss review:  0.21998 + 1.334667 = 1.554647 .. 0.21998 + 2.669333 = 2.889313 s
//	hit review:   0.023798 + 1.334667 = 1.358465 .. 2.693131 s
//	at a 90 % hit rate: 0.9·hit + 0.1·miss = 1.378083 .. 2.712749 s
//	per phone:    3600 / 2.712749 = 1327.07 .. 3600 / 1.378083 = 2612.33 reviews an hour
//	for 5,000 an hour: ceil(5000/2612.33) = 2 .. ceil(5000/1327.07) = 4 phones; at 0.5 a phone-hour 1 .. 2
func TestPlanCapacityHandComputed(t *testing.T) {
	cands, _ := Known()
	var small Shape
	for _, c := range cands {
		if c.Name == "Qwen/Qwen3.5-0.8B" {
			small = c.Shape
		}
	}
	sw, err := workOf(small)
	if err != nil {
		t.Fatal(err)
	}
	p := Profile{Name: "test", RAMGB: 8, UsableBytes: 4e9, BigCores: 4, BandwidthGBps: 10,
		Anchors: []Anchor{{Model: "Qwen/Qwen3.5-0.8B", Quant: "Q4_K_M", PromptTokens: 1000, PromptSeconds: sw.flops(0, 1000) / 1e11, Source: "made up"}}}
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	b := Breakdown{ActiveWeights: 1e9, KVBytesPerCell: 1000}
	c, err := PlanCapacity(toyShape(), b, p, CapacityOptions{PromptTokens: 1000, SharedTokens: 900, HitRate: 0.9,
		ReviewsPerHour: 5000, PricePerHour: 0.5, Currency: "ACU", PriceBasis: "test"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got Range, lo, hi float64) {
		t.Helper()
		if math.Abs(got.Lo-lo) > 1e-6*lo || math.Abs(got.Hi-hi) > 1e-6*hi {
			t.Errorf("%s = %v, want %v–%v", what, got, lo, hi)
		}
	}
	check("FLOPS", c.FLOPS, 1e11, 1e11)
	check("prompt tokens/s", c.PromptTokensPerSec, 1000/0.21998, 1000/0.21998)
	check("decode tokens/s", c.DecodeTokensPerSec, 3e9/1.001e9, 6e9/1.001e9)
	check("miss", c.MissSeconds, 0.21998+8/(6e9/1.001e9), 0.21998+8/(3e9/1.001e9))
	check("hit", c.HitSeconds, 0.023798+8/(6e9/1.001e9), 0.023798+8/(3e9/1.001e9))
	check("review", c.ReviewSeconds, 1.3780830, 2.7127490)
	check("per phone", c.PhoneReviewsPerHour, 3600/2.7127490, 3600/1.3780830)
	if c.Replicas.Lo != 2 || c.Replicas.Hi != 4 {
		t.Errorf("replicas %d–%d, want 2–4", c.Replicas.Lo, c.Replicas.Hi)
	}
	check("cost", c.CostPerHour, 1, 2)
	if len(c.Basis) < 4 || !strings.Contains(strings.Join(c.Basis, "\n"), "made up") {
		t.Errorf("basis %q", c.Basis)
	}

	// A latency bound of 4 s: the M/D/1 load that keeps the mean within it is 2(4-t)/(8-t):
	// t = 2.712749 → 2·1.287251/5.287251 = 0.486926; t = 1.378083 → 2·2.621917/6.621917 = 0.791889. Per phone
	// 1327.07·0.486926 = 646.19 .. 2612.33·0.791889 = 2068.68; 5,000 an hour take 3 .. 8 phones.
	c, err = PlanCapacity(toyShape(), b, p, CapacityOptions{PromptTokens: 1000, SharedTokens: 900, HitRate: 0.9,
		ReviewsPerHour: 5000, LatencySeconds: 4})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := 2*(4-2.712749)/(8-2.712749), 2*(4-1.378083)/(8-1.378083)
	check("per phone within 4 s", c.PhoneReviewsPerHour, 3600/2.712749*lo, 3600/1.378083*hi)
	if c.Replicas.Lo != 3 || c.Replicas.Hi != 8 || c.CostPerHour != (Range{}) {
		t.Errorf("replicas %d–%d cost %v, want 3–8 and no cost without a price", c.Replicas.Lo, c.Replicas.Hi, c.CostPerHour)
	}
	// A bound shorter than a review cannot be met: a failed check.
	_, err = PlanCapacity(toyShape(), b, p, CapacityOptions{PromptTokens: 1000, ReviewsPerHour: 10, LatencySeconds: 1})
	var ce *CapacityError
	if !errors.As(err, &ce) || !pipeline.IsCheckFailed(err) {
		t.Errorf("latency below a review: %v", err)
	}
	// Bad options: one-line errors.
	for _, o := range []CapacityOptions{{PromptTokens: 0}, {PromptTokens: 100, SharedTokens: 100}, {PromptTokens: 100, HitRate: 1.5},
		{PromptTokens: 100, ReviewsPerHour: -1}} {
		if _, err := PlanCapacity(toyShape(), b, p, o); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestPlanCapacityAnchors: on the 16 GB profile the plan reproduces its own anchors (a 7,000-token prompt of
// Qwen3.5-9B in 3 min 15 s, of 4B in 1 min 37 s) within the anchors' spread; a tier without anchors is scaled
// from them by its big cores; issue 17's case — 500 reviews an hour of 7,000 tokens with 6,300 shared — needs a
// few phones, priced.
func TestPlanCapacityAnchors(t *testing.T) {
	p16, p8 := profile(t, "16gb"), profile(t, "8gb")
	cands, _ := Known()
	for _, c := range cands {
		want := map[string]float64{"Qwen/Qwen3.5-9B": 195, "Qwen/Qwen3.5-4B": 97}[c.Name]
		if want == 0 {
			continue
		}
		q, _, err := c.Shape.Quantize(gguf.FileTypeQ4_K_M)
		if err != nil {
			t.Fatal(err)
		}
		b := estimate(t, q, Options{Ctx: 8192})
		plan, err := PlanCapacity(q, b, p16, CapacityOptions{PromptTokens: 7000, GenerateTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		prompt := Range{7000 / plan.PromptTokensPerSec.Hi, 7000 / plan.PromptTokensPerSec.Lo}
		if want < prompt.Lo*0.999 || want > prompt.Hi*1.001 {
			t.Errorf("%s: a 7,000-token prompt in %v s, the anchor says %v", c.Name, prompt, want)
		}
		if c.Name != "Qwen/Qwen3.5-9B" {
			continue
		}
		issue, err := PlanCapacity(q, b, p16, CapacityOptions{PromptTokens: 7000, SharedTokens: 6300, ReviewsPerHour: 500,
			PricePerHour: 0.8 / 24, Currency: "ACU", PriceBasis: "Acurast default"})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("9B on 16gb, 500 reviews/hour of 7,000 tokens (6,300 shared): hit %v s, miss %v s, %v reviews/phone-hour, %d–%d phones, %v ACU/hour",
			issue.HitSeconds, issue.MissSeconds, issue.PhoneReviewsPerHour, issue.Replicas.Lo, issue.Replicas.Hi, issue.CostPerHour)
		if issue.Replicas.Lo < 2 || issue.Replicas.Hi > 6 || issue.Replicas.Lo > issue.Replicas.Hi || issue.HitSeconds.Hi >= issue.MissSeconds.Lo/4 {
			t.Errorf("issue case: %+v", issue)
		}
		scaled, err := PlanCapacity(q, b, p8, CapacityOptions{PromptTokens: 7000})
		if err != nil {
			t.Fatal(err)
		}
		// 8gb has 4 big cores to 16gb's 8: half the rate at best, 0.3× at worst.
		if !near(scaled.FLOPS.Hi, plan.FLOPS.Hi*0.5) || !near(scaled.FLOPS.Lo, plan.FLOPS.Lo*0.5*0.6) ||
			!strings.Contains(strings.Join(scaled.Basis, " "), "has no anchors") {
			t.Errorf("8gb scaled from 16gb: %v vs %v; basis %q", scaled.FLOPS, plan.FLOPS, scaled.Basis)
		}
	}
}

// TestUnknownProfileIsInputError: a phone profile nobody defined is bad input wherever it is named (fit, ship,
// capacity planning), one line listing the known ones.
func TestUnknownProfileIsInputError(t *testing.T) {
	_, err := RunCapacity(Options{Config: "unused.json", Phone: "17gb"}, CapacityOptions{PromptTokens: 100})
	var ue *UnknownProfileError
	if !errors.As(err, &ue) || !pipeline.IsInputError(err) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "16gb") {
		t.Fatalf("%v", err)
	}
}
