package gateway

import (
	"bytes"
	"encoding/json"
)

// usage is what a replica said about a request's prompt: its tokens, how many of them came from the
// replica's cache, and how long evaluating the rest took. The gateway never guesses these: a replica that says
// nothing leaves known false.
type usage struct {
	known     bool
	prompt    int     // prompt tokens in all
	cached    int     // of which reused from the replica's cache
	promptSec float64 // evaluation time of the uncached part; 0 when not reported
}

// evaluated is the number of prompt tokens the replica computed.
func (u usage) evaluated() int { return max(u.prompt-u.cached, 0) }

// hit says whether the replica reused at least half of the prompt: the request-level notion of a cache hit
// (the token-level hit rate is cached/prompt over many requests).
func (u usage) hit() bool { return u.known && u.prompt > 0 && 2*u.cached >= u.prompt }

// usageFields are the places OpenAI-compatible servers report prompt caching: OpenAI's and phonellm serve's
// usage.prompt_tokens_details.cached_tokens, llama-server's timings (prompt_n evaluated, cache_n reused,
// prompt_ms), and llama-server's native /completion (tokens_evaluated, tokens_cached).
type usageFields struct {
	Usage *struct {
		PromptTokens *int `json:"prompt_tokens"`
		Details      *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Timings *struct {
		PromptN  *int     `json:"prompt_n"`
		CacheN   *int     `json:"cache_n"`
		PromptMS *float64 `json:"prompt_ms"`
	} `json:"timings"`
	TokensEvaluated *int `json:"tokens_evaluated"`
	TokensCached    *int `json:"tokens_cached"`
}

// maxUsageBody bounds the JSON object parsed for usage (a non-streaming answer is held anyway; an event of a
// stream is one line).
const maxUsageBody = 1 << 20

// parseUsage reads the usage of one JSON object (a whole answer, or one streamed event's data). It returns the
// zero usage when the object says nothing about the prompt.
func parseUsage(b []byte) usage {
	if len(b) > maxUsageBody || !bytes.Contains(b, []byte(`"`)) {
		return usage{}
	}
	var f usageFields
	if json.Unmarshal(b, &f) != nil {
		return usage{}
	}
	var u usage
	prompt, cached := -1, -1
	if t := f.Timings; t != nil && t.PromptN != nil && t.CacheN != nil && *t.PromptN >= 0 && *t.CacheN >= 0 {
		prompt, cached = *t.PromptN+*t.CacheN, *t.CacheN
	}
	if f.Usage != nil && f.Usage.PromptTokens != nil && *f.Usage.PromptTokens >= 0 {
		prompt = *f.Usage.PromptTokens
		if d := f.Usage.Details; d != nil && d.CachedTokens != nil && *d.CachedTokens >= 0 {
			cached = *d.CachedTokens
		}
	}
	if prompt < 0 && f.TokensEvaluated != nil && f.TokensCached != nil && *f.TokensEvaluated >= 0 && *f.TokensCached >= 0 {
		// llama-server's native answer: tokens_evaluated counts the whole prompt.
		prompt, cached = *f.TokensEvaluated, *f.TokensCached
	}
	if prompt < 0 || cached < 0 {
		return usage{}
	}
	u.known, u.prompt, u.cached = true, prompt, min(cached, prompt)
	if t := f.Timings; t != nil && t.PromptMS != nil && *t.PromptMS > 0 && *t.PromptMS < 1e9 {
		u.promptSec = *t.PromptMS / 1000
	}
	return u
}

// merge keeps what a later event adds: a stream reports timings in its last chunk and usage in a separate one.
func (u usage) merge(v usage) usage {
	if !v.known {
		return u
	}
	if v.promptSec == 0 {
		v.promptSec = u.promptSec
	}
	return v
}

// sseUsage collects the usage reported in a Server-Sent Events stream as it passes through: it keeps the
// current line (bounded) and parses the data lines that mention usage or timings.
type sseUsage struct {
	line    []byte
	skip    bool // the current line outgrew maxUsageBody: ignore it
	u       usage
	scanned int
}

func (s *sseUsage) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.add(p)
			return
		}
		s.add(p[:i])
		s.endLine()
		p = p[i+1:]
	}
}

func (s *sseUsage) add(p []byte) {
	if s.skip {
		return
	}
	if len(s.line)+len(p) > maxUsageBody {
		s.skip, s.line = true, s.line[:0]
		return
	}
	s.line = append(s.line, p...)
}

func (s *sseUsage) endLine() {
	line := bytes.TrimRight(s.line, "\r")
	if !s.skip {
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok &&
			(bytes.Contains(data, []byte(`"usage"`)) || bytes.Contains(data, []byte(`"timings"`))) {
			s.u = s.u.merge(parseUsage(bytes.TrimSpace(data)))
			s.scanned++
		}
	}
	s.line, s.skip = s.line[:0], false
}
