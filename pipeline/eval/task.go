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

// Endpoint is an OpenAI-compatible server, or the answers one gave in an
// earlier run (File).
type Endpoint struct {
	// BaseURL is the server root; requests go to {BaseURL}/v1/chat/completions (a trailing "/v1" is accepted).
	BaseURL string `json:"base_url,omitempty"`
	// File, instead of BaseURL, is a JSONL file of answers saved by an
	// earlier run (TaskOptions.Save) on the same dataset.
	File string `json:"file,omitempty"`
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
	// Scores, when it names labels, reads each answer's label probabilities
	// and adds calibration figures (scores.go).
	Scores ScoreOptions `json:"scores,omitzero"`
	// Save, when set, is a JSONL file the endpoint's answers are written to
	// (answers.go), so that a later run can compare with them as Vs.
	Save string `json:"save,omitempty"`

	sleep func(context.Context, time.Duration) error // back-off wait; nil means a timer (tests replace it)
}

// Validate checks o without touching files or the network.
func (o TaskOptions) Validate() error {
	switch {
	case o.Dataset == "":
		return errors.New("eval: task check needs a labelled dataset")
	case o.Endpoint.BaseURL == "" && o.Endpoint.File == "":
		return errors.New("eval: task check needs an endpoint URL or an answers file")
	case o.Concurrency < 0, o.MaxTokens < 0, o.Timeout < 0, o.Attempts < 0:
		return fmt.Errorf("eval: negative concurrency %d, max tokens %d, timeout %v or attempts %d", o.Concurrency, o.MaxTokens, o.Timeout, o.Attempts)
	}
	if _, err := o.pattern(); err != nil {
		return err
	}
	return o.Scores.Validate()
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
	// Probs are the labels' probabilities (scored answers); nil when not
	// scored or not readable. The prediction is then the most probable.
	Probs []float64
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
				var err error
				if o.Scores.Enabled() {
					a.Reply, a.Probs, err = scoreItem(rctx, client, url, ep, items[i], o)
				} else {
					var r reply
					r, err = chat(rctx, client, url, ep, items[i].Messages, o.MaxTokens, nil)
					a.Reply = r.text
				}
				a.Latency, a.Attempts = time.Since(begin), attempt
				return err
			})
			if err := a.Err; err == nil {
				a.Prediction = extract(re, a.Reply)
				if a.Probs != nil {
					a.Prediction = labelOf(o.Scores.Labels, a.Probs)
				}
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

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
		} `json:"message"`
		Logprobs *struct {
			Content []lpEntry `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

// reply is a chat completion's text and, when asked for, its logprobs.
type reply struct {
	text     string
	logprobs []lpEntry
}

// chat posts one non-streaming chat completion at temperature 0 and returns the reply. extra are further
// request fields: an output constraint asks for the reply's logprobs too.
func chat(ctx context.Context, client *http.Client, url string, ep Endpoint, msgs []engine.Message, maxTokens int, extra map[string]any) (reply, error) {
	fields := map[string]any{"messages": msgs, "temperature": 0, "stream": false}
	if ep.Model != "" {
		fields["model"] = ep.Model
	}
	if maxTokens > 0 {
		fields["max_tokens"] = maxTokens
	}
	if extra != nil {
		for k, v := range extra {
			fields[k] = v
		}
		fields["logprobs"] = true
		fields["top_logprobs"] = topAlternatives
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return reply{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return reply{}, fmt.Errorf("eval: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if ep.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+ep.APIKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		err = fmt.Errorf("eval: POST %s: %w", url, err)
		if retry.NetworkError(err) {
			return reply{}, retry.Transient(err)
		}
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return reply{}, retry.Transient(fmt.Errorf("eval: POST %s: read reply: %w", url, err))
	}
	if len(b) > maxResponse {
		return reply{}, fmt.Errorf("eval: POST %s: reply larger than %d bytes", url, maxResponse)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("eval: POST %s: %s: %.300s", url, resp.Status, bytes.TrimSpace(b))
		if retry.StatusRetryable(resp.StatusCode) {
			if d, ok := retry.ServerDelay(resp.Header, time.Now()); ok {
				return reply{}, retry.After(err, d)
			}
			return reply{}, retry.Transient(err)
		}
		return reply{}, err
	}
	var cr chatResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		return reply{}, fmt.Errorf("eval: POST %s: reply is not a chat completion: %w", url, err)
	}
	if len(cr.Choices) == 0 || cr.Choices[0].Message.Content == nil {
		return reply{}, fmt.Errorf("eval: POST %s: reply has no choices[0].message.content", url)
	}
	r := reply{text: *cr.Choices[0].Message.Content}
	if lp := cr.Choices[0].Logprobs; lp != nil {
		r.logprobs = lp.Content
	}
	return r, nil
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
	r, _, err := scoreItems(ctx, o, ep, items, re, o.Save, rep)
	return r, err
}

// Name is how results name the endpoint: its URL, or its answers file.
func (ep Endpoint) Name() string {
	if ep.File != "" {
		return ep.File
	}
	return ep.BaseURL
}

// scoreItems asks ep (or reads its answers file) and scores the answers;
// save, when set, is where the answers are written.
func scoreItems(ctx context.Context, o TaskOptions, ep Endpoint, items []Item, re *regexp.Regexp, save string, rep pipeline.Reporter) (TaskResult, []Answer, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	var labels []string
	if o.Scores.Enabled() {
		labels = o.Scores.Labels
	}
	begin := time.Now()
	var answers []Answer
	var err error
	if ep.File != "" {
		if answers, err = loadAnswers(ep.File, items, labels); err != nil {
			return TaskResult{}, nil, err
		}
	} else {
		step := "task " + ep.BaseURL
		pipeline.BeginItems(rep, step, int64(len(items)), "prompts")
		answers, err = ask(ctx, o, ep, items, re, rep)
		rep.End(step, err)
		if err != nil {
			return TaskResult{}, nil, err
		}
	}
	if save != "" {
		if err := saveAnswers(save, items, answers, labels); err != nil {
			return TaskResult{}, nil, err
		}
	}
	r := Score(items, answers)
	r.Endpoint, r.Model, r.Seconds = ep.Name(), ep.Model, time.Since(begin).Seconds()
	if o.Scores.Enabled() {
		if r.Scores, err = scoreMetrics(o.Scores, items, answers); err != nil {
			return TaskResult{}, nil, err
		}
	}
	return r, answers, nil
}

// CompareEndpoints scores o.Endpoint and o.Vs on the same items, both at once (each with its own
// concurrency bound), and compares their answers item by item.
func CompareEndpoints(ctx context.Context, o TaskOptions, rep pipeline.Reporter) (main, vs TaskResult, cmp Comparison, err error) {
	if err := o.Validate(); err != nil {
		return main, vs, cmp, err
	}
	if o.Vs.BaseURL == "" && o.Vs.File == "" {
		return main, vs, cmp, errors.New("eval: no second endpoint to compare with")
	}
	items, err := ReadItems(o.Dataset)
	if err != nil {
		return main, vs, cmp, err
	}
	re, _ := o.pattern()
	var ma, va []Answer
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		main, ma, err = scoreItems(gctx, o, o.Endpoint, items, re, o.Save, rep)
		return err
	})
	g.Go(func() (err error) { vs, va, err = scoreItems(gctx, o, o.Vs, items, re, "", rep); return err })
	if err := g.Wait(); err != nil {
		return main, vs, cmp, err
	}
	cmp = Compare(main, vs, ma, va)
	if main.Scores != nil && vs.Scores != nil {
		mp, vp := make([][]float64, len(ma)), make([][]float64, len(va))
		for i := range ma {
			mp[i] = ma[i].Probs
		}
		for i := range va {
			vp[i] = va[i].Probs
		}
		sc := compareScores(*main.Scores, *vs.Scores, mp, vp)
		cmp.Scores = &sc
	}
	return main, vs, cmp, nil
}
