package merge

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline"
)

func TestPatternOrder(t *testing.T) {
	// PEFT takes the first key in the dict's order; both keys match q_proj of layer 1.
	c, err := ParseConfig("x", []byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":["q_proj"],
		"rank_pattern":{"layers\\.1\\.self_attn\\.q_proj":4,"q_proj":2},
		"alpha_pattern":{"q_proj":3,"layers.1.self_attn.q_proj":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		module string
		r      int
		alpha  float64
	}{
		{"model.layers.1.self_attn.q_proj", 4, 3},
		{"model.layers.0.self_attn.q_proj", 2, 3},
		{"model.layers.0.self_attn.k_proj", 8, 16},
		{"model.layers.0.self_attn.xq_proj", 8, 16}, // a key matches whole dotted components only
	}
	for _, k := range cases {
		r, _ := c.RankFor(k.module)
		a, _ := c.AlphaFor(k.module)
		if r != k.r || a != k.alpha {
			t.Errorf("%s: r=%d alpha=%v, want %d %v", k.module, r, a, k.r, k.alpha)
		}
	}
	if s := c.Scaling(4, 3); s != 0.75 {
		t.Errorf("scaling %v", s)
	}
	c.RSLoRA = true
	if s := c.Scaling(4, 3); s != 1.5 {
		t.Errorf("rslora scaling %v", s)
	}
}

func TestTargets(t *testing.T) {
	cases := []struct {
		cfg  string
		mod  string
		want bool
	}{
		{`{"target_modules":["q_proj"]}`, "model.layers.0.self_attn.q_proj", true},
		{`{"target_modules":["q_proj"]}`, "model.layers.0.self_attn.xq_proj", false},
		{`{"target_modules":"all-linear"}`, "model.layers.0.mlp.up_proj", true},
		{`{"target_modules":"all-linear"}`, "lm_head", false},
		{`{"target_modules":".*layers\\.[01]\\..*(q|v)_proj"}`, "model.layers.1.self_attn.v_proj", true},
		{`{"target_modules":".*layers\\.[01]\\..*(q|v)_proj"}`, "model.layers.2.self_attn.v_proj", false},
		{`{"target_modules":["q_proj"],"layers_to_transform":[1,3]}`, "model.layers.3.self_attn.q_proj", true},
		{`{"target_modules":["q_proj"],"layers_to_transform":1}`, "model.layers.2.self_attn.q_proj", false},
		{`{"target_modules":["down_proj"],"layers_to_transform":[5]}`, "model.layers.1.mlp.experts.5.down_proj", true}, // PEFT's greedy default index regex
		{`{"target_modules":["down_proj"],"layers_to_transform":[1],"layers_pattern":"layers"}`, "model.layers.1.mlp.experts.5.down_proj", true},
		{`{"target_modules":["q_proj"],"exclude_modules":["layers.0.self_attn.q_proj"]}`, "model.layers.0.self_attn.q_proj", false},
	}
	for _, k := range cases {
		c, err := ParseConfig("x", []byte(k.cfg))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Targets(k.mod); got != k.want {
			t.Errorf("%s / %s: %v, want %v", k.cfg, k.mod, got, k.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg  string
		unsu bool
	}{
		{`[]`, false},
		{`{"r":0}`, false},
		{`{"r":2.5}`, false},
		{`{"lora_alpha":"x"}`, false},
		{`{"target_modules":3}`, false},
		{`{"rank_pattern":{"q":1,"q":2}}`, false},
		{`{"rank_pattern":{"q":1.5}}`, false},
		{`{"bias":"some"}`, false},
		{`{"peft_type":"IA3"}`, true},
		{`{"use_qalora":true}`, true},
		{`{"layer_replication":[[0,2]]}`, true},
		{`{"trainable_token_indices":[1,2]}`, true},
		{`{"target_modules":"(?<=x)q"}`, true},
	}
	for _, k := range cases {
		_, err := ParseConfig("x", []byte(k.cfg))
		var ue *UnsupportedError
		var fe *FormatError
		switch {
		case err == nil:
			t.Errorf("%s: accepted", k.cfg)
		case k.unsu && !errors.As(err, &ue):
			t.Errorf("%s: %v, want UnsupportedError", k.cfg, err)
		case !k.unsu && !errors.As(err, &fe):
			t.Errorf("%s: %v, want FormatError", k.cfg, err)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":["q_proj"],"rank_pattern":{"q":4},"alpha_pattern":{"k":2}}`))
	f.Add([]byte(`{"target_modules":"all-linear","layers_to_transform":3,"layers_pattern":["layers"],"exclude_modules":"x"}`))
	f.Add([]byte(`{"rank_pattern":{"(":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("fuzz", data)
		if err != nil {
			return
		}
		mod := "model.layers.1.self_attn.q_proj"
		r, _ := c.RankFor(mod)
		if r < 1 {
			t.Fatalf("rank %d accepted", r)
		}
		c.AlphaFor(mod)
		c.Targets(mod)
	})
}

// TestRound checks the float64 → dtype rounding against math/big on values chosen to sit near ties.
func TestRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []pipeline.DType{pipeline.F32, pipeline.BF16, pipeline.F16} {
		for i := 0; i < 200000; i++ {
			var x float64
			switch i % 3 {
			case 0:
				x = rng.NormFloat64() * math.Exp2(float64(rng.IntN(20)-10))
			case 1: // a representable value of the target plus half an ulp, nudged
				f := roundTo(string(dt), rng.NormFloat64())
				ulp := float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
				if dt == pipeline.BF16 {
					ulp = float64(half.BF16ToF32(half.F32ToBF16(f)+1) - f)
				} else if dt == pipeline.F16 {
					ulp = float64(half.F16ToF32(half.F32ToF16(f)+1) - f)
				}
				x = float64(f) + ulp/2 + float64(rng.IntN(3)-1)*math.Exp2(-40)*math.Abs(float64(f))
			default: // f16 subnormal range
				x = rng.NormFloat64() * 1e-6
			}
			got, ok := round(dt, x)
			want := roundTo(string(dt), x)
			if !ok || math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s: round(%v) = %v (ok %v), want %v", dt, x, got, ok, want)
			}
		}
	}
	if _, ok := round("F16", 70000); ok {
		t.Error("70000 fits in F16")
	}
	if _, ok := round("BF16", math.NaN()); ok {
		t.Error("NaN accepted")
	}
}

func TestBaseNotes(t *testing.T) {
	base := "/cache/models--Qwen--Qwen3.5-9B/snapshots/abc"
	cases := []struct {
		bm    string
		notes int
		want  string
	}{
		{"Qwen/Qwen3.5-9B", 0, ""},
		{"unsloth/Qwen3.5-9B-unsloth-bnb-4bit", 1, "quantized base"},
		{"/home/me/llama-3-8b", 1, "check that it is the same model"},
		{"", 0, ""},
	}
	for _, c := range cases {
		ad := Adapter{Dir: "a", Config: &Config{BaseModel: c.bm}}
		n := baseNotes(base, map[string]any{}, []Adapter{ad})
		if len(n) != c.notes || (c.want != "" && !strings.Contains(n[0], c.want)) {
			t.Errorf("%q: notes %q", c.bm, n)
		}
	}
}
