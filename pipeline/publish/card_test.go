package publish

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/phonellm/phonellm/internal/testkit/golden"
)

func fullCard() *Card {
	return &Card{
		Name:        "fraud-review-9B",
		Repo:        "acme/fraud-review-9B-GGUF",
		Description: "Fraud review model: reads a case, answers one line `RISK_LEVEL: n`.",
		BaseModel:   "Qwen/Qwen3.5-9B",
		License:     "apache-2.0",
		Tags:        []string{"qwen", "qwen3.5", "gguf"},
		Languages:   []string{"en", "de"},
		Files: []CardFile{
			{Name: GGUFName("fraud-review-9B", "q4_k_m"), Type: "Q4_K_M", Size: 5_700_123_456, BitsPerWeight: 4.89, SHA256: strings.Repeat("ab", 32)},
			{Name: GGUFName("fraud-review-9B", "Q8_0"), Type: "Q8_0", Size: 9_500_000_000, BitsPerWeight: 8.5},
		},
		Provenance: Provenance{
			BaseRevision: strings.Repeat("1", 40), BaseSHA256: strings.Repeat("2", 64),
			Adapter: "./adapter", AdapterSHA256: strings.Repeat("3", 64), PhonellmVersion: "0.1.0",
			Commands: []string{"phonellm merge --lora ./adapter", "phonellm quantize q4_k_m"},
		},
		Fit: []FitRow{
			{Profile: "Acurast 16 GB", File: "fraud-review-9B-Q4_K_M.gguf", Context: 8192, Need: 7_100_000_000, Budget: 11_000_000_000, Fits: true, Headroom: "3.9 GB free"},
			{Profile: "8 GB | budget", File: "fraud-review-9B-Q4_K_M.gguf", Context: 8192, Need: 7_100_000_000, Budget: 5_000_000_000},
		},
		Quality: []QualityRow{{Metric: "perplexity (wikitext-2)", File: "Q4_K_M", Value: "7.91", Note: "+0.12 vs F16"}},
		Quantization: []QuantRow{
			{File: "fraud-review-9B-Q4_K_M.gguf", Imatrix: "fraud-review-9B.imatrix.gguf", ImatrixSHA256: strings.Repeat("cd", 32),
				Dataset: "prompts.jsonl", Chunks: 96},
			{File: "fraud-review-9B-auto.gguf", Imatrix: "fraud-review-9B.imatrix.gguf", Dataset: "prompts.jsonl", Chunks: 96,
				Mix: "size 5000000000", MixRules: 17, PredictedKLD: 0.01234},
			{File: "fraud-review-9B-Q8_0.gguf"},
		},
	}
}

func TestCardGolden(t *testing.T) {
	got, err := fullCard().Render()
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "card.golden.md"), got)
}

func TestCardFrontMatterParses(t *testing.T) {
	got, err := fullCard().Render()
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(string(got), "---\n", 3)
	if len(parts) != 3 || parts[0] != "" {
		t.Fatalf("no front matter:\n%s", got)
	}
	var fm map[string]any
	if err := yaml.Unmarshal([]byte(parts[1]), &fm); err != nil {
		t.Fatal(err)
	}
	if fm["base_model"] != "Qwen/Qwen3.5-9B" || fm["base_model_relation"] != "quantized" || fm["license"] != "apache-2.0" ||
		fm["pipeline_tag"] != "text-generation" || fm["quantized_by"] != "phonellm" {
		t.Fatalf("front matter %v", fm)
	}
	tags, _ := fm["tags"].([]any)
	if len(tags) == 0 || tags[0] != "gguf" {
		t.Fatalf("tags %v", fm["tags"])
	}
	n := 0
	for _, tg := range tags {
		if tg == "gguf" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("duplicate gguf tag: %v", tags)
	}
}

func TestCardValidateAndDefaults(t *testing.T) {
	for _, c := range []*Card{
		{},
		{Name: "x", BaseModelRelation: "copy", BaseModel: "a/b"},
		{Name: "x", BaseModelRelation: "quantized"},
		{Name: "x", License: "other"},
		{Name: "x", Files: []CardFile{{Name: "", Size: 1}}},
	} {
		if _, err := c.Render(); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
	out, err := (&Card{Name: "x", BaseModel: "a/b"}).Render()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("license: other")) || !bytes.Contains(out, []byte("license_link: https://huggingface.co/a/b")) {
		t.Fatalf("unknown license not marked other:\n%s", out)
	}
	if GGUFName("m", "q4_k_m") != "m-Q4_K_M.gguf" {
		t.Fatal(GGUFName("m", "q4_k_m"))
	}
	if humanBytes(999) != "999 B" || humanBytes(5_700_000_000) != "5.70 GB" {
		t.Fatal(humanBytes(5_700_000_000))
	}
}

// TestCardTitleFromStrangerName: a GGUF's general.name becomes the card's title; a name carrying a line break
// and HTML must not add blocks (a heading, a link, a script tag) to the rendered card.
func TestCardTitleFromStrangerName(t *testing.T) {
	c := fullCard()
	c.Name = "evil\n\n## Install\n[click](https://evil.example)<script>alert(1)</script>"
	got, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	s := string(got)
	if strings.Contains(s, "\n## Install") || strings.Contains(s, "<script>") {
		t.Fatalf("the name added Markdown blocks or HTML to the card:\n%s", s)
	}
	if !strings.Contains(s, "# evil  ## Install [click](https://evil.example)&lt;script&gt;alert(1)&lt;/script&gt;\n") {
		t.Fatalf("title not rendered as one line of text:\n%s", s)
	}
}
