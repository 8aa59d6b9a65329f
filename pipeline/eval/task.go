package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/phonellm/phonellm/internal/retry"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/runtime/engine"
)

// DefaultPattern extracts the answer of the fraud-review task.
const DefaultPattern = `RISK_LEVEL:\s*(\d+)`

const (
	defaultConcurrency = 4
	defaultTimeout     = 10 * time.Minute // a 7k-token prompt on a phone CPU takes minutes
	maxResponse        = 16 << 20
	maxErrors          = 5 // error messages kept in a TaskResult
	defaultAttempts    = 3
)

// Endpoint is an OpenAI-compatible server.
type Endpoint struct {
	// BaseURL is the server root; requests go to {BaseURL}/v1/chat/completions (a trailing "/v1" is accepted).
	BaseURL string `json:"base_url"`
	// APIKey, when set, is sent as "Authorization: Bearer …".
	APIKey string `json:"-"`
	// Model is the "model" field of the requests; some servers require it.
	Model string `json:"model,omitempty"`
}

// TaskOptions configure the task check.
type TaskOptions struct {
	// Dataset is a labelled JSONL file: {"messages":[{"role":…,"content":…},…],"label":"5"} per line.
	Dataset string `json:"dataset"`
	// Pattern extracts the answer from the reply: its first capture group (the whole match without one),
	// from the last match in the reply. Default DefaultPattern.
	Pattern string `json:"pattern,omitempty"`
	// Endpoint is the model under test.
	Endpoint Endpoint `json:"endpoint"`
	// Vs, when its BaseURL is set, is scored on the same items as the baseline (e.g. the fine-tuned model
	// at full precision, or another provider).
	Vs Endpoint `json:"vs,omitzero"`
	// Concurrency bounds requests in flight per endpoint; default 4.
	Concurrency int `json:"concurrency,omitempty"`
	// MaxTokens is sent as max_tokens when > 0.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Timeout bounds one request; default 10 minutes.
	Timeout time.Duration `json:"-"`
	// Attempts bounds the tries of one item (default 3): a chat completion at temperature 0 is repeated
	// after a network error or a 408/429/5xx reply, with jittered back-off and the server's Retry-After.
	Attempts int `json:"-"`
	// Client is the HTTP client; default http.DefaultClient.
	Client *http.Client `json:"-"`

	sleep func(context.Context, time.Duration) error // back-off wait; nil means a timer (tests replace it)
}

// Validate checks o without touching files or the network.
func (o TaskOptions) Validate() error {
	switch {
	case o.Dataset == "":
		return errors.New("eval: task check needs a labelled dataset")
	case o.Endpoint.BaseURL == "":
		return errors.New("eval: task check needs an endpoint URL")
	case o.Concurrency < 0, o.MaxTokens < 0, o.Timeout < 0, o.Attempts < 0:
		return fmt.Errorf("eval: negative concurrency %d, max tokens %d, timeout %v or attempts %d", o.Concurrency, o.MaxTokens, o.Timeout, o.Attempts)
	}
	if _, err := o.pattern(); err != nil {
		return err
	}
	return nil
}

func (o TaskOptions) pattern() (*regexp.Regexp, error) {
	p := o.Pattern
	if p == "" {
		p = DefaultPattern
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("eval: answer pattern %q: %w", p, err)
	}
	return re, nil
}

// Item is one labelled prompt.
type Item struct {
	Messages []engine.Message `json:"messages"`
	Label    string           `json:"label"`
}

