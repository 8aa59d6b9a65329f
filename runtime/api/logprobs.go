package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/runtime/engine"
)

// Log-probabilities. /v1/chat/completions takes logprobs (bool) and
// top_logprobs (0-20) and answers choices[].logprobs.content, one entry per
// output token ({token, logprob, bytes, top_logprobs}); /v1/completions
// takes logprobs (an integer, 0-20) and answers OpenAI's legacy shape
// (tokens, token_logprobs, top_logprobs, text_offset). Streams carry the
// entries of the tokens whose text a chunk shows.
//
// The distribution is the model's own: the log-softmax of the logits the
// forward pass returned, before repetition/frequency/presence penalties, the
// grammar or choices constraint, temperature and top-k/top-p/min-p
// (engine.LogprobsModel). That is what OpenAI documents ("the log
// probability of this token") and what llama-server reports by default
// (n_probs with post_sampling_probs false: probabilities from the raw
// logits). So under a constraint the alternatives may include tokens the
// constraint forbade, and a forced token may have a low probability: the
// figures say what the model believed, not what the sampler was allowed to
// do. A token's text is the bytes it adds to the output (empty for a control
// token, as llama-server shows it without --special); bytes holds them
// exactly when a token is part of a UTF-8 character. Tokens of a stop
// sequence, whose text is cut from the answer, have no entry.

// impossible is the log-probability written for a token of probability 0
// (JSON has no -Inf), OpenAI's convention.
const impossible = -9999.0

// ChatLogprobs is a chat choice's logprobs.
type ChatLogprobs struct {
	Content []TokenLogprobOut `json:"content"`
	Refusal []TokenLogprobOut `json:"refusal"`
}

// TokenLogprobOut is one output token's entry.
type TokenLogprobOut struct {
	Token       string          `json:"token"`
	Logprob     float64         `json:"logprob"`
	Bytes       []int           `json:"bytes"`
	TopLogprobs []TopLogprobOut `json:"top_logprobs"`
}

// TopLogprobOut is one alternative of a token.
type TopLogprobOut struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// CompletionLogprobs is a text completion choice's logprobs (OpenAI's
// legacy shape). TopLogprobs maps each alternative's text to its
// log-probability, most likely first (alternatives with the same text keep
// the most likely).
type CompletionLogprobs struct {
	Tokens        []string     `json:"tokens"`
	TokenLogprobs []float64    `json:"token_logprobs"`
	TopLogprobs   []orderedMap `json:"top_logprobs"`
	TextOffset    []int        `json:"text_offset"`
}

// orderedMap is a JSON object whose keys keep their order.
type orderedMap []struct {
	Key   string
	Value float64
}

