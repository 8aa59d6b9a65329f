package api

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/testkit/tinygguf"
	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/runtime/enginetest"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// TestGrammarsAcceptedByLlamaCpp: the GBNF this server sends to
// llama-server (serve --engine llama-server, and what clients of a phone
// fleet send as "grammar") is llama.cpp's: upstream llama.cpp (the npm
// oracle) parses every grammar the API builds (JSON schemas, json_object,
// choices, forced tool calls in both forms, with and without an open
// reasoning block), and what its grammar sampler generates under each is
// accepted by runtime/grammar.
func TestGrammarsAcceptedByLlamaCpp(t *testing.T) {
	o := oracle.Shared(t)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := tinygguf.Write(model, tinygguf.Spec{Arch: "qwen3", Seed: 181}); err != nil {
		t.Fatal(err)
	}
	prompt, err := o.Tokenize(model, "<|im_start|>user\nRate it.<|im_end|>\n<|im_start|>assistant\n", true)
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, schema := range []string{
		`{"type":"object","properties":{"risk_level":{"type":"integer","minimum":1,"maximum":5},"reason":{"type":"string","maxLength":12}},"required":["risk_level","reason"]}`,
		`{"type":"array","items":{"enum":["night","amount",3,null]},"minItems":1,"maxItems":3}`,
		`{"type":"object","properties":{"id":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{3}$"},"n":{"$ref":"#/$defs/small"}},"required":["id","n"],"$defs":{"small":{"type":"integer","minimum":-5,"maximum":50}}}`,
		`{"type":"object","properties":{"when":{"type":"string","format":"date"},"ok":{"type":"boolean"},"x":{"type":"number"}},"required":["when"]}`,
	} {
		src, err := grammar.JSONSchemaGBNF([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, src)
	}
	choices, err := grammar.Choices(riskLevels)
	if err != nil {
		t.Fatal(err)
	}
	sources = append(sources, choices.String(), grammar.JSONObject().String())
	toolsJSON, _ := json.Marshal(weatherTools)
	var raw []json.RawMessage
	json.Unmarshal(toolsJSON, &raw)
	tools, apiErr := parseTools(raw)
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	s := New(Options{})
	for _, form := range []callForm{formJSON, formXML} {
		for _, choice := range []toolChoice{{mode: "required"}, {mode: "function", name: "get_weather"}} {
			for _, think := range []bool{false, true} {
				c, apiErr := s.toolConstraint(tools, choice, true, form, think)
				if apiErr != nil {
					t.Fatal(apiErr)
				}
				sources = append(sources, c.(*grammar.Grammar).String())
			}
		}
	}
	vocab := enginetest.NewFake(enginetest.Options{}).Vocabulary()
	gf, err := gguf.OpenFile(model)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.FromGGUF(gf)
	gf.Close()
	if err != nil {
		t.Fatal(err)
	}
	invalid := 0
	for i, src := range sources {
		samples, err := o.GrammarSamples(model, src, prompt, 160, 4, 1, 7*i)
		if err != nil {
			t.Fatalf("grammar %d: llama.cpp: %v\n%s", i, err, src)
		}
		g, err := grammar.Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		complete := 0
		for _, smp := range samples {
			// The exact bytes (the oracle's text would replace broken UTF-8).
			var sb strings.Builder
			for _, id := range smp.Tokens {
				sb.WriteString(tk.Piece(int32(id)))
			}
			text := sb.String()
			if !utf8.ValidString(text) {
				// llama.cpp's matcher reads some invalid UTF-8 as code points; this
				// one generates only valid UTF-8 (runtime/grammar's doc): not comparable.
				invalid++
				continue
			}
			m, err := g.NewMatcher(vocab)
			if err != nil {
				t.Fatal(err)
			}
			for k := range len(text) {
				if err := m.Accept(int32(text[k])); err != nil {
					t.Fatalf("grammar %d: llama.cpp generated %q, refused at byte %d: %v\n%s", i, text, k, err, src)
				}
			}
			if smp.EOG {
				complete++
				if !m.Allows(enginetest.TokenIMEnd) {
					t.Fatalf("grammar %d: llama.cpp ended %q, which is not complete here\n%s", i, text, src)
				}
			}
		}
		t.Logf("grammar %d: %d of %d samples complete", i, complete, len(samples))
	}
	t.Logf("%d of %d samples were not UTF-8 (not compared)", invalid, 4*len(sources))
	if 2*invalid > 4*len(sources) {
		t.Fatalf("%d of %d samples were not UTF-8: too few compared", invalid, 4*len(sources))
	}
}
