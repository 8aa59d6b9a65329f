package engine

import (
	"context"
	"math"
	"strings"
	"testing"
)

func TestGreedyPicksMaxLowestIdOnTie(t *testing.T) {
	s := NewSampler(Greedy())
	if got := mustSample(t, s, []float32{1, 5, 3, 5}, nil); got != 1 {
		t.Fatalf("greedy = %d, want 1", got)
	}
}

func TestRepeatPenaltyChangesGreedyChoice(t *testing.T) {
	p := Greedy()
	p.RepeatPenalty = 2
	s := NewSampler(p)
	// token 1 (logit 5) was seen: 5/2 = 2.5 < 3, so token 2 wins.
	if got := mustSample(t, s, []float32{1, 5, 3, -1}, []int32{1, 3}); got != 2 {
		t.Fatalf("got %d, want 2", got)
	}
	// Negative logits are multiplied: token 3 becomes -2.
	l := []float32{1, 5, 3, -1}
	NewSampler(p).penalize(l, []int32{3})
	if l[3] != -2 {
		t.Fatalf("penalized negative logit = %v, want -2", l[3])
	}
}

func TestFrequencyPresencePenalty(t *testing.T) {
	p := Greedy()
	p.FrequencyPenalty = 0.5
	p.PresencePenalty = 1
	l := []float32{0, 4, 0}
	NewSampler(p).penalize(l, []int32{1, 1, 1})
	if want := float32(4 - 3*0.5 - 1); l[1] != want {
		t.Fatalf("got %v, want %v", l[1], want)
	}
}

func TestSeededSamplingReproducible(t *testing.T) {
	seed := uint64(42)
	p := SamplingParams{Temperature: 1, Seed: &seed}
	logits := make([]float32, 100)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	draw := func() []int32 {
		s := NewSampler(p)
		var out []int32
		for range 50 {
			out = append(out, mustSample(t, s, append([]float32(nil), logits...), nil))
		}
		return out
	}
	a, b := draw(), draw()
	distinct := map[int32]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs: %d vs %d", i, a[i], b[i])
		}
		distinct[a[i]] = true
	}
	if len(distinct) < 5 {
		t.Fatalf("temperature 1 sampling drew only %d distinct tokens", len(distinct))
	}
}

func TestTopKTopPMinPRestrict(t *testing.T) {
	logits := []float32{0, 10, 9, 8, -5, 7}
	for _, tc := range []struct {
		name    string
		p       SamplingParams
		allowed map[int32]bool
	}{
		{"top_k 2", SamplingParams{Temperature: 5, TopK: 2}, map[int32]bool{1: true, 2: true}},
		// softmax(10,9,8,7,0,-5): p1≈0.64, p1+p2≈0.88 -> top_p 0.8 keeps {1,2}
		{"top_p 0.8", SamplingParams{Temperature: 5, TopP: 0.8}, map[int32]bool{1: true, 2: true}},
		// min_p 0.3: keep logit >= 10+ln(0.3)≈8.8 -> {1,2}
		{"min_p 0.3", SamplingParams{Temperature: 5, MinP: 0.3}, map[int32]bool{1: true, 2: true}},
		{"top_k 1", SamplingParams{Temperature: 5, TopK: 1}, map[int32]bool{1: true}},
	} {
		seen := map[int32]bool{}
		for i := range 400 {
			seed := uint64(i)
			p := tc.p
			p.Seed = &seed
			tok := mustSample(t, NewSampler(p), append([]float32(nil), logits...), nil)
			if !tc.allowed[tok] {
				t.Fatalf("%s: drew %d", tc.name, tok)
			}
			seen[tok] = true
		}
		if len(seen) != len(tc.allowed) {
			t.Fatalf("%s: drew %v, want all of %v", tc.name, seen, tc.allowed)
		}
	}
}

func TestValidateSampling(t *testing.T) {
	if err := DefaultSampling().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []SamplingParams{{Temperature: -1}, {TopP: 1.5}, {TopK: -1}, {MinP: 2}, {Temperature: float32(math.NaN())}} {
		if p.Validate() == nil {
			t.Fatalf("%+v accepted", p)
		}
	}
}