// ReadItems reads a labelled JSONL dataset. A numeric label may be written as a JSON number.
func ReadItems(path string) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	var out []Item
	err = eachJSONL(f, path, func(line int, raw []byte) error {
		var rec struct {
			Messages []engine.Message `json:"messages"`
			Label    json.RawMessage  `json:"label"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return &FormatError{File: path, Line: line, Msg: "not a JSON object: " + err.Error()}
		}
		if len(rec.Messages) == 0 {
			return &FormatError{File: path, Line: line, Msg: `no "messages"`}
		}
		if err := checkMessages(rec.Messages); err != nil {
			return &FormatError{File: path, Line: line, Msg: err.Error()}
		}
		label, err := labelString(rec.Label)
		if err != nil {
			return &FormatError{File: path, Line: line, Msg: err.Error()}
		}
		out = append(out, Item{Messages: rec.Messages, Label: label})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, &FormatError{File: path, Msg: "no labelled items"}
	}
	return out, nil
}

func labelString(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s = strings.TrimSpace(s); s != "" {
			return s, nil
		}
		return "", errors.New(`empty "label"`)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), nil
	}
	return "", errors.New(`want a string or number "label"`)
}

// Answer is what an endpoint replied to one item.
type Answer struct {
	Prediction string        // extracted answer; "" when unparsable or failed
	Reply      string        // full reply text
	Latency    time.Duration // round trip of the successful request
	Attempts   int           // requests made
	Err        error         // request failure (after the last attempt)
}

// ask sends every item to ep with at most conc requests in flight and returns the answers in item order.
func ask(ctx context.Context, o TaskOptions, ep Endpoint, items []Item, re *regexp.Regexp, rep pipeline.Reporter) ([]Answer, error) {
	conc := o.Concurrency
	if conc == 0 {
		conc = defaultConcurrency
	}
	client := o.Client
	if client == nil {
		client = http.DefaultClient
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	pol := retry.Policy{Attempts: o.Attempts, Sleep: o.sleep}
	if pol.Attempts == 0 {
		pol.Attempts = defaultAttempts
	}
	url := strings.TrimSuffix(strings.TrimSuffix(ep.BaseURL, "/"), "/v1") + "/v1/chat/completions"
	answers := make([]Answer, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for i := range items {
		g.Go(func() error {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			var a Answer
			a.Err = pol.Do(gctx, func(attempt int) error {
				rctx, cancel := context.WithTimeout(gctx, timeout)
				defer cancel()
				begin := time.Now()
				reply, err := chat(rctx, client, url, ep, items[i].Messages, o.MaxTokens)
				a.Reply, a.Latency, a.Attempts = reply, time.Since(begin), attempt
				return err
			})
			if err := a.Err; err == nil {
				a.Prediction = extract(re, a.Reply)
			} else if ctx.Err() != nil {
				return ctx.Err()
			}
			answers[i] = a
			rep.Add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return answers, nil
}

// extract returns the answer of the last match of re in reply: its first capture group, or the whole
// match when re has none.
func extract(re *regexp.Regexp, reply string) string {
	all := re.FindAllStringSubmatch(reply, -1)
	if len(all) == 0 {
		return ""
	}
	m := all[len(all)-1]
	if len(m) > 1 {
		return strings.TrimSpace(m[1])
	}
	return strings.TrimSpace(m[0])
}

type chatRequest struct {
	Model       string           `json:"model,omitempty"`
	Messages    []engine.Message `json:"messages"`
	Temperature float64          `json:"temperature"`
	Stream      bool             `json:"stream"`
	MaxTokens   int              `json:"max_tokens,omitempty"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
}

// chat posts one non-streaming chat completion at temperature 0 and returns the reply text.
func chat(ctx context.Context, client *http.Client, url string, ep Endpoint, msgs []engine.Message, maxTokens int) (string, error) {
	body, err := json.Marshal(chatRequest{Model: ep.Model, Messages: msgs, MaxTokens: maxTokens})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("eval: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if ep.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+ep.APIKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		err = fmt.Errorf("eval: POST %s: %w", url, err)
		if retry.NetworkError(err) {
			return "", retry.Transient(err)
		}
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return "", retry.Transient(fmt.Errorf("eval: POST %s: read reply: %w", url, err))
	}
	if len(b) > maxResponse {
		return "", fmt.Errorf("eval: POST %s: reply larger than %d bytes", url, maxResponse)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("eval: POST %s: %s: %.300s", url, resp.Status, bytes.TrimSpace(b))
		if retry.StatusRetryable(resp.StatusCode) {
			if d, ok := retry.ServerDelay(resp.Header, time.Now()); ok {
				return "", retry.After(err, d)
			}
			return "", retry.Transient(err)
		}
		return "", err
	}
	var cr chatResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		return "", fmt.Errorf("eval: POST %s: reply is not a chat completion: %w", url, err)
	}
	if len(cr.Choices) == 0 || cr.Choices[0].Message.Content == nil {
		return "", fmt.Errorf("eval: POST %s: reply has no choices[0].message.content", url)
	}
	return *cr.Choices[0].Message.Content, nil
}

// ScoreTask scores one endpoint on the dataset of o.
func ScoreTask(ctx context.Context, o TaskOptions, ep Endpoint, rep pipeline.Reporter) (TaskResult, error) {
	if err := o.Validate(); err != nil {
		return TaskResult{}, err
	}
	items, err := ReadItems(o.Dataset)
	if err != nil {
		return TaskResult{}, err
	}
	re, _ := o.pattern()
	r, _, err := scoreItems(ctx, o, ep, items, re, rep)
	return r, err
}

func scoreItems(ctx context.Context, o TaskOptions, ep Endpoint, items []Item, re *regexp.Regexp, rep pipeline.Reporter) (TaskResult, []Answer, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	step := "task " + ep.BaseURL
	rep.Begin(step, int64(len(items)))
	begin := time.Now()
	answers, err := ask(ctx, o, ep, items, re, rep)
	rep.End(step, err)
	if err != nil {
		return TaskResult{}, nil, err
	}
	r := Score(items, answers)
	r.Endpoint, r.Model, r.Seconds = ep.BaseURL, ep.Model, time.Since(begin).Seconds()
	return r, answers, nil
}

// CompareEndpoints scores o.Endpoint and o.Vs on the same items, both at once (each with its own
// concurrency bound), and compares their answers item by item.
func CompareEndpoints(ctx context.Context, o TaskOptions, rep pipeline.Reporter) (main, vs TaskResult, cmp Comparison, err error) {
	if err := o.Validate(); err != nil {
		return main, vs, cmp, err
	}
	if o.Vs.BaseURL == "" {
		return main, vs, cmp, errors.New("eval: no second endpoint to compare with")
	}
	items, err := ReadItems(o.Dataset)
	if err != nil {
		return main, vs, cmp, err
	}
	re, _ := o.pattern()
	var ma, va []Answer
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { main, ma, err = scoreItems(gctx, o, o.Endpoint, items, re, rep); return err })
	g.Go(func() (err error) { vs, va, err = scoreItems(gctx, o, o.Vs, items, re, rep); return err })
	if err := g.Wait(); err != nil {
		return main, vs, cmp, err
	}
	return main, vs, Compare(main, vs, ma, va), nil
}
