package grammar

import (
	"fmt"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/runtime/engine"
)

func TestChoices(t *testing.T) {
	g, err := Choices([]string{"1", "10", "a\"b\\c\n", "", "1"})
	if err != nil {
		t.Fatal(err)
	}
	v := byteVocab("10", "a\"")
	m, _ := g.matcher(v)
	eog := int32(v.Size() - 1)
	if m.Done() || !m.CanEnd() || !m.Allows(eog) {
		t.Fatal("the empty choice: complete, not done (longer choices remain)")
	}
	if err := m.Accept('1'); err != nil || m.Done() || !m.CanEnd() || !m.Allows('0') || m.Allows('1') {
		t.Fatalf("after 1: %v done %v", err, m.Done())
	}
	m.Accept('0')
	if !m.Done() {
		t.Fatal("after 10: only the end can follow")
	}
	for _, s := range []string{"a\"b\\c\n", "10", ""} {
		if !accepts(t, g, s) {
			t.Fatalf("rejects %q", s)
		}
	}
	for _, s := range []string{"a", "100", "2"} {
		if accepts(t, g, s) {
			t.Fatalf("accepts %q", s)
		}
	}
	mask := engine.NewTokenMask(v.Size())
	m, _ = g.matcher(v)
	m.Allowed(mask)
	if !mask.Has(256) || !mask.Has(257) || !mask.Has('1') || !mask.Has('a') || mask.Has('b') || mask.Count() != 5 {
		t.Fatalf("first tokens: %d allowed", mask.Count())
	}
	for _, bad := range [][]string{nil, {"ok", "a\x00"}, {"\xff"}, make([]string, MaxChoices+1)} {
		if _, err := Choices(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if !strings.Contains(Literal("x\"\\\n\t\x01é"), `"x\"\\\n\t\x01é"`) {
		t.Fatalf("literal %s", Literal("x\"\\\n\t\x01é"))
	}
}

// TestConcurrentMatchers: one Grammar and one Vocabulary shared by many
// generations at once (the trie and the token-text index are built by
// whichever comes first); run with -race.
func TestConcurrentMatchers(t *testing.T) {
	g, err := Parse("root ::= <[65]> [a-z]{1,4} | \"RISK_LEVEL: \" [1-5]")
	if err != nil {
		t.Fatal(err)
	}
	v := testVocab(newRand(9), testAlphabet, 300)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			m, err := g.NewMatcher(v)
			if err != nil {
				errs <- err
				return
			}
			seed := uint64(i)
			s := engine.NewSampler(engine.SamplingParams{Temperature: 1.5, Seed: &seed})
			s.Constrain(m, v.Size())
			rng := newRand(seed)
			logits := make([]float32, v.Size())
			for range 20 {
				if m.Done() {
					errs <- nil
					return
				}
				for j := range logits {
					logits[j] = float32(rng.NormFloat64())
				}
				tok, _ := s.Sample(logits, nil)
				if err := s.Err(); err != nil {
					errs <- err
					return
				}
				if v.IsEOG(tok) {
					errs <- nil
					return
				}
			}
			errs <- fmt.Errorf("generation %d did not complete", i)
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
