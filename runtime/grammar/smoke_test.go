package grammar

import (
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
)

func byteVocab(extra ...string) *engine.Vocabulary {
	var toks []engine.VocabToken
	for b := range 256 {
		toks = append(toks, engine.VocabToken{Piece: string([]byte{byte(b)}), Text: string([]byte{byte(b)})})
	}
	for _, e := range extra {
		toks = append(toks, engine.VocabToken{Piece: e, Text: e})
	}
	toks = append(toks, engine.VocabToken{Text: "<|im_end|>", EOG: true})
	return engine.NewVocabulary(toks)
}

func TestSmoke(t *testing.T) {
	g, err := Choices([]string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 10"})
	if err != nil {
		t.Fatal(err)
	}
	v := byteVocab("RISK", "_LEVEL", ": ", ": 1", "10")
	m, err := g.NewMatcher(v)
	if err != nil {
		t.Fatal(err)
	}
	mask := engine.NewTokenMask(v.Size())
	n, err := m.Allowed(mask)
	t.Log(n, err)
	for i := range v.Size() {
		if mask.Has(int32(i)) != m.Allows(int32(i)) {
			t.Fatalf("token %d", i)
		}
		if mask.Has(int32(i)) {
			t.Logf("allowed %q", v.Piece(int32(i)))
		}
	}
	for _, tok := range []int32{256, 257, 259} {
		if err := m.Accept(tok); err != nil {
			t.Fatal(err)
		}
	}
	n, err = m.Allowed(mask)
	for i := range v.Size() {
		if mask.Has(int32(i)) {
			t.Logf("allowed %q done=%v", v.Piece(int32(i)), m.Done())
		}
	}
	m.Accept('0')
	t.Log(m.Done())
}
