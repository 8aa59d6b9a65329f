package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// maxAnswer bounds a response read from a gateway.
const maxAnswer = 1 << 20

// IdentityError is an answer from a server that is not the deployment's gateway: another program (or another
// deployment's gateway) answers on its address.
type IdentityError struct {
	URL  string
	Want string
	Got  string
}

func (e *IdentityError) Error() string {
	if e.Got == "" {
		return fmt.Sprintf("%s is not this deployment's gateway (its answer has no %s header)", e.URL, GatewayIdentityHeader)
	}
	return fmt.Sprintf("%s is not this deployment's gateway (it answers as %q, want %q)", e.URL, e.Got, e.Want)
}

func checkIdentity(gw Gateway, h http.Header) error {
	if got := h.Get(GatewayIdentityHeader); got != gw.Identity || gw.Identity == "" {
		return &IdentityError{URL: gw.URL, Want: gw.Identity, Got: got}
	}
	return nil
}

// ProbeGateway asks a gateway for GET /health and checks that the answer carries its identity. It returns the
// health body (any status: a gateway whose replicas are all down answers 503 and is still up).
func ProbeGateway(ctx context.Context, client *http.Client, gw Gateway) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+"/health", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gateway health: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err := checkIdentity(gw, resp.Header); err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		b, _ = json.Marshal(string(b))
	}
	return b, nil
}

// FirstAnswer sends one chat request through a gateway and returns the answer and its latency in
// milliseconds. The answer counts only when the response carries the gateway's identity: a server on the same
// port that is not this deployment's gateway is an *[IdentityError], never a result.
func FirstAnswer(ctx context.Context, client *http.Client, gw Gateway, model, prompt, key string) (string, float64, error) {
	body, err := json.Marshal(map[string]any{"model": model, "max_tokens": 16, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	if err != nil {
		return "", 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, unwrapURLError(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	ms := float64(time.Since(start).Microseconds()) / 1000
	if idErr := checkIdentity(gw, resp.Header); idErr != nil {
		return "", ms, idErr
	}
	if err != nil {
		return "", ms, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", ms, fmt.Errorf("%s: %s", resp.Status, oneLine(string(raw), 300))
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) == 0 {
		return "", ms, fmt.Errorf("unexpected answer %q", oneLine(string(raw), 300))
	}
	return out.Choices[0].Message.Content, ms, nil
}

// unwrapURLError drops net/url's "Post \"http://…\": " prefix; callers name the URL themselves.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// WarmUser is the user message of a warm-up request, the same phonellm serve --warm and the phone entrypoint
// send: short, so that the evaluation is almost all the shared prefix.
const WarmUser = "Hello."

// Primed is one warm-up request sent through the gateway.
type Primed struct {
	Prefix       int     `json:"prefix"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	MS           float64 `json:"ms"`
}

// PrimeGateway sends each shared prefix once through the deployment's gateway, as a system message with a
// short user message and one token out. The replicas already warmed themselves at start (so these are cheap
// where a replica kept the prefix); what this adds is the gateway's knowledge of which replica holds which
// prefix, so the first real request of every rubric is routed to it. Answers count only with the gateway's
// identity, as in FirstAnswer.
func PrimeGateway(ctx context.Context, client *http.Client, gw Gateway, model string, prefixes []string, key string) ([]Primed, error) {
	var out []Primed
	for i, p := range prefixes {
		body, err := json.Marshal(map[string]any{"model": model, "max_tokens": 1, "temperature": 0,
			"messages": []map[string]string{{"role": "system", "content": p}, {"role": "user", "content": WarmUser}}})
		if err != nil {
			return out, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			return out, err
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return out, fmt.Errorf("warm-up prefix %d: %w", i, unwrapURLError(err))
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		resp.Body.Close()
		ms := float64(time.Since(start).Microseconds()) / 1000
		if idErr := checkIdentity(gw, resp.Header); idErr != nil {
			return out, idErr
		}
		if err != nil {
			return out, fmt.Errorf("warm-up prefix %d: reading the answer: %w", i, err)
		}
		if resp.StatusCode != http.StatusOK {
			return out, fmt.Errorf("warm-up prefix %d: %s: %s", i, resp.Status, oneLine(string(raw), 300))
		}
		var u struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(raw, &u)
		out = append(out, Primed{Prefix: i, PromptTokens: u.Usage.PromptTokens, CachedTokens: u.Usage.Details.CachedTokens, MS: ms})
	}
	return out, nil
}
