package tinymodel

import (
	"fmt"
	"sync"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"

	"github.com/phonellm/phonellm/internal/tokenizer"
	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

// Pre-tokenizer regexes exactly as the Split pre-tokenizer of the real
// tokenizer.json files carries them (Qwen2/Qwen2.5/Qwen3; Qwen3.5 adds \p{M});
// the runtime's tokenizer implements them.
const (
	Qwen2Regex  = tokenizer.RegexQwen2
	Qwen35Regex = tokenizer.RegexQwen35
)

// maxTokenizerSize bounds Spec.TokenizerSize by what the built-in corpus
// can teach (checked by TestTokenizerCapacity).
const maxTokenizerSize = 1200

func byteLevelString(s string) string {
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, bytelevel.Rune[s[i]])
	}
	return string(out)
}

// pretokenize splits NFC-normalized text into pieces with the Split
// pre-tokenizer's regex (behavior Isolated: matches and the gaps between
// them are pieces).
func pretokenize(re *regexp2.Regexp, text string) ([]string, error) {
	var pieces []string
	runes := []rune(text)
	last := 0
	m, err := re.FindRunesMatch(runes)
	for m != nil && err == nil {
		if m.Index > last {
			pieces = append(pieces, string(runes[last:m.Index]))
		}
		if m.Length > 0 {
			pieces = append(pieces, string(runes[m.Index:m.Index+m.Length]))
		}
		last = m.Index + m.Length
		m, err = re.FindNextMatch(m)
	}
	if err != nil {
		return nil, err
	}
	if last < len(runes) {
		pieces = append(pieces, string(runes[last:]))
	}
	return pieces, nil
}

// bpeModel is a trained byte-level BPE: tokens by id and merges by rank.
type bpeModel struct {
	tokens []string
	merges [][2]string
}

var (
	bpeMu    sync.Mutex
	bpeCache = map[string]*bpeModel{}
)

// trainBPE learns numMerges merges from the built-in corpus: classic BPE
// over the pre-tokenized, byte-level-mapped words, always merging the most
// frequent adjacent pair (ties: the lowest pair of token ids).
func trainBPE(regex string, numMerges int) (*bpeModel, error) {
	key := fmt.Sprintf("%s\x00%d", regex, numMerges)
	bpeMu.Lock()
	defer bpeMu.Unlock()
	if m, ok := bpeCache[key]; ok {
		return m, nil
	}
	re, err := regexp2.Compile(regex, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("tinymodel: compile pre-tokenizer regex: %w", err)
	}
	pieces, err := pretokenize(re, norm.NFC.String(corpus))
	if err != nil {
		return nil, fmt.Errorf("tinymodel: pre-tokenize corpus: %w", err)
	}
	m := &bpeModel{}
	ids := map[string]int{}
	// The first 256 tokens are the byte symbols in bytes_to_unicode's order, as in GPT-2-style vocabularies.
	for _, b := range bytelevel.Order {
		ids[string(bytelevel.Rune[b])] = len(m.tokens)
		m.tokens = append(m.tokens, string(bytelevel.Rune[b]))
	}
	type word struct {
		syms  []int
		count int
	}
	index := map[string]int{}
	var words []word
	for _, p := range pieces {
		if i, ok := index[p]; ok {
			words[i].count++
			continue
		}
		index[p] = len(words)
		w := word{count: 1}
		for i := 0; i < len(p); i++ {
			w.syms = append(w.syms, ids[string(bytelevel.Rune[p[i]])])
		}
		words = append(words, w)
	}
	for len(m.merges) < numMerges {
		counts := map[[2]int]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				counts[[2]int{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		best, bestN := [2]int{}, 0
		for p, n := range counts {
			if n > bestN || n == bestN && (p[0] < best[0] || p[0] == best[0] && p[1] < best[1]) {
				best, bestN = p, n
			}
		}
		if bestN == 0 {
			return nil, fmt.Errorf("tinymodel: corpus supports only %d merges, %d requested", len(m.merges), numMerges)
		}
		a, b := m.tokens[best[0]], m.tokens[best[1]]
		merged := a + b
		id, ok := ids[merged]
		if !ok {
			id = len(m.tokens)
			ids[merged] = id
			m.tokens = append(m.tokens, merged)
		}
		m.merges = append(m.merges, [2]string{a, b})
		for wi := range words {
			s := words[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, id)
					i++
					continue
				}
				out = append(out, s[i])
			}
			words[wi].syms = out
		}
	}
	bpeCache[key] = m
	return m, nil
}