func (m orderedMap) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, kv := range m {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(kv.Key)
		buf.Write(k)
		buf.WriteByte(':')
		buf.WriteString(strconv.FormatFloat(kv.Value, 'g', -1, 64))
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the object in its order.
func (m *orderedMap) UnmarshalJSON(b []byte) error {
	kvs, err := orderedObject(b)
	if err != nil {
		return err
	}
	*m = (*m)[:0]
	for _, kv := range kvs {
		var v float64
		if err := json.Unmarshal(kv.value, &v); err != nil {
			return err
		}
		*m = append(*m, struct {
			Key   string
			Value float64
		}{kv.key, v})
	}
	return nil
}

func finite(lp float64) float64 {
	if math.IsInf(lp, -1) || math.IsNaN(lp) || lp < impossible {
		return impossible
	}
	return lp
}

func byteList(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

// chatLogprobEntries turns engine records into chat entries.
func chatLogprobEntries(steps []engine.StepLogprobs) []TokenLogprobOut {
	out := make([]TokenLogprobOut, len(steps))
	for i, st := range steps {
		e := TokenLogprobOut{Token: st.Token.Piece, Logprob: finite(st.Token.Logprob), Bytes: byteList(st.Token.Piece),
			TopLogprobs: make([]TopLogprobOut, len(st.Top))}
		for j, a := range st.Top {
			e.TopLogprobs[j] = TopLogprobOut{Token: a.Piece, Logprob: finite(a.Logprob), Bytes: byteList(a.Piece)}
		}
		out[i] = e
	}
	return out
}

// completionLogprobs turns engine records into the legacy shape; offset is
// the text offset of the first.
func completionLogprobs(steps []engine.StepLogprobs, offset int) *CompletionLogprobs {
	out := &CompletionLogprobs{Tokens: make([]string, len(steps)), TokenLogprobs: make([]float64, len(steps)),
		TopLogprobs: make([]orderedMap, len(steps)), TextOffset: make([]int, len(steps))}
	for i, st := range steps {
		out.Tokens[i] = st.Token.Piece
		out.TokenLogprobs[i] = finite(st.Token.Logprob)
		out.TextOffset[i] = offset
		offset += len(st.Token.Piece)
		m := orderedMap{}
		seen := map[string]bool{}
		for _, a := range st.Top {
			if seen[a.Piece] {
				continue
			}
			seen[a.Piece] = true
			m = append(m, struct {
				Key   string
				Value float64
			}{a.Piece, finite(a.Logprob)})
		}
		out.TopLogprobs[i] = m
	}
	return out
}

// visibleSteps returns the records of the tokens whose text begins within
// text's first n bytes: a stop sequence cuts the rest.
func visibleSteps(steps []engine.StepLogprobs, n int) []engine.StepLogprobs {
	off := 0
	for i, st := range steps {
		if off >= n {
			return steps[:i]
		}
		off += len(st.Token.Piece)
	}
	return steps
}

// logprobQueue releases a stream's records as the text of their tokens
// becomes visible.
type logprobQueue struct {
	pending []engine.StepLogprobs
	starts  []int
	next    int // offset of the next token's text
	shown   int // bytes of text shown
	offset  int // text offset of the first record not yet released
}

func (q *logprobQueue) add(st engine.StepLogprobs) {
	q.pending = append(q.pending, st)
	q.starts = append(q.starts, q.next)
	q.next += len(st.Token.Piece)
}

// show records that n more bytes of text are visible and returns the
// records whose text starts in what is shown, with the text offset of the
// first.
func (q *logprobQueue) show(n int) ([]engine.StepLogprobs, int) {
	q.shown += n
	k := 0
	for k < len(q.pending) && q.starts[k] < q.shown {
		k++
	}
	if k == 0 {
		return nil, q.offset
	}
	out := q.pending[:k:k]
	off := q.offset
	for _, st := range out {
		q.offset += len(st.Token.Piece)
	}
	q.pending, q.starts = q.pending[k:], q.starts[k:]
	return out, off
}

// logprobOptions reads a chat request's logprobs and top_logprobs.
func (c *ChatRequest) logprobOptions() (*engine.LogprobOptions, *httpx.Error) {
	on := c.Logprobs != nil && *c.Logprobs
	if c.TopLogprobs != nil {
		n := *c.TopLogprobs
		if n < 0 || n > engine.MaxTopLogprobs {
			return nil, httpx.BadRequest("top_logprobs", "", "Invalid 'top_logprobs': %d is outside [0, %d].", n, engine.MaxTopLogprobs)
		}
		if !on && n > 0 {
			return nil, httpx.BadRequest("top_logprobs", "", "Invalid 'top_logprobs': it needs 'logprobs' to be true.")
		}
		if on {
			return &engine.LogprobOptions{Top: n}, nil
		}
	}
	if on {
		return &engine.LogprobOptions{}, nil
	}
	return nil, nil
}

// logprobOptions reads a completion request's logprobs (an integer).
func (c *CompletionRequest) logprobOptions() (*engine.LogprobOptions, *httpx.Error) {
	if isNull(c.Logprobs) {
		return nil, nil
	}
	var n int
	if err := json.Unmarshal(c.Logprobs, &n); err != nil || n < 0 || n > engine.MaxTopLogprobs {
		return nil, httpx.BadRequest("logprobs", "", "Invalid 'logprobs': want an integer in [0, %d] (the alternatives to list per token).", engine.MaxTopLogprobs)
	}
	return &engine.LogprobOptions{Top: n}, nil
}
