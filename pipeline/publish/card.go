package publish

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Card is the model card (README.md) content. Front matter keys follow
// hub-docs modelcard.md; file naming and tags follow the GGUF conventions in
// the shared reference hf-hub.md §5.
type Card struct {
	Name              string   // title, e.g. "fraud-review-9B"
	Repo              string   // Hub repo the card is published in, for run snippets (optional)
	Description       string   // free text under the title
	BaseModel         string   // Hub id the weights derive from
	BaseModelRelation string   // adapter | merge | quantized | finetune (default quantized)
	License           string   // Hub license id copied from the base ("other" when unknown)
	LicenseName       string   // with License "other"
	LicenseLink       string   // with License "other"
	PipelineTag       string   // default text-generation
	Tags              []string // added to gguf, llama-cpp, phonellm
	Languages         []string
	Files             []CardFile
	Provenance        Provenance
	Fit               []FitRow
	Quality           []QualityRow
	Quantization      []QuantRow
}

// QuantRow says how one file was quantized: the importance matrix and the automatic mix, when there were any.
type QuantRow struct {
	File          string
	Imatrix       string // the importance matrix file as recorded (quantize.imatrix.file)
	ImatrixSHA256 string
	Dataset       string // its calibration data (quantize.imatrix.dataset)
	Chunks        int    // calibration chunks
	Mix           string // an automatic mix's target, e.g. "size 478000000"
	MixRules      int    // its --tensor-type rules (in the file's phonellm.quantize.tensor_types)
	PredictedKLD  float64
}

// CardFile is one row of the files table.
type CardFile struct {
	Name          string  // e.g. "fraud-review-9B-Q4_K_M.gguf"
	Type          string  // quantization type, e.g. "Q4_K_M"
	Size          int64   // bytes
	BitsPerWeight float64 // average over all weights
	SHA256        string
}

// Provenance says where the weights came from.
type Provenance struct {
	BaseRevision    string   // commit of the base checkpoint
	BaseSHA256      string   // digest over the base checkpoint files
	Adapter         string   // adapter id or path
	AdapterSHA256   string   // digest over the adapter files
	PhonellmVersion string   // phonellm version that produced the files
	Commands        []string // phonellm commands run, in order
}

// FitRow is one phone profile of the fit table.
type FitRow struct {
	Profile  string // e.g. "Acurast 16 GB"
	File     string // which GGUF
	Context  int    // context length checked
	Need     int64  // bytes needed (weights + KV cache + overhead)
	Budget   int64  // bytes available to the model on that phone
	Fits     bool
	Headroom string // free text, e.g. "2.1 GB free"
}

// QualityRow is one quality figure (e.g. perplexity, task accuracy).
type QualityRow struct {
	Metric string
	File   string
	Value  string
	Note   string
}

// GGUFName is the Hub file name for a quantized model: "<name>-<TYPE>.gguf"
// (the Hub parses the quant label from the name: huggingface.js tasks
// gguf.ts parseGGUFQuantLabel).
func GGUFName(name, quant string) string {
	return name + "-" + strings.ToUpper(quant) + ".gguf"
}

var relations = []string{"adapter", "merge", "quantized", "finetune"}

// Validate checks what the Hub would reject or what would mislead users.
func (c *Card) Validate() error {
	if strings.TrimSpace(c.Name) == "" {
		return errors.New("publish: card: Name is empty")
	}
	if c.BaseModelRelation != "" && !slices.Contains(relations, c.BaseModelRelation) {
		return fmt.Errorf("publish: card: base_model_relation %q: want one of %v", c.BaseModelRelation, relations)
	}
	if c.BaseModelRelation != "" && c.BaseModel == "" {
		return errors.New("publish: card: base_model_relation without base_model")
	}
	if c.License == "other" && (c.LicenseName == "" || c.LicenseLink == "") {
		return errors.New("publish: card: license \"other\" needs LicenseName and LicenseLink (hub-docs model-cards.md)")
	}
	for _, f := range c.Files {
		if f.Name == "" || f.Size < 0 || f.BitsPerWeight < 0 {
			return fmt.Errorf("publish: card: bad file row %+v", f)
		}
	}
	return nil
}

type frontMatter struct {
	BaseModel         string   `yaml:"base_model,omitempty"`
	BaseModelRelation string   `yaml:"base_model_relation,omitempty"`
	License           string   `yaml:"license"`
	LicenseName       string   `yaml:"license_name,omitempty"`
	LicenseLink       string   `yaml:"license_link,omitempty"`
	Language          []string `yaml:"language,omitempty,flow"`
	PipelineTag       string   `yaml:"pipeline_tag"`
	QuantizedBy       string   `yaml:"quantized_by"`
	Tags              []string `yaml:"tags,flow"`
}