func TestTextStreamStopAcrossPieces(t *testing.T) {
	s := NewTextStream([]string{"END", ""})
	var got strings.Builder
	for _, p := range []string{"hel", "lo E", "N", "Dtail"} {
		v, stop := s.Push(p)
		got.WriteString(v)
		if stop {
			break
		}
	}
	if got.String() != "hello " || s.Text() != "hello " {
		t.Fatalf("got %q / %q", got.String(), s.Text())
	}
	if v, stop := s.Push("more"); v != "" || !stop {
		t.Fatalf("push after stop = %q %v", v, stop)
	}
}

func TestTextStreamHoldsPartialStopAndUTF8(t *testing.T) {
	s := NewTextStream([]string{"<stop>"})
	if v, _ := s.Push("ab<st"); v != "ab" {
		t.Fatalf("visible %q, want ab", v)
	}
	if v, _ := s.Push("x"); v != "<stx" {
		t.Fatalf("visible %q, want <stx", v)
	}
	euro := "€" // 3 bytes
	if v, _ := s.Push(euro[:2]); v != "" {
		t.Fatalf("incomplete rune released: %q", v)
	}
	if v, _ := s.Push(euro[2:]); v != euro {
		t.Fatalf("got %q", v)
	}
	s.Push("<s")
	if v := s.Flush(); v != "<s" {
		t.Fatalf("flush %q", v)
	}
}

func FuzzTextStream(f *testing.F) {
	f.Add("hello world END rest", "END", 3)
	f.Add("a€b\n\nUser:", "\n\nUser:", 1)
	f.Fuzz(func(t *testing.T, text, stop string, step int) {
		if step <= 0 || step > 16 {
			step = 1
		}
		want := text
		stopped := false
		if stop != "" {
			if i := strings.Index(text, stop); i >= 0 {
				want = text[:i]
				stopped = true
			}
		}
		s := NewTextStream([]string{stop})
		var got strings.Builder
		done := false
		for i := 0; i < len(text) && !done; i += step {
			v, st := s.Push(text[i:min(i+step, len(text))])
			got.WriteString(v)
			done = st
		}
		if !done {
			got.WriteString(s.Flush())
		}
		if got.String() != want || done != stopped {
			t.Fatalf("text %q stop %q step %d: got %q (stopped %v), want %q (%v)", text, stop, step, got.String(), done, want, stopped)
		}
	})
}

// A Qwen3-style template: system handling, namespace, enable_thinking.
const qwenLikeTemplate = `{%- set ns = namespace(sys=false) -%}
{%- for message in messages -%}
{%- if message.role == 'system' -%}{%- set ns.sys = true -%}{%- endif -%}
<|im_start|>{{ message.role }}
{{ message.content | trim }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif -%}
{%- endif -%}`

func TestChatTemplate(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: " Hi "}}
	ct, err := NewChatTemplate("", "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ct.Render(context.Background(), msgs, TemplateOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("chatml:\n%q\nwant\n%q", got, want)
	}
	q, err := NewChatTemplate(qwenLikeTemplate, "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	off := false
	got, err = q.Render(context.Background(), msgs, TemplateOptions{AddGenerationPrompt: true, EnableThinking: &off})
	if err != nil {
		t.Fatal(err)
	}
	want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if got != want {
		t.Fatalf("qwen-like:\n%q\nwant\n%q", got, want)
	}
	if _, err := NewChatTemplate("{% for x in %}", "", ""); err == nil {
		t.Fatal("broken template compiled")
	}
	if _, err := q.Render(context.Background(), nil, TemplateOptions{}); err == nil {
		t.Fatal("rendered no messages")
	}
}

func TestTimingsRates(t *testing.T) {
	tm := Timings{PromptTokens: 110, CachedTokens: 10, PromptDuration: 1e9, GeneratedTokens: 11, GenerateDuration: 2e9}
	if tm.PromptPerSecond() != 100 || tm.GeneratePerSecond() != 5 {
		t.Fatalf("rates %v %v", tm.PromptPerSecond(), tm.GeneratePerSecond())
	}
}