// Render returns README.md: YAML front matter, then the files table,
// provenance, the fit table and quality figures when present.
func (c *Card) Render() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	fm := frontMatter{
		BaseModel: c.BaseModel, BaseModelRelation: c.BaseModelRelation, License: c.License,
		LicenseName: c.LicenseName, LicenseLink: c.LicenseLink, Language: c.Languages,
		PipelineTag: c.PipelineTag, QuantizedBy: "phonellm",
	}
	if fm.BaseModel != "" && fm.BaseModelRelation == "" {
		fm.BaseModelRelation = "quantized"
	}
	if fm.License == "" {
		fm.License = "other"
		if fm.LicenseName == "" {
			fm.LicenseName = "see-base-model"
		}
		if fm.LicenseLink == "" && c.BaseModel != "" {
			fm.LicenseLink = "https://huggingface.co/" + c.BaseModel
		}
	}
	if fm.PipelineTag == "" {
		fm.PipelineTag = "text-generation"
	}
	fm.Tags = []string{"gguf", "llama-cpp", "phonellm"}
	for _, t := range c.Tags {
		if t != "" && !slices.Contains(fm.Tags, t) {
			fm.Tags = append(fm.Tags, t)
		}
	}
	var b bytes.Buffer
	b.WriteString("---\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(fm); err != nil {
		return nil, fmt.Errorf("publish: card front matter: %w", err)
	}
	enc.Close()
	b.WriteString("---\n\n")
	fmt.Fprintf(&b, "# %s\n\n", inline(c.Name))
	if c.Description != "" {
		b.WriteString(strings.TrimSpace(c.Description) + "\n\n")
	}
	if c.BaseModel != "" {
		fmt.Fprintf(&b, "GGUF build of [%s](https://huggingface.co/%s), made with phonellm for llama.cpp on phones.\n\n", c.BaseModel, c.BaseModel)
	}
	if len(c.Files) > 0 {
		b.WriteString("## Files\n\n| File | Type | Size | Bits per weight | SHA256 |\n| --- | --- | ---: | ---: | --- |\n")
		for _, f := range c.Files {
			bpw := "–"
			if f.BitsPerWeight > 0 {
				bpw = strconv.FormatFloat(f.BitsPerWeight, 'f', 2, 64)
			}
			sum := "–"
			if f.SHA256 != "" {
				sum = "`" + f.SHA256 + "`"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", cell(f.Name), cell(f.Type), humanBytes(f.Size), bpw, sum)
		}
		b.WriteString("\n")
		first := c.Files[0]
		run := "llama-server -m " + first.Name
		if c.Repo != "" && first.Type != "" {
			// The Hub's own snippet form (huggingface.js tasks local-apps.ts).
			run = "llama-server -hf " + c.Repo + ":" + strings.ToUpper(first.Type)
		}
		fmt.Fprintf(&b, "Run it with llama.cpp:\n\n```sh\n%s\n```\n\n", run)
	}
	pv := c.Provenance
	if pv.BaseRevision != "" || pv.BaseSHA256 != "" || pv.Adapter != "" || pv.AdapterSHA256 != "" || pv.PhonellmVersion != "" || len(pv.Commands) > 0 {
		b.WriteString("## Provenance\n\n")
		row := func(k, v string) {
			if v != "" {
				fmt.Fprintf(&b, "- %s: %s\n", k, v)
			}
		}
		row("Base model", c.BaseModel)
		row("Base revision", code(pv.BaseRevision))
		row("Base checkpoint sha256", code(pv.BaseSHA256))
		row("Adapter", pv.Adapter)
		row("Adapter sha256", code(pv.AdapterSHA256))
		row("phonellm version", pv.PhonellmVersion)
		if len(pv.Commands) > 0 {
			b.WriteString("\nCommands:\n\n```sh\n")
			for _, cmd := range pv.Commands {
				b.WriteString(strings.ReplaceAll(cmd, "\n", " ") + "\n")
			}
			b.WriteString("```\n")
		}
		b.WriteString("\n")
	}
	if len(c.Fit) > 0 {
		b.WriteString("## Phone fit\n\n| Phone profile | File | Context | Needs | Budget | Fits |\n| --- | --- | ---: | ---: | ---: | --- |\n")
		for _, f := range c.Fit {
			fits := "no"
			if f.Fits {
				fits = "yes"
			}
			if f.Headroom != "" {
				fits += " (" + cell(f.Headroom) + ")"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", cell(f.Profile), cell(f.File), f.Context, humanBytes(f.Need), humanBytes(f.Budget), fits)
		}
		b.WriteString("\n")
	}
	if len(c.Quantization) > 0 {
		b.WriteString("## Quantization\n\n| File | Importance matrix | Calibration data | Mix |\n| --- | --- | --- | --- |\n")
		for _, q := range c.Quantization {
			im, data, mix := "none", "–", "llama-quantize's rules"
			if q.Imatrix != "" {
				im = cell(q.Imatrix)
				if q.ImatrixSHA256 != "" {
					im += " (sha256 `" + q.ImatrixSHA256 + "`)"
				}
				data = "–"
				if q.Dataset != "" {
					data = cell(q.Dataset)
				}
				if q.Chunks > 0 {
					data += fmt.Sprintf(", %d chunks", q.Chunks)
				}
			}
			if q.Mix != "" {
				mix = fmt.Sprintf("automatic (%s): %d --tensor-type rules in phonellm.quantize.tensor_types", cell(q.Mix), q.MixRules)
				if q.PredictedKLD > 0 {
					mix += fmt.Sprintf(", predicted KLD %.5f", q.PredictedKLD)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(q.File), im, data, mix)
		}
		b.WriteString("\n")
	}
	if len(c.Quality) > 0 {
		b.WriteString("## Quality\n\n| Metric | File | Value | Note |\n| --- | --- | ---: | --- |\n")
		for _, q := range c.Quality {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(q.Metric), cell(q.File), cell(q.Value), cell(q.Note))
		}
		b.WriteString("\n")
	}
	return b.Bytes(), nil
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

// inline makes s safe as one line of Markdown text: the name may come from a downloaded GGUF's general.name,
// so line breaks and control characters (which would start new blocks: headings, links, front matter) become
// spaces, and HTML is shown as text rather than rendered.
func inline(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// cell escapes a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// humanBytes formats a size in decimal units (as the Hub shows them).
func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %cB", float64(n)/float64(div), "kMGTP"[exp])
}
